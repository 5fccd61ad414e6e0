package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the Sentinels of a Sentinel setup monitor.
const MasterName = "fairlock"

// SentinelDownAfter is how long the Sentinels started here wait before
// they consider an unreachable primary down.
const SentinelDownAfter = 1000 * time.Millisecond

// Sentinels is a primary, one replica of it, and three Sentinels watching
// them (quorum 2), all on loopback ports.
type Sentinels struct {
	Primary   *Node
	Replica   *Node
	Sentinels []*Node
	dir       string
	owned     bool
}

// StartSentinels starts the five processes with their files in dir (a fresh
// temporary directory, removed by Stop, when dir is "") and waits until the
// replica is in sync and every Sentinel knows the replica and the other
// Sentinels.
func StartSentinels(dir string) (*Sentinels, error) {
	s := &Sentinels{dir: dir}
	if dir == "" {
		d, err := os.MkdirTemp("", "fairlock-sentinel-")
		if err != nil {
			return nil, err
		}
		s.dir, s.owned = d, true
	}
	ports, err := clusterPorts(5)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Sentinels, error) { s.Stop(); return nil, err }
	if s.Primary, err = newNode(s.dir, ports[0], ""); err != nil {
		return fail(err)
	}
	if err := s.Primary.start(); err != nil {
		return fail(err)
	}
	if s.Replica, err = newNode(s.dir, ports[1], fmt.Sprintf("replicaof 127.0.0.1 %d\n", ports[0])); err != nil {
		return fail(err)
	}
	if err := s.Replica.start(); err != nil {
		return fail(err)
	}
	for _, p := range ports[2:] {
		n, err := newNode(s.dir, p, fmt.Sprintf(`sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s 10000
sentinel parallel-syncs %s 1
`, MasterName, ports[0], MasterName, SentinelDownAfter.Milliseconds(), MasterName, MasterName))
		if err != nil {
			return fail(err)
		}
		n.args = []string{"--sentinel"}
		s.Sentinels = append(s.Sentinels, n)
		if err := n.start(); err != nil {
			return fail(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		return fail(err)
	}
	return s, nil
}

func (s *Sentinels) waitReady(ctx context.Context) error {
	var last error
	for {
		last = s.ready(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sentinel setup not ready: %w", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Sentinels) ready(ctx context.Context) error {
	r := redis.NewClient(&redis.Options{Addr: s.Replica.Addr, MaxRetries: -1})
	info, err := r.Info(ctx, "replication").Result()
	_ = r.Close()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("replica %s not in sync", s.Replica.Addr)
	}
	for _, n := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		m, err := sc.Master(ctx, MasterName).Result()
		_ = sc.Close()
		if err != nil {
			return err
		}
		if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
			return fmt.Errorf("sentinel %s sees %s replicas, %s other sentinels", n.Addr, m["num-slaves"], m["num-other-sentinels"])
		}
	}
	return nil
}

// SentinelAddrs lists the Sentinels' addresses.
func (s *Sentinels) SentinelAddrs() []string {
	a := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		a[i] = n.Addr
	}
	return a
}

// Client returns a Sentinel-backed failover client, closed at the end of t.
func (s *Sentinels) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.SentinelAddrs()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr asks the first running Sentinel for the current primary.
func (s *Sentinels) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, n := range s.Sentinels {
		if !n.Running() {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		a, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
		_ = sc.Close()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1], nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel answered: %v", last)
}

// RestartAsReplica starts a killed node of the setup again as a replica of
// primary (host:port), as an operator brings back a failed primary of a
// deployment without persistence. Restarted with its own configuration it
// would come back an empty primary and stay one until the Sentinels
// demote it (about 10 s: they wait 8 s before reconfiguring an instance
// that reports the wrong role); a client that reaches it meanwhile (a
// dial begun while the Sentinels still named it, a Sentinel that has not
// heard of the failover yet) takes locks there that no one else sees, and
// a Sentinel may even promote it back, empty.
func (s *Sentinels) RestartAsReplica(n *Node, primary string) error {
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return err
	}
	n.Kill()
	n.mu.Lock()
	n.args = []string{"--replicaof", host, port}
	n.mu.Unlock()
	return n.start()
}

// Stop kills every process and removes the directory it made.
func (s *Sentinels) Stop() {
	for _, n := range append([]*Node{s.Primary, s.Replica}, s.Sentinels...) {
		if n != nil {
			n.Kill()
		}
	}
	if s.owned {
		_ = os.RemoveAll(s.dir)
	}
}

// SentinelsT starts a private Sentinel setup for t, stopped at the end of
// t. It skips t when redis-server is missing (fails under CI=true).
func SentinelsT(t testing.TB) *Sentinels {
	t.Helper()
	Long(t) // five processes and a failover: the full suite's
	s, err := StartSentinels(t.TempDir())
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(s.Stop)
	return s
}

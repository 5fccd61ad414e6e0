package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one redis-server process of a Cluster or of a Sentinel setup,
// listening on 127.0.0.1. Its configuration file lives in the setup's
// directory, so Restart brings it back with the same identity (a cluster
// node keeps its node id and rejoins, as a replica if it was failed over).
type Node struct {
	Addr string
	Port int
	conf string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// start runs the process and waits until it answers PING.
func (n *Node) start() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, append([]string{n.conf}, n.args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { // drain its log so it never blocks on a full pipe
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
		}
	}()
	n.mu.Lock()
	n.cmd = cmd
	n.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			n.Kill()
			return fmt.Errorf("redis-server on %s did not answer: %w", n.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL to the process and waits for it: a crash, nothing is
// saved. It is safe to call on a stopped node.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd := n.cmd
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill() // SIGKILL works on a paused process too
	_ = cmd.Wait()
}

// Pause stops the process with SIGSTOP: it keeps its connections but
// answers nothing (a hung server) until Resume.
func (n *Node) Pause() error { return n.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (n *Node) Resume() error { return n.signal(syscall.SIGCONT) }

func (n *Node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return errors.New("redistest: node not running")
	}
	return n.cmd.Process.Signal(sig)
}

// Restart starts a killed node again on the same port and configuration.
func (n *Node) Restart() error {
	n.Kill()
	return n.start()
}

// Running reports whether the process was started and not killed.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Cluster is a Redis Cluster of 3 primaries, each with one replica, made of
// redis-server processes on loopback ports.
type Cluster struct {
	Nodes []*Node
	dir   string
	owned bool // dir is ours to remove
}

// Addrs lists every node's address.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
	}
	return a
}

// NodeTimeout is the cluster-node-timeout of the clusters started here: a
// primary unreachable for this long is failed over by its replica.
const NodeTimeout = 1500 * time.Millisecond

// StartCluster starts six nodes with their files in dir (a fresh temporary
// directory, removed by Stop, when dir is ""), joins them with
// `redis-cli --cluster create ... --cluster-replicas 1`, and waits until
// every node reports cluster_state:ok and every replica is in sync.
func StartCluster(dir string) (*Cluster, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	if dir == "" {
		d, err := os.MkdirTemp("", "fairlock-cluster-")
		if err != nil {
			return nil, err
		}
		c.dir, c.owned = d, true
	}
	used := map[int]bool{}
	for range 6 {
		n, err := startClusterNode(c.dir, used)
		if n != nil {
			c.Nodes = append(c.Nodes, n)
		}
		if err != nil {
			c.Stop()
			return nil, err
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// WaitHealthy waits until every running node reports cluster_state:ok, sees
// 3 primaries each owning slots, and every running replica's link to its
// primary is up.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last error
	for {
		last = c.healthy(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy: %w", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context) error {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		info, err := cl.ClusterInfo(ctx).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = fmt.Errorf("%s: cluster_state not ok", n.Addr)
		}
		if err == nil {
			var repl string
			repl, err = cl.Info(ctx, "replication").Result()
			if err == nil && strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				err = fmt.Errorf("%s: replica link down", n.Addr)
			}
		}
		if err == nil {
			var shards []redis.ClusterSlot
			shards, err = cl.ClusterSlots(ctx).Result()
			owners := map[string]bool{}
			for _, s := range shards {
				if len(s.Nodes) > 0 {
					owners[s.Nodes[0].Addr] = true
				}
			}
			if err == nil && len(owners) != 3 {
				err = fmt.Errorf("%s: sees %d primaries", n.Addr, len(owners))
			}
		}
		_ = cl.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Client returns a cluster client seeded with every node, closed at the end
// of t.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Node returns the node at addr, or nil.
func (c *Cluster) Node(addr string) *Node {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// PrimaryOf asks a running node which primary serves slot.
func (c *Cluster) PrimaryOf(ctx context.Context, slot int) (string, error) {
	var last error = errors.New("no running node")
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		shards, err := cl.ClusterSlots(ctx).Result()
		_ = cl.Close()
		if err != nil {
			last = err
			continue
		}
		for _, s := range shards {
			if slot >= int(s.Start) && slot <= int(s.End) && len(s.Nodes) > 0 {
				return s.Nodes[0].Addr, nil
			}
		}
		last = fmt.Errorf("slot %d not served", slot)
	}
	return "", last
}

// Primaries lists the addresses of the primaries that serve slots, as a
// running node sees them.
func (c *Cluster) Primaries(ctx context.Context) ([]string, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		shards, err := cl.ClusterSlots(ctx).Result()
		_ = cl.Close()
		if err != nil {
			continue
		}
		seen := map[string]bool{}
		var out []string
		for _, s := range shards {
			if len(s.Nodes) > 0 && !seen[s.Nodes[0].Addr] {
				seen[s.Nodes[0].Addr] = true
				out = append(out, s.Nodes[0].Addr)
			}
		}
		return out, nil
	}
	return nil, errors.New("no running node")
}

// Stop kills every node and removes the directory it made.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Kill()
	}
	if c.owned {
		_ = os.RemoveAll(c.dir)
	}
}

// ClusterT starts a private cluster for t, stopped at the end of t. It
// skips t when redis-server or redis-cli is missing, and fails it under
// CI=true.
func ClusterT(t testing.TB) *Cluster {
	t.Helper()
	Long(t) // a six-node cluster: the full suite's
	c, err := StartCluster(t.TempDir())
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(c.Stop)
	return c
}

// SharedCluster starts one cluster per test binary on first use; call
// StopShared from TestMain after m.Run. A failed start skips every caller
// (fails under CI=true).
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	Long(t) // a six-node cluster: the full suite's
	sharedCluster.once.Do(func() {
		sharedCluster.c, sharedCluster.err = StartCluster("")
	})
	if sharedCluster.err != nil {
		unavailable(t, sharedCluster.err)
	}
	return sharedCluster.c
}

var sharedCluster struct {
	once sync.Once
	c    *Cluster
	err  error
}

// StopShared stops the cluster SharedCluster started, if any.
func StopShared() {
	if sharedCluster.c != nil {
		sharedCluster.c.Stop()
	}
}

func newNode(dir string, port int, extra string) (*Node, error) {
	conf := filepath.Join(dir, fmt.Sprintf("redis-%d.conf", port))
	text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode yes
daemonize no
save ""
appendonly no
dir %s
loglevel warning
%s`, port, dir, extra)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return nil, err
	}
	return &Node{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, conf: conf}, nil
}

// startClusterNode starts one cluster node on a port pair not in used (and
// marks it used). A node whose ports were taken between the check and its
// start (the port of another test process's server, the bus port of an
// outgoing connection) exits at once: it is started again on other ports,
// up to five times.
func startClusterNode(dir string, used map[int]bool) (*Node, error) {
	var err error
	for range 5 {
		var ports []int
		if ports, err = portsExcept(1, used); err != nil {
			return nil, err
		}
		p := ports[0]
		used[p] = true
		var n *Node
		n, err = newNode(dir, p, fmt.Sprintf(`cluster-enabled yes
cluster-config-file nodes-%d.conf
cluster-node-timeout %d
cluster-require-full-coverage no
cluster-replica-validity-factor 0
cluster-allow-replica-migration no
`, p, NodeTimeout.Milliseconds()))
		if err != nil {
			return nil, err
		}
		if err = n.start(); err == nil {
			return n, nil
		}
		n.Kill()
	}
	return nil, err
}

// ephemeralLow is the first port the kernel may hand to an outgoing
// connection (ip_local_port_range); the servers' ports, cluster bus ports
// included, are chosen below it, so no connection can take one between
// the check and the server's start.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > 21000 {
				return lo
			}
		}
	}
	return 32768
}

// clusterPorts finds n ports p where both p and the cluster bus port
// p+10000 can be bound on 127.0.0.1, below the ephemeral range.
func clusterPorts(n int) ([]int, error) { return portsExcept(n, map[int]bool{}) }

func portsExcept(n int, used map[int]bool) ([]int, error) {
	var out []int
	span := ephemeralLow() - 10000 - 10000 // p in [10000, low-10000): p+10000 < low
	for tries := 0; len(out) < n && tries < 1000; tries++ {
		p := 10000 + rand.IntN(span)
		if used[p] || used[p+10000] || used[p-10000] {
			continue
		}
		if !canBind(p) || !canBind(p+10000) {
			continue
		}
		used[p] = true
		out = append(out, p)
	}
	if len(out) < n {
		return nil, errors.New("redistest: no free port pairs for a cluster")
	}
	return out, nil
}

func canBind(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

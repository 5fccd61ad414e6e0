// Package etcdtest starts an embedded etcd member for tests and benchmarks:
// one member on free loopback ports, data in a temporary directory, stopped
// when the test ends. Heartbeat 10 ms and election 100 ms, so etcd's
// minimum lease TTL is 1 s.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is one embedded etcd member.
type Server struct {
	Endpoint string // 127.0.0.1:port of its client URL
	E        *embed.Etcd
}

// Options tune the member.
type Options struct {
	// Fsync keeps etcd's fsync of its WAL (off by default: the tests do
	// not crash the member, and fsync on a busy test machine is slow).
	Fsync bool
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts a member; it is closed when tb ends.
func Start(tb testing.TB, o Options) *Server {
	tb.Helper()
	var last error
	for range 5 { // a free port can be taken between probe and bind
		s, err := start(tb.TempDir(), o)
		if err == nil {
			tb.Cleanup(func() { s.E.Close() })
			return s
		}
		last = err
	}
	tb.Fatalf("etcdtest: %v", last)
	return nil
}

func start(dir string, o Options) (*Server, error) {
	cp, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "m0"
	cfg.Dir = dir
	cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", cp))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pp))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{os.DevNull}
	cfg.UnsafeNoFsync = !o.Fsync
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcd not ready within 60 s")
	}
	return &Server{Endpoint: fmt.Sprintf("127.0.0.1:%d", cp), E: e}, nil
}

// Client is a client of endpoint, closed when tb ends.
func Client(tb testing.TB, endpoint string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatalf("etcdtest: client: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// Cluster is a cluster of embedded members in this process, each on its
// own loopback client and peer ports and its own data directory.
type Cluster struct {
	Members []*Server
	stopped []bool
	closing []chan struct{}
}

// StartCluster starts an n-member cluster (heartbeat 50 ms, election
// 500 ms: a busy test machine does not trigger spurious elections; etcd's
// minimum lease TTL is then 1 s). Its members are closed when tb ends.
func StartCluster(tb testing.TB, n int, o Options) *Cluster {
	tb.Helper()
	var last error
	for range 3 { // a free port can be taken between probe and bind
		c, err := startCluster(tb, n, o)
		if err == nil {
			return c
		}
		last = err
	}
	tb.Fatalf("etcdtest: cluster: %v", last)
	return nil
}

func startCluster(tb testing.TB, n int, o Options) (*Cluster, error) {
	cfgs := make([]*embed.Config, n)
	var initial string
	cps := make([]int, n)
	token := fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), time.Now().UnixNano())
	for i := range n {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		cps[i] = cp
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = tb.TempDir()
		cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", cp))
		pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pp))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.TickMs, cfg.ElectionMs = 50, 500
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{os.DevNull}
		cfg.UnsafeNoFsync = !o.Fsync
		cfg.InitialClusterToken = token
		if i > 0 {
			initial += ","
		}
		initial += fmt.Sprintf("%s=%s", cfg.Name, pu.String())
		cfgs[i] = cfg
	}
	type res struct {
		i   int
		e   *embed.Etcd
		err error
	}
	ch := make(chan res, n)
	for i, cfg := range cfgs {
		cfg.InitialCluster = initial
		go func() {
			e, err := embed.StartEtcd(cfg)
			ch <- res{i, e, err}
		}()
	}
	c := &Cluster{Members: make([]*Server, n), stopped: make([]bool, n)}
	var first error
	for range n {
		r := <-ch
		if r.err != nil {
			if first == nil {
				first = r.err
			}
			continue
		}
		c.Members[r.i] = &Server{Endpoint: fmt.Sprintf("127.0.0.1:%d", cps[r.i]), E: r.e}
	}
	closeAll := func() {
		for i, m := range c.Members {
			if m != nil && !c.stopped[i] {
				c.stopped[i] = true
				m.E.Close()
			}
		}
		for _, d := range c.closing {
			<-d
		}
	}
	if first != nil {
		closeAll()
		return nil, first
	}
	deadline := time.After(60 * time.Second)
	for _, m := range c.Members {
		select {
		case <-m.E.Server.ReadyNotify():
		case err := <-m.E.Err():
			closeAll()
			return nil, err
		case <-deadline:
			closeAll()
			return nil, fmt.Errorf("cluster not ready within 60 s")
		}
	}
	tb.Cleanup(closeAll)
	return c, nil
}

// Endpoints are the client endpoints of the members, in order.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, m.Endpoint)
	}
	return out
}

// Leader is the index of the member that is leader by its own account
// (-1 if none is, e.g. during an election), among the running ones.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if !c.stopped[i] && m.E.Server.Lead() == uint64(m.E.Server.MemberID()) {
			return i
		}
	}
	return -1
}

// WaitLeader waits up to d for a running member to be leader and returns
// its index, or -1.
func (c *Cluster) WaitLeader(d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		if l := c.Leader(); l >= 0 || time.Now().After(deadline) {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops member i as a crash does: its raft node stops at once (no
// leadership hand-off), then its listeners close, so its clients' calls
// fail and they move to another endpoint.
func (c *Cluster) Kill(i int) {
	if c.stopped[i] {
		return
	}
	c.stopped[i] = true
	c.Members[i].E.Server.HardStop()
	done := make(chan struct{})
	go func() { // closing the listeners gracefully takes seconds
		defer close(done)
		c.Members[i].E.Close()
	}()
	c.closing = append(c.closing, done)
}

// ClusterClient is a client of all the given endpoints, closed when tb
// ends.
func ClusterClient(tb testing.TB, endpoints []string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatalf("etcdtest: client: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

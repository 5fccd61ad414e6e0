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

// Package embedded starts a one-member etcd in the process, on loopback
// ports, for the demo and the runnable examples (no server needed).
package embedded

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Server is a one-member etcd on loopback ports, its data in a temporary
// directory removed by Close.
type Server struct {
	Endpoint string
	e        *embed.Etcd
	dir      string
}

// FreePort is a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartEmbedded starts the member; fsync false turns off the fsync of its
// write-ahead log (etcd's --unsafe-no-fsync).
func Start(fsync bool) (*Server, error) {
	var last error
	for range 5 { // a free port can be taken between probe and bind
		s, err := start(fsync)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func start(fsync bool) (*Server, error) {
	dir, err := os.MkdirTemp("", "fairlock-etcd-demo-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Server, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cp, err := FreePort()
	if err != nil {
		return fail(err)
	}
	pp, err := FreePort()
	if err != nil {
		return fail(err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "demo"
	cfg.Dir = dir
	cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", cp))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pp))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{os.DevNull}
	cfg.UnsafeNoFsync = !fsync
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fail(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fail(err)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return fail(fmt.Errorf("embedded etcd not ready within 60 s"))
	}
	return &Server{Endpoint: fmt.Sprintf("127.0.0.1:%d", cp), e: e, dir: dir}, nil
}

// Close stops the member and removes its data.
func (s *Server) Close() {
	s.e.Close()
	_ = os.RemoveAll(s.dir)
}

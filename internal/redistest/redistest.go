// Package redistest gives tests a Redis: miniredis in process, and a real
// redis-server started on a free loopback port (or the one at $REDIS_ADDR).
//
// A real server that this package starts listens on 127.0.0.1 only, keeps
// nothing on disk, and is killed when the test binary ends (Main, and the
// kernel's parent-death signal if the binary dies first). A server named by
// $REDIS_ADDR is never flushed: tests namespace their keys with Prefix.
//
// When no redis-server binary is on PATH the real-server tests skip, except
// under CI=true, where they fail: CI must run them.
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Backend is a Redis that a test can talk to.
type Backend struct {
	Name string               // "miniredis" or "redis-server"
	Addr string               // host:port
	Mini *miniredis.Miniredis // set for miniredis
}

// Real reports whether the backend is a real redis-server.
func (b *Backend) Real() bool { return b.Mini == nil }

// Client returns a go-redis client for the backend, closed at the end of t.
func (b *Backend) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: b.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Mini starts a miniredis for t.
func Mini(t testing.TB) *Backend {
	t.Helper()
	m := miniredis.RunT(t)
	return &Backend{Name: "miniredis", Addr: m.Addr(), Mini: m}
}

var shared struct {
	once sync.Once
	srv  *Server
	addr string
	err  error
}

// Real returns the shared real redis-server: $REDIS_ADDR when set, else one
// started once per test binary. It skips t when none can be had, or fails
// t under CI=true.
func Real(t testing.TB) *Backend {
	t.Helper()
	shared.once.Do(func() {
		if a := os.Getenv("REDIS_ADDR"); a != "" {
			shared.addr = a
			return
		}
		shared.srv, shared.err = Start()
		if shared.err == nil {
			shared.addr = shared.srv.Addr
		}
	})
	if shared.err != nil {
		unavailable(t, shared.err)
	}
	return &Backend{Name: "redis-server", Addr: shared.addr}
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("real redis-server required under CI=true: %v", err)
	}
	t.Skipf("no real redis-server: %v", err)
}

// Each runs f as a subtest on miniredis and on the real server.
func Each(t *testing.T, f func(t *testing.T, b *Backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) { f(t, Mini(t)) })
	t.Run("redis-server", func(t *testing.T) { f(t, Real(t)) })
}

// Prefix returns a fresh random key prefix for one test, so tests sharing a
// server never see each other's keys.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return "t:" + hex.EncodeToString(b[:]) + ":" + name + ":"
}

// Main runs the tests and then stops the shared server, if one was started.
// Use it as TestMain's body: os.Exit(redistest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	return code
}

// Server is a redis-server process started by this package.
type Server struct {
	Addr string
	port int
	cmd  *exec.Cmd
	args []string // extra redis-server arguments (StartWith)
}

// Start starts a redis-server on a free loopback port and waits until it
// answers PING.
func Start() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	return s, s.start(bin)
}

// StartT starts a private server for t and stops it at the end of t.
func StartT(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Backend returns the server as a Backend.
func (s *Server) Backend() *Backend { return &Backend{Name: "redis-server", Addr: s.Addr} }

func (s *Server) start(bin string) error {
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--protected-mode", "yes", "--loglevel", "warning")
	s.cmd.Args = append(s.cmd.Args, s.args...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, _ := s.cmd.StdoutPipe()
	if err := s.cmd.Start(); err != nil {
		return err
	}
	go func() { // drain its log so it never blocks on a full pipe
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server on %s did not answer: %w", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit. Everything in it is lost.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server and starts a new, empty one on the same port: a
// Redis restart without persistence.
func (s *Server) Restart() error {
	s.Stop()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	return s.start(bin)
}

// freePort is a port that can be bound on 127.0.0.1, below the ephemeral
// range (see ephemeralLow) and the cluster ports' range: in [2000, 10000).
func freePort() (int, error) {
	for range 1000 {
		p := 2000 + mrand.IntN(8000)
		if canBind(p) {
			return p, nil
		}
	}
	return 0, errors.New("redistest: no free port")
}

// RealClock makes a miniredis backend's key expiry follow the real clock
// until the end of t (miniredis counts TTLs down only when told, with
// FastForward): every 5 ms it is moved on by the time that passed. Nothing
// to do on a real redis-server.
func RealClock(t testing.TB, b *Backend) {
	t.Helper()
	if b.Mini == nil {
		return
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := time.Now()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				b.Mini.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// Long marks a test that takes two seconds or more (most wait for leases,
// graces or faults in real time): `go test -short ./...`, the contributors'
// fast loop, skips it; the full suite (CI) runs it.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("long test: skipped under -short (the full suite runs it)")
	}
}

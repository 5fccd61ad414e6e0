package redistest

import (
	"errors"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// StartWith starts a redis-server like Start, with extra command-line
// configuration appended (for example "--maxclients", "100"). Restart keeps
// the same arguments.
func StartWith(args ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), args: append([]string(nil), args...)}
	return s, s.start(bin)
}

// StartWithT is StartWith for one test: the server is stopped at the end of
// t. It skips t when no redis-server can be started (fails under CI=true).
func StartWithT(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := StartWith(args...)
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Pause stops the server process with SIGSTOP: its connections stay open
// and it answers nothing until Resume (a hung server, or a VM stall).
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Pid is the server's process id, 0 when it is not running.
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redistest: server not running")
	}
	return s.cmd.Process.Signal(sig)
}

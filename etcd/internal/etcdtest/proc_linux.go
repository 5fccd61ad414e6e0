//go:build linux

package etcdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ProcCluster is a cluster of real etcd server processes (the `etcd`
// binary on PATH, e.g. Debian's etcd-server package, etcd 3.4): each
// member listens on 127.0.0.1 only, on its own free client and peer ports,
// with its own temporary data directory. The processes are killed
// (SIGKILL, after a SIGCONT) when the test ends, and by the kernel if the
// test binary dies first (parent-death signal).
type ProcCluster struct {
	tb      testing.TB
	eps     []string
	mu      sync.Mutex
	cmds    []*exec.Cmd
	killed  []bool
	stopped []bool
	logs    []string
}

// EtcdBinary is the path of the `etcd` binary, or "" when there is none.
// Under CI=true a missing binary fails the test (.ci/run installs it);
// elsewhere the test is skipped with a message.
func EtcdBinary(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("etcdtest: no etcd binary on PATH (CI=true: .ci/run installs Debian's etcd-server): %v", err)
		}
		tb.Skipf("etcdtest: no etcd binary on PATH (apt-get install etcd-server): %v", err)
	}
	return p
}

// StartProcCluster starts an n-member cluster of real etcd processes
// (heartbeat 50 ms, election 500 ms) and waits until it has a leader and
// every member answers.
func StartProcCluster(tb testing.TB, n int) *ProcCluster {
	tb.Helper()
	bin := EtcdBinary(tb)
	var last error
	for range 3 { // a free port can be taken between probe and bind
		c, err := startProcCluster(tb, bin, n)
		if err == nil {
			return c
		}
		last = err
	}
	tb.Fatalf("etcdtest: real etcd cluster: %v", last)
	return nil
}

func startProcCluster(tb testing.TB, bin string, n int) (*ProcCluster, error) {
	c := &ProcCluster{tb: tb, killed: make([]bool, n), stopped: make([]bool, n)}
	cps, pps := make([]int, n), make([]int, n)
	var initial []string
	for i := range n {
		var err error
		if cps[i], err = freePort(); err != nil {
			return nil, err
		}
		if pps[i], err = freePort(); err != nil {
			return nil, err
		}
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, pps[i]))
		c.eps = append(c.eps, fmt.Sprintf("127.0.0.1:%d", cps[i]))
	}
	token := fmt.Sprintf("etcdtest-proc-%d-%d", os.Getpid(), time.Now().UnixNano())
	for i := range n {
		dir := tb.TempDir()
		logPath := filepath.Join(dir, "etcd.log")
		logf, err := os.Create(logPath)
		if err != nil {
			c.killAll()
			return nil, err
		}
		cu := fmt.Sprintf("http://127.0.0.1:%d", cps[i])
		pu := fmt.Sprintf("http://127.0.0.1:%d", pps[i])
		cmd := exec.Command(bin,
			"--name", fmt.Sprintf("m%d", i),
			"--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", cu, "--advertise-client-urls", cu,
			"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", token,
			"--initial-cluster-state", "new",
			"--heartbeat-interval", "50", "--election-timeout", "500",
			"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
		)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			c.killAll()
			return nil, err
		}
		logf.Close()
		c.cmds = append(c.cmds, cmd)
		c.logs = append(c.logs, logPath)
	}
	// Wait until every member answers a Status and one is leader.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c.allUp() && c.Leader() >= 0 {
			break
		}
		if c.exited() || time.Now().After(deadline) {
			err := fmt.Errorf("real etcd cluster not ready within 60 s (or a member exited); log of m0:\n%s", c.tail(0))
			c.killAll()
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Cleanup(func() {
		c.killAll()
		if tb.Failed() {
			for i := range c.logs {
				tb.Logf("etcdtest: log of member m%d (tail):\n%s", i, c.tail(i))
			}
		}
	})
	return c, nil
}

// exited reports whether a member process has exited on its own (e.g. its
// port was taken).
func (c *ProcCluster) exited() bool {
	for _, cmd := range c.cmds {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil)
		if err == nil && pid == cmd.Process.Pid {
			return true
		}
	}
	return false
}

func (c *ProcCluster) tail(i int) string {
	b, _ := os.ReadFile(c.logs[i])
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func (c *ProcCluster) killAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cmd := range c.cmds {
		if c.killed[i] {
			continue
		}
		c.killed[i] = true
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Endpoints are the client endpoints of the members, in order.
func (c *ProcCluster) Endpoints() []string { return append([]string(nil), c.eps...) }

// status asks member i for its view (member ID, leader ID) within 1 s.
func (c *ProcCluster) status(i int) (id, leader uint64, err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.eps[i]}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cli.Status(ctx, c.eps[i])
	if err != nil {
		return 0, 0, err
	}
	return st.Header.MemberId, st.Leader, nil
}

func (c *ProcCluster) allUp() bool {
	for i := range c.eps {
		if _, _, err := c.status(i); err != nil {
			return false
		}
	}
	return true
}

// Leader is the index of the running (not killed, not stopped) member that
// is leader by its own account, or -1.
func (c *ProcCluster) Leader() int {
	for i := range c.eps {
		c.mu.Lock()
		down := c.killed[i] || c.stopped[i]
		c.mu.Unlock()
		if down {
			continue
		}
		if id, lead, err := c.status(i); err == nil && id == lead && id != 0 {
			return i
		}
	}
	return -1
}

// WaitLeader waits up to d for a running (not killed, not stopped) member
// to be leader by its own account and returns its index, or -1.
func (c *ProcCluster) WaitLeader(d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		if l := c.Leader(); l >= 0 || time.Now().After(deadline) {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill kills member i with SIGKILL (a crash: no leadership hand-off, its
// connections reset by the kernel).
func (c *ProcCluster) Kill(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed[i] {
		return
	}
	c.killed[i] = true
	_ = c.cmds[i].Process.Signal(syscall.SIGCONT)
	_ = c.cmds[i].Process.Kill()
	_ = c.cmds[i].Wait()
}

// Stop pauses member i with SIGSTOP: its connections stay open, it answers
// nothing, its peers stop hearing its heartbeats.
func (c *ProcCluster) Stop(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed[i] || c.stopped[i] {
		return
	}
	c.stopped[i] = true
	_ = c.cmds[i].Process.Signal(syscall.SIGSTOP)
}

// Cont resumes member i after Stop (SIGCONT).
func (c *ProcCluster) Cont(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed[i] || !c.stopped[i] {
		return
	}
	c.stopped[i] = false
	_ = c.cmds[i].Process.Signal(syscall.SIGCONT)
}

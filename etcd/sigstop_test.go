//go:build unix

package etcd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/etcd/internal/etcdtest"
)

// The paused holder, for real: the holder is a child process (this test
// binary again, running TestHelperHolder) on its own etcd connection. It
// takes the lock and writes to a fenced resource in a loop; the parent
// stops it with SIGSTOP while it holds, so nothing of it runs (no
// keep-alive, no timer, no check) until SIGCONT.

const (
	helperEnv     = "FAIRLOCK_ETCD_HELPER_HOLDER" // endpoint|lock|resource
	helperUnfence = "FAIRLOCK_ETCD_HELPER_UNFENCED"
)

// TestHelperHolder is the child's side (it does nothing in a normal run).
// It prints one line per event on stdout:
//
//	HELD <token> <key>
//	WROTE <i> <ok> <revision> <validUntil unix ns>  a write, its outcome, the ValidUntil read after it
//	RESUMED <gap ms> <done> <Err is ErrLost> <err>  its first check after a gap
//	LATE <ok> <revision>                     a write after the loss was told
//	EXIT
//
// Every write is a Txn that puts the resource only if the hold's key still
// has the hold's create revision (the token): a write a stale holder cannot
// make. With helperUnfence set it puts unconditionally (the broken variant
// the parent's assertions must catch).
func TestHelperHolder(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("the child of TestSigstopHolder")
	}
	parts := strings.Split(spec, "|")
	out := func(f string, a ...any) { fmt.Fprintf(os.Stdout, f+"\n", a...) }
	defer out("EXIT")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{parts[0]}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		out("ERR %v", err)
		return
	}
	defer cli.Close()
	c, err := New(cli, WithTTL(2*time.Second))
	if err != nil {
		out("ERR %v", err)
		return
	}
	m, err := c.NewMutex(parts[1])
	if err != nil {
		out("ERR %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	tok, err := m.LockAndGetToken(ctx)
	if err != nil {
		out("ERR %v", err)
		return
	}
	key := m.Key()
	out("HELD %d %s", tok, key)
	// write reports whether the write landed, and its revision.
	write := func(v string) (bool, int64) {
		put := clientv3.OpPut(parts[2], v)
		if os.Getenv(helperUnfence) != "" {
			resp, err := cli.Put(ctx, parts[2], v)
			if err != nil {
				return false, 0
			}
			return true, resp.Header.Revision
		}
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", tok)).Then(put).Commit()
		if err != nil || !resp.Succeeded {
			return false, 0
		}
		return true, resp.Header.Revision
	}
	last := time.Now()
	for i := 0; i < 2000 && ctx.Err() == nil; i++ { // at most about 40 s
		now := time.Now()
		gap := now.Sub(last)
		last = now
		// The check before every action: is the hold still ours?
		lost := false
		select {
		case <-m.Done():
			lost = true
		default:
		}
		if gap > time.Second {
			out("RESUMED %d %v %v %v", gap.Milliseconds(), lost, errors.Is(m.Err(), fairlock.ErrLost), m.Err())
		}
		if lost {
			// Told: a careful holder stops here. Try one write anyway:
			// the fence must turn it away.
			ok, rev := write(fmt.Sprintf("child late %d", i))
			out("LATE %v %d", ok, rev)
			return
		}
		ok, rev := write(fmt.Sprintf("child %d", i))
		out("WROTE %d %v %d %d", i, ok, rev, m.ValidUntil().UnixNano())
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSigstopHolder: a holder process paused by SIGSTOP loses the lock
// when its lease's TTL passes; another client gets the lock only after the
// validity the paused holder last read; on SIGCONT the holder's first check
// tells it the hold is lost (Done closed, Err matching fairlock.ErrLost),
// and none of its writes after the pause lands (fenced on the hold's create
// revision). etcd #6127, #10811.
func TestSigstopHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("child process: not in -short")
	}
	got := sigstopHolder(t, false)
	if got != "" {
		t.Fatal(got)
	}
}

// TestSigstopHolderCatchesUnfencedWriter: the same history with a child
// whose writes are not fenced; the late write it makes after being told
// the loss lands after the new holder's grant, and the assertions say so.
func TestSigstopHolderCatchesUnfencedWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("child process: not in -short")
	}
	got := sigstopHolder(t, true)
	if !strings.Contains(got, "landed") {
		t.Fatalf("an unfenced late write not caught: %q", got)
	}
	t.Logf("caught: %s", got)
}

// sigstopHolder runs the history and returns the first violated assertion
// ("" when none); unfenced runs the broken child.
func sigstopHolder(t *testing.T, unfenced bool) string {
	srv := etcdtest.Start(t, etcdtest.Options{})
	raw := etcdtest.Client(t, srv.Endpoint)
	lock, res := "paused-proc", "fairlock-test/resource/"+t.Name()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.Endpoint+"|"+lock+"|"+res)
	if unfenced {
		cmd.Env = append(cmd.Env, helperUnfence+"=1")
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1) // the child's exit status
	gone := make(chan struct{})   // closed when the child has exited
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
		close(gone)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		select {
		case <-gone:
		case <-time.After(10 * time.Second):
		}
	})
	next := func(d time.Duration) (string, bool) {
		select {
		case l, ok := <-lines:
			return l, ok
		case <-time.After(d):
			return "", false
		}
	}

	// take reads one line of the child.
	var (
		tok, lastOK    int64
		key            string
		valid          time.Time // the latest validity the child read
		landed         []int64   // revisions of the child's writes that landed
		resumed, late  string
		writes, failed int
	)
	take := func(l string) {
		f := strings.Fields(l)
		if len(f) == 0 {
			return
		}
		switch f[0] {
		case "HELD":
			tok, _ = strconv.ParseInt(f[1], 10, 64)
			key = f[2]
		case "WROTE", "LATE":
			if f[0] == "LATE" {
				late = l
			}
			if len(f) >= 4 && f[2] == "true" || f[0] == "LATE" && f[1] == "true" {
				rev, _ := strconv.ParseInt(f[len(f)-1-boolToInt(f[0] == "WROTE")], 10, 64)
				landed = append(landed, rev)
				lastOK = rev
			} else if f[0] == "WROTE" {
				failed++
			}
			if f[0] == "WROTE" {
				writes++
				if ns, _ := strconv.ParseInt(f[4], 10, 64); ns > 0 && time.Unix(0, ns).After(valid) {
					valid = time.Unix(0, ns)
				}
			}
		case "RESUMED":
			resumed = l
		case "ERR":
			t.Fatalf("child: %s", l)
		}
	}

	// The child holds and writes.
	for writes < 5 {
		l, ok := next(30 * time.Second)
		if !ok {
			t.Fatalf("child: no HELD and 5 writes (last line %q)", l)
		}
		take(l)
	}
	if failed > 0 {
		t.Fatalf("a fenced write of the child failed while it held")
	}

	// A waiter queues behind it.
	c2, err := New(etcdtest.Client(t, srv.Endpoint), WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close(context.Background()) })
	m2 := mustMutex(t, c2, lock)
	granted := make(chan time.Time, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m2.Lock(ctx); err != nil {
			t.Error(err)
			close(granted)
			return
		}
		granted <- time.Now()
	}()
	(&env{t: t, srv: srv, raw: raw}).waitKeys(m2, 2)

	// Pause the child while it holds.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopAt := time.Now()
	var g time.Time
	select {
	case g = <-granted:
	case <-time.After(20 * time.Second):
		return "the waiter was not granted while the holder was paused"
	}
	if g.IsZero() {
		return "the waiter's Lock failed"
	}
	tok2, err := m2.Token(context.Background())
	if err != nil || tok2 <= tok {
		return fmt.Sprintf("waiter's token %d (err %v), paused holder's %d", tok2, err, tok)
	}
	// The revision at which the child's hold ended (its key's deletion):
	// the new holder's grant.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	var delRev int64
	for wr := range raw.Watch(wctx, key, clientv3.WithRev(tok), clientv3.WithFilterPut()) {
		if len(wr.Events) > 0 {
			delRev = wr.Events[0].Kv.ModRevision
			break
		}
	}
	wcancel()
	if delRev == 0 {
		t.Fatalf("no deletion of the child's key %q seen", key)
	}
	// The new holder writes, fenced on its own key.
	resp, err := raw.Txn(context.Background()).If(clientv3.Compare(clientv3.CreateRevision(m2.Key()), "=", tok2)).
		Then(clientv3.OpPut(res, "parent")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("new holder's write: %v", err)
	}

	// Resume the child and read it to its end.
	contAt := time.Now()
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for {
		l, ok := next(20 * time.Second)
		if !ok {
			break
		}
		take(l)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("child: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("child did not exit")
	}
	t.Logf("child ended %v after SIGCONT; waiter granted %v after the pause, %v after the child's last validity; "+
		"child's key deleted at revision %d, its last landed write at %d; child: %s; %s",
		time.Since(contAt).Round(time.Millisecond), g.Sub(stopAt).Round(time.Millisecond), g.Sub(valid).Round(time.Millisecond), delRev, lastOK, resumed, late)

	// The assertions.
	if !g.After(valid) {
		return fmt.Sprintf("waiter granted %v before the paused holder's validity ended", valid.Sub(g))
	}
	for _, rev := range landed {
		if rev > delRev {
			return fmt.Sprintf("a write of the child landed at revision %d, after its hold ended at %d", rev, delRev)
		}
	}
	if f := strings.Fields(resumed); len(f) < 4 {
		return fmt.Sprintf("child did not report its first check after resuming (%q)", resumed)
	} else if f[2] != "true" || f[3] != "true" {
		return fmt.Sprintf("child's first check after resuming: Done closed %s, Err matches ErrLost %s (%q)", f[2], f[3], resumed)
	}
	if late == "" {
		return "child did not report its late write"
	}
	gr, err := raw.Get(context.Background(), res)
	if err != nil || len(gr.Kvs) != 1 || string(gr.Kvs[0].Value) != "parent" {
		return fmt.Sprintf("resource after the history: %v %v (want the new holder's write)", gr, err)
	}
	return ""
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

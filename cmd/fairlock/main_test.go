package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/cmd/fairlock/internal/demo"
	"github.com/fairlock-go/fairlock/cmd/fairlock/internal/inspect"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/lockstate"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// childEnv makes the test binary run the program itself (TestInterrupt
// sends it SIGINT); childArgs holds its arguments, separated by \x1f.
const (
	childEnv  = "FAIRLOCK_TEST_CHILD"
	childArgs = "FAIRLOCK_TEST_ARGS"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		redis.SetLogger(quietLog{})
		os.Exit(run(strings.Split(os.Getenv(childArgs), "\x1f"), os.Stdout, os.Stderr))
	}
	// The demo writes its chart (fairlock-demo.svg) to the current
	// directory by default: the tests run in a scratch one.
	dir, err := os.MkdirTemp("", "fairlock-cmd-test")
	if err == nil {
		err = os.Chdir(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := redistest.MainLeakCheck(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// smallDemo is a demo small enough for a test on either backend.
func smallDemo(b *redistest.Backend, prefix string) demo.Config {
	return demo.Config{
		Clients: 3, Goroutines: 3, Seats: 40, Hold: 500 * time.Microsecond,
		Kinds: []string{demo.Fair, demo.Reentrant}, Seed: 7,
		Redis: &redis.Options{Addr: b.Addr}, Prefix: prefix,
	}
}

// checkResult checks what must hold for either lock: every seat booked once,
// grants numbered 1..n, arrivals a permutation of 1..n, nothing left behind.
func checkResult(t *testing.T, c demo.Config, r *demo.Result) {
	t.Helper()
	assert.Equal(t, c.Seats, r.Booked, "%s: seats booked", r.Kind)
	assert.Zero(t, r.DoubleBookings, "%s: double bookings", r.Kind)
	assert.Empty(t, r.Leftover, "%s: lock keys left behind", r.Kind)
	seats := map[int]string{}
	arrivals := map[int]bool{}
	for i, b := range r.Bookings {
		assert.Equal(t, i+1, b.Grant, "%s: grants are numbered in order", r.Kind)
		assert.False(t, arrivals[b.Arrival], "%s: arrival %d granted twice", r.Kind, b.Arrival)
		arrivals[b.Arrival] = true
		if b.Seat > 0 {
			prev, dup := seats[b.Seat]
			assert.False(t, dup, "%s: seat %d booked by %s and %s", r.Kind, b.Seat, prev, b.Who)
			seats[b.Seat] = b.Who
		}
	}
	for s := 1; s <= c.Seats; s++ {
		assert.Contains(t, seats, s, "%s: seat %d not booked", r.Kind, s)
	}
	for a := 1; a <= len(r.Bookings); a++ {
		assert.True(t, arrivals[a], "%s: arrival %d never granted", r.Kind, a)
	}
	// Every contender passes the lock once more after the last seat (it
	// finds none left), except those that never arrived again.
	assert.GreaterOrEqual(t, len(r.Bookings), c.Seats+1, "%s: grants", r.Kind)
	total := 0
	for _, n := range r.PerContender {
		total += n
	}
	assert.Equal(t, c.Seats, total, "%s: seats per contender add up", r.Kind)
}

// TestDemoArrivalAndGrantOrder runs the demo with the fair lock on each
// engine (--engine): the fair lock grants in arrival order, and its queue,
// read after each queued arrival, lists the waiters in arrival order.
func TestDemoArrivalAndGrantOrder(t *testing.T) {
	for _, engine := range []fair.Engine{fair.Redisson, fair.Scalable} {
		t.Run(map[fair.Engine]string{fair.Redisson: "redisson", fair.Scalable: "scalable"}[engine], func(t *testing.T) {
			demoArrivalAndGrantOrder(t, engine)
		})
	}
}

func demoArrivalAndGrantOrder(t *testing.T, engine fair.Engine) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		c := smallDemo(b, redistest.Prefix(t))
		c.Keep = true
		c.Engine = engine
		rs, err := demo.Run(testCtx(t), c)
		require.NoError(t, err)
		require.Len(t, rs, 2)
		rdb := b.Client(t)
		for _, r := range rs {
			checkResult(t, c, r)
			// What Redis holds: seats 1..K, each booked by the one
			// the run says booked it.
			key := demo.BookingsKey(c.Prefix, r.Kind)
			got, err := rdb.HGetAll(context.Background(), key).Result()
			require.NoError(t, err)
			want := map[string]string{}
			for _, bk := range r.Bookings {
				if bk.Seat > 0 {
					want[fmt.Sprint(bk.Seat)] = bk.Who
				}
			}
			assert.Len(t, got, c.Seats, "%s: bookings in Redis", r.Kind)
			assert.Equal(t, want, got, "%s: bookings in Redis", r.Kind)
			rdb.Del(context.Background(), key, c.Prefix+r.Kind+":next")
		}
		f := rs[0]
		require.Equal(t, demo.Fair, f.Kind)
		inv, pairs := f.Inversions()
		assert.Zero(t, inv, "fair lock: pairs granted against arrival order (of %d)", pairs)
		assert.Zero(t, f.OutOfTurn(), "fair lock: grants out of turn")
		for i, bk := range f.Bookings {
			assert.Equal(t, i+1, bk.Arrival, "fair lock: grant %d went to arrival %d", i+1, bk.Arrival)
		}
		// Every arrival but those that took a free lock at once was
		// queued, and the queue was read each time.
		assert.Positive(t, f.QueueChecks)
		assert.Zero(t, f.QueueMismatches, "fair queue not in arrival order")
		// The reentrant lock promises no order; only log what it did.
		inv, pairs = rs[1].Inversions()
		t.Logf("reentrant: %d/%d inversions, %d out of turn", inv, pairs, rs[1].OutOfTurn())
	})
}

// TestDemoCommand runs the demo through the command line and reads its
// table.
func TestDemoCommand(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		args := []string{"demo", "--clients", "2", "--goroutines", "3", "--seats", "30", "--hold", "1ms", "--grants", "5"}
		if b.Real() {
			args = append(args, "--redis", b.Addr)
		}
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		require.Equal(t, 0, code, "stderr: %s", errb.String())
		assert.Empty(t, errb.String())
		s := out.String()
		t.Log("\n" + s)
		assert.Regexp(t, `(?m)^fair +\[#+\] +30/30 seats .* done$`, s)
		assert.Regexp(t, `(?m)^reentrant +\[#+\] +30/30 seats .* done$`, s)
		assert.Regexp(t, `(?m)^seats booked +30 +30$`, s)
		assert.Regexp(t, `(?m)^double bookings +0 +0$`, s)
		m := regexp.MustCompile(`(?m)^fairness inversions \(pairs\) +(\d+)/(\d+) +(\d+)/(\d+)$`).FindStringSubmatch(s)
		require.NotNil(t, m, "inversions row")
		assert.Equal(t, "0", m[1], "fair inversions")
		assert.Regexp(t, `(?m)^grants out of turn +0 +\d+$`, s)
		assert.Regexp(t, `(?m)^queue order checked \(bad\) +\d+ \(0\) +-$`, s)
		assert.Regexp(t, `(?m)^lock keys left behind +0 +0$`, s)
		for _, p := range []string{"p50", "p90", "p99"} {
			assert.Regexp(t, `(?m)^wait `+p+` +\S+ +\S+$`, s)
		}
		for _, line := range strings.Split(s, "\n") {
			assert.LessOrEqual(t, len([]rune(line)), 100, "line too wide: %q", line)
		}
		// One kind only.
		out.Reset()
		require.Equal(t, 0, run([]string{"demo", "--lock", "fair", "--seats", "5", "-q"}, &out, &errb))
		assert.Regexp(t, `(?m)^ +fair$`, out.String())
		assert.NotContains(t, out.String(), "reentrant")
	})
}

// TestDemoChart checks that the demo writes its SVG chart where --svg says
// (the current directory by default), that it parses as XML and has a point
// and a wait per grant of each kind, and that --svg "" writes none.
func TestDemoChart(t *testing.T) {
	args := []string{"demo", "--clients", "2", "--goroutines", "2", "--seats", "12", "--hold", "200us", "-q"}
	dir := t.TempDir()
	path := filepath.Join(dir, "chart.svg")
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(append(args, "--svg", path), &out, &errb), "stderr: %s", errb.String())
	assert.Contains(t, out.String(), "written to "+path)
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^lock grants +(\d+) +(\d+)$`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "lock grants row")
	fairN, _ := strconv.Atoi(m[1])
	unfairN, _ := strconv.Atoi(m[2])
	grants := map[string]int{demo.Fair: fairN, demo.Reentrant: unfairN}
	points, waits := map[string]int{}, map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the chart is not well-formed XML")
		e, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = e.Name.Local
		}
		attr := map[string]string{}
		for _, a := range e.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case e.Name.Local == "circle" && attr["data-grant"] != "":
			points[attr["data-kind"]]++
		case e.Name.Local == "rect" && attr["data-count"] != "":
			n, err := strconv.Atoi(attr["data-count"])
			require.NoError(t, err)
			waits[attr["data-kind"]] += n
		}
	}
	assert.Equal(t, "svg", root)
	assert.Equal(t, grants, points, "a point per grant")
	assert.Equal(t, grants, waits, "a wait per grant")

	// The default path, in the current directory (TestMain's scratch one),
	// and none.
	_ = os.Remove(DefaultSVG)
	out.Reset()
	require.Equal(t, 0, run(args, &out, &errb), "stderr: %s", errb.String())
	assert.FileExists(t, DefaultSVG)
	assert.Contains(t, out.String(), "written to "+DefaultSVG)
	require.NoError(t, os.Remove(DefaultSVG))
	out.Reset()
	require.Equal(t, 0, run(append(args, "--svg", ""), &out, &errb), "stderr: %s", errb.String())
	assert.NoFileExists(t, DefaultSVG)
	assert.NotContains(t, out.String(), "Chart")

	// A path that cannot be written: the table is shown, then exit 1.
	out.Reset()
	errb.Reset()
	assert.Equal(t, 1, run(append(args, "--svg", filepath.Join(dir, "no", "such", "dir.svg")), &out, &errb))
	assert.Contains(t, errb.String(), "write chart")
	assert.Contains(t, out.String(), "seats booked")
}

// TestDemoMultiCommand runs demo --multi with the three kinds on the
// embedded Redis and reads the table.
func TestDemoMultiCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"demo", "--multi", "4", "--lock", "all", "--clients", "2", "--goroutines", "3",
		"--seats", "30", "--hold", "1ms", "--give-up", "500ms"}, &out, &errb)
	require.Equal(t, 0, code, "stderr: %s", errb.String())
	assert.Empty(t, errb.String())
	s := out.String()
	t.Log("\n" + s)
	for _, k := range []string{"seats", "multilock", "naive"} {
		assert.Regexp(t, `(?m)^`+k+` +\[#+\] +30/30 seats .* done$`, s)
	}
	assert.Regexp(t, `(?m)^ +seats +multilock +naive$`, s)
	assert.Regexp(t, `(?m)^seats booked +30 +30 +30$`, s)
	assert.Regexp(t, `(?m)^double bookings +0 +0 +0$`, s)
	// (--give-up is short for the naive kind's sake: on a loaded machine
	// a fair wait may outlast it too; TestMultiMode checks for deadlocks
	// with a minute.)
	assert.Regexp(t, `(?m)^deadlocks/timeouts \(gave up\) +\d+ +\d+ +\d+$`, s)
	assert.Regexp(t, `(?m)^per-seat inversions \(pairs\) +0/\d+ +\d+/\d+ +\d+/\d+$`, s)
	assert.Regexp(t, `(?m)^lock keys left behind +0 +0 +0$`, s)
	for _, line := range strings.Split(s, "\n") {
		assert.LessOrEqual(t, len([]rune(line)), 100, "line too wide: %q", line)
	}
}

// TestDemoCancel ends a run with its context (as Ctrl-C does) and checks
// that nothing is left held or queued.
func TestDemoCancel(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		c := smallDemo(b, redistest.Prefix(t))
		c.Seats, c.Hold = 100000, 2*time.Millisecond
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		c.Progress = cancelOnWrite{cancel}
		c.ProgressEvery = 50 * time.Millisecond
		rs, err := demo.Run(ctx, c)
		require.ErrorIs(t, err, context.Canceled)
		require.Len(t, rs, 1, "the first kind was interrupted; the second never ran")
		assert.Less(t, rs[0].Booked, c.Seats)
		assert.Empty(t, rs[0].Leftover)
		rdb := b.Client(t)
		k := wire.KeysFor(rs[0].Lock)
		n, err := rdb.Exists(context.Background(), k.Name, k.Queue, k.Timeouts).Result()
		require.NoError(t, err)
		if !assert.Zero(t, n, "lock keys after an interrupted run") {
			st, err := lockstate.Read(context.Background(), rdb, rs[0].Lock)
			t.Logf("lock state %+v (read error %v)", st, err)
			for _, bk := range rs[0].Bookings {
				t.Logf("booking %+v", bk)
			}
		}
	})
}

type cancelOnWrite struct{ cancel context.CancelFunc }

func (c cancelOnWrite) Write(p []byte) (int, error) { c.cancel(); return len(p), nil }

// TestInterrupt sends SIGINT to the program (this test binary in child mode)
// while the demo runs.
func TestInterrupt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		args := []string{"demo", "--seats", "100000", "--hold", "2ms"}
		if b.Real() {
			args = append(args, "--redis", b.Addr)
		}
		exe, err := os.Executable()
		require.NoError(t, err)
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), childEnv+"=1", childArgs+"="+strings.Join(args, "\x1f"))
		var errb bytes.Buffer
		cmd.Stderr = &errb
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })

		// Wait for the first progress line: the demo is running and its
		// signal handler is installed.
		sc := bufio.NewScanner(stdout)
		prefix := ""
		for sc.Scan() {
			line := sc.Text()
			if m := regexp.MustCompile(`names contain "([^"]+)"`).FindStringSubmatch(line); m != nil {
				prefix = m[1]
			}
			if strings.HasPrefix(line, "fair ") {
				break
			}
		}
		require.NotEmpty(t, prefix, "header line with the key prefix")
		require.NoError(t, cmd.Process.Signal(os.Interrupt))
		go func() { _, _ = bytes.NewBuffer(nil).ReadFrom(stdout) }()
		err = cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 130, ee.ExitCode())
		assert.Equal(t, 1, strings.Count(errb.String(), "\n"), "one line: %q", errb.String())
		assert.Contains(t, errb.String(), "interrupted")
		if !b.Real() {
			return // the embedded server went with the process
		}
		// No lock, queue or timeout key of the run is left (unlock
		// latches expire by themselves).
		rdb := b.Client(t)
		keys, err := rdb.Keys(context.Background(), "*"+prefix+"*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			assert.True(t, strings.HasPrefix(k, "redisson_unlock_latch:") || strings.HasPrefix(k, "fairlock_acquire_latch:") ||
				strings.HasPrefix(k, "redisson_lock_token:"), "left behind: %s", k) // the token counter is kept for ever
		}
	})
}

// state builds a held fair lock with two synthetic waiters, as the fair
// lock's own Lock would (the same script), with a known wait slot.
func state(t *testing.T, b *redistest.Backend, name string) (holder string, waiters []string, slotMs int64) {
	t.Helper()
	ctx := testCtx(t)
	c, err := fairlock.NewClient(b.Client(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	m, err := fair.New(c, name)
	require.NoError(t, err)
	require.NoError(t, m.Lock(ctx))
	t.Cleanup(func() { _ = m.Unlock(context.Background()) })
	slotMs = 300_000
	rdb := b.Client(t)
	for i := 1; i <= 2; i++ {
		w := wire.Owner("0b9a8c7d-1e2f-4a3b-8c5d-6e7f8a9b0c1d", int64(i))
		ok, _, err := wire.Default().FairTryLockWait(ctx, rdb, wire.KeysFor(name), wire.Args{
			Owner: w, LeaseMs: 30_000, WaitMs: slotMs, NowMs: time.Now().UnixMilli(), GraceMs: 5000})
		require.NoError(t, err)
		require.False(t, ok)
		waiters = append(waiters, w)
	}
	return m.Owner(), waiters, slotMs
}

func TestInspectHeldWithQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		name := redistest.Prefix(t) + "seats"
		holder, waiters, slot := state(t, b, name)
		args := []string{"inspect", name, "--redis", b.Addr}

		// Text.
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(args, &out, &errb), "stderr: %s", errb.String())
		s := out.String()
		t.Log("\n" + s)
		assert.Regexp(t, `(?m)^holder: `+regexp.QuoteMeta(holder)+`  holds 1  lease \S+ left$`, s)
		assert.Regexp(t, `(?m)^queue:  2 waiting`, s)
		assert.Regexp(t, `(?m)^  1  `+regexp.QuoteMeta(waiters[0])+` +\d\d:\d\d:\d\d\.\d{3}  +\d+m[\d.]+s +takes it$`, s)
		assert.Regexp(t, `(?m)^  2  `+regexp.QuoteMeta(waiters[1])+` +\d\d:\d\d:\d\d\.\d{3}  +\d+m[\d.]+s +takes it$`, s)
		assert.Contains(t, s, "problems: none")

		// JSON, with flags before the name this time.
		out.Reset()
		require.Equal(t, 0, run([]string{"inspect", "--json", "--redis", b.Addr, name}, &out, &errb))
		var r inspect.Report
		require.NoError(t, json.Unmarshal(out.Bytes(), &r))
		assert.Equal(t, name, r.Name)
		assert.Equal(t, "redisson", r.Engine)
		assert.True(t, r.Locked)
		require.Len(t, r.Holders, 1)
		assert.Equal(t, holder, r.Holders[0].Owner)
		assert.EqualValues(t, 1, r.Holders[0].HoldCount)
		assert.Positive(t, r.LeaseMs)
		assert.LessOrEqual(t, r.LeaseMs, int64(30_000))
		require.Len(t, r.Queue, 2)
		for i, w := range r.Queue {
			assert.Equal(t, i+1, w.Position)
			assert.Equal(t, waiters[i], w.Owner)
			assert.True(t, w.HasDeadline)
			assert.False(t, w.Handoff, "joined without an acquisition request: it takes the lock itself")
			assert.Equal(t, w.DeadlineMs-r.NowMs, w.LeftMs)
			assert.Greater(t, w.LeftMs, slot-60_000, "the head waits about a lease plus a slot")
			_, err := time.Parse(time.RFC3339, w.Deadline)
			assert.NoError(t, err)
		}
		// Each waiter's deadline is one slot after the one ahead of it.
		assert.Equal(t, slot, r.Queue[1].DeadlineMs-r.Queue[0].DeadlineMs)
		assert.Empty(t, r.Problems)
		assert.Empty(t, r.Unqueued)
		assert.True(t, r.OK)
	})
}

// TestInspectReadOnly records every command the inspector sends.
func TestInspectReadOnly(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		name := redistest.Prefix(t) + "seats"
		state(t, b, name)
		rdb := b.Client(t)
		rec := &recorder{}
		rdb.AddHook(rec)
		r, err := inspect.Read(testCtx(t), rdb, name, time.Now())
		require.NoError(t, err)
		require.Len(t, r.Queue, 2)
		// The connection's handshake (HELLO, CLIENT SETINFO and
		// MAINT_NOTIFICATIONS: connection settings, not data) and reads.
		allowed := map[string]bool{"hello": true, "client setinfo": true, "client maint_notifications": true,
			"multi": true, "exec": true, "type": true, "hgetall": true,
			"pttl": true, "lrange": true, "zrange": true, "get": true, "time": true}
		require.NotEmpty(t, rec.cmds)
		for _, c := range rec.cmds {
			assert.True(t, allowed[c], "inspector sent %s", c)
		}
	})
}

type recorder struct{ cmds []string }

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.cmds = append(r.cmds, cmdName(cmd))
		return next(ctx, cmd)
	}
}
func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.cmds = append(r.cmds, cmdName(c))
		}
		return next(ctx, cmds)
	}
}

// TestInspectInconsistencies breaks a queued lock's state by hand, one way
// per case, and checks that the inspector names what is wrong.
func TestInspectInconsistencies(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(ctx context.Context, rdb *redis.Client, k wire.Keys, waiters []string)
		codes  []string // expected problem codes
		exit   int
	}{
		{"timeouts deleted", func(ctx context.Context, rdb *redis.Client, k wire.Keys, _ []string) {
			rdb.Del(ctx, k.Timeouts)
		}, []string{"head-no-deadline", "no-deadline"}, 3},
		{"deadline of nobody queued", func(ctx context.Context, rdb *redis.Client, k wire.Keys, _ []string) {
			rdb.ZAdd(ctx, k.Timeouts, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "ghost:1"})
		}, []string{"deadline-not-queued"}, 3},
		{"duplicate", func(ctx context.Context, rdb *redis.Client, k wire.Keys, w []string) {
			rdb.RPush(ctx, k.Queue, w[0])
		}, []string{"duplicate", "deadline-order"}, 3},
		{"stale head", func(ctx context.Context, rdb *redis.Client, k wire.Keys, w []string) {
			rdb.ZAdd(ctx, k.Timeouts, redis.Z{Score: float64(time.Now().Add(-time.Minute).UnixMilli()), Member: w[0]})
		}, []string{"stale-head"}, 0},
		{"deadlines decrease", func(ctx context.Context, rdb *redis.Client, k wire.Keys, w []string) {
			rdb.ZAdd(ctx, k.Timeouts, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: w[1]})
		}, []string{"deadline-order"}, 3},
		{"free lock with a queue", func(ctx context.Context, rdb *redis.Client, k wire.Keys, _ []string) {
			rdb.Del(ctx, k.Name)
		}, []string{"free-with-queue"}, 0},
		{"two holders", func(ctx context.Context, rdb *redis.Client, k wire.Keys, _ []string) {
			rdb.HSet(ctx, k.Name, "other:1", 1)
		}, []string{"many-holders"}, 3},
		{"queue of the wrong type", func(ctx context.Context, rdb *redis.Client, k wire.Keys, _ []string) {
			rdb.Del(ctx, k.Queue)
			rdb.Set(ctx, k.Queue, "x", 0)
		}, []string{"wrong-type"}, 3},
	}
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, tc := range cases {
			t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
				name := redistest.Prefix(t) + "seats"
				_, waiters, _ := state(t, b, name)
				rdb := b.Client(t)
				ctx := testCtx(t)
				k := wire.KeysFor(name)
				t.Cleanup(func() { rdb.Del(context.Background(), k.Name, k.Queue, k.Timeouts) })
				tc.break_(ctx, rdb, k, waiters)
				var out, errb bytes.Buffer
				code := run([]string{"inspect", name, "--redis", b.Addr, "--json"}, &out, &errb)
				require.Equal(t, tc.exit, code, "stderr: %s", errb.String())
				var r inspect.Report
				require.NoError(t, json.Unmarshal(out.Bytes(), &r))
				var got []string
				for _, p := range r.Problems {
					got = append(got, p.Code)
				}
				assert.ElementsMatch(t, tc.codes, got, "problems: %+v", r.Problems)
				assert.Equal(t, tc.exit == 0, r.OK)
				out.Reset()
				run([]string{"inspect", name, "--redis", b.Addr}, &out, &errb)
				for _, c := range tc.codes {
					assert.Contains(t, out.String(), c+":")
				}
			})
		}
	})
}

// TestInspectScalable reads a lock of the scalable fair engine.
func TestInspectScalable(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "seats"
		c, err := fairlock.NewClient(b.Client(t))
		require.NoError(t, err)
		defer c.Close()
		m, err := fair.New(c, name, fair.WithEngine(fair.Scalable))
		require.NoError(t, err)
		require.NoError(t, m.Lock(ctx))
		defer m.Unlock(context.Background())
		rdb := b.Client(t)
		var waiters []string
		const slot = 120_000
		for i := 1; i <= 3; i++ {
			w := wire.Owner("5ca1ab1e-0000-4000-8000-000000000000", int64(i))
			ok, _, err := wire.ScalableDefault().TryLockWait(ctx, rdb, wire.KeysFor(name), wire.Args{
				Owner: w, LeaseMs: 30_000, WaitMs: slot, NowMs: time.Now().UnixMilli(), GraceMs: 5000})
			require.NoError(t, err)
			require.False(t, ok)
			waiters = append(waiters, w)
		}
		r, err := inspect.Read(ctx, rdb, name, time.Now())
		require.NoError(t, err)
		assert.Equal(t, "scalable", r.Engine)
		assert.Equal(t, m.Owner(), r.Holders[0].Owner)
		require.Len(t, r.Queue, 3)
		for i, w := range r.Queue {
			assert.Equal(t, waiters[i], w.Owner)
			if i > 0 {
				assert.EqualValues(t, slot, w.DeadlineMs-r.Queue[i-1].DeadlineMs)
			}
		}
		assert.Empty(t, r.Problems)
		assert.True(t, r.OK)
	})
}

// cmdName is a command's name, with its subcommand for CLIENT.
func cmdName(c redis.Cmder) string {
	if c.Name() == "client" && len(c.Args()) > 1 {
		return "client " + strings.ToLower(fmt.Sprint(c.Args()[1]))
	}
	return c.Name()
}

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestExitCodes(t *testing.T) {
	down := closedPort(t)
	cases := []struct {
		args   []string
		code   int
		stderr string // a part of stderr
		usage  bool   // stderr shows the usage
	}{
		{[]string{"inspect", "seats", "--redis", down}, 1, "cannot reach Redis at " + down, false},
		{[]string{"inspect", "seats", "--redis", down, "--watch"}, 1, "cannot reach Redis at " + down, false},
		{[]string{"demo", "--redis", down}, 1, "cannot reach Redis at " + down, false},
		{[]string{"demo", "--clients", "x"}, 2, "invalid value", true},
		{[]string{"demo", "--clients", "0"}, 2, "--clients 0", true},
		{[]string{"demo", "--lock", "unfair"}, 2, `--lock "unfair"`, true},
		{[]string{"demo", "--engine", "java"}, 2, `--engine "java": must be redisson or scalable`, true},
		{[]string{"demo", "--engine", "scalable", "--permits", "2"}, 2, "--engine: the fair lock's engine, without the fair lock", true},
		{[]string{"demo", "--engine", "scalable", "--lock", "reentrant"}, 2, "--engine: the fair lock's engine, without the fair lock", true},
		{[]string{"demo", "--engine", "scalable", "--stale-writer"}, 2, "--engine with --stale-writer", true},
		{[]string{"demo", "--nope"}, 2, "flag provided but not defined", true},
		{[]string{"demo", "extra"}, 2, `unexpected argument "extra"`, true},
		{[]string{"--seats", "-1"}, 2, "--seats -1", true},
		{[]string{"demo", "--multi", "11"}, 2, "--multi 11", true},
		{[]string{"demo", "--multi", "4", "--lock", "fair"}, 2, `--lock "fair" with --multi`, true},
		{[]string{"demo", "--multi", "4", "--permits", "2"}, 2, "choose one", true},
		{[]string{"demo", "--multi", "4", "--give-up", "-1s"}, 2, "--give-up -1s", true},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`, true},
		{[]string{"inspect"}, 2, "missing the lock NAME", true},
		{[]string{"inspect", "a", "b", "--redis", down}, 2, "one lock NAME", true},
		{[]string{"inspect", "seats"}, 2, "--redis host:port is required", true},
		{[]string{"inspect", "seats", "--redis", "nohost"}, 2, "not host:port", true},
		{[]string{"inspect", "a{b", "--redis", down}, 2, "invalid lock name", false},
		{[]string{"inspect", "", "--redis", down}, 2, "invalid lock name", false},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			var out, errb bytes.Buffer
			start := time.Now()
			code := run(tc.args, &out, &errb)
			t.Logf("%v in %v", tc.args, time.Since(start))
			assert.Equal(t, tc.code, code)
			assert.Contains(t, errb.String(), tc.stderr)
			assert.Equal(t, tc.usage, strings.Contains(errb.String(), "Usage:"), "usage shown: %s", errb.String())
			if !tc.usage {
				assert.Equal(t, 1, strings.Count(errb.String(), "\n"), "one line: %q", errb.String())
			}
			assert.Empty(t, out.String())
		})
	}
	var out, errb bytes.Buffer
	assert.Equal(t, 0, run([]string{"help"}, &out, &errb))
	assert.Contains(t, out.String(), "Usage:")
	out.Reset()
	assert.Equal(t, 0, run([]string{"inspect", "-h"}, &out, &errb))
}

// TestCountsAgainstBruteForce checks the order statistics the table prints
// against their definitions.
func TestCountsAgainstBruteForce(t *testing.T) {
	perms := [][]int{{}, {1}, {1, 2, 3, 4}, {4, 3, 2, 1}, {2, 1, 4, 3, 5}, {3, 1, 2, 6, 5, 4, 8, 7}}
	for _, p := range perms {
		r := &demo.Result{}
		for i, a := range p {
			r.Bookings = append(r.Bookings, demo.Booking{Grant: i + 1, Arrival: a, Wait: time.Duration(a) * time.Millisecond})
		}
		var inv int64
		for i := range p {
			for j := i + 1; j < len(p); j++ {
				if p[i] > p[j] {
					inv++
				}
			}
		}
		got, pairs := r.Inversions()
		assert.Equal(t, inv, got, "%v", p)
		assert.EqualValues(t, len(p)*(len(p)-1)/2, pairs)
		out := 0
		for i, a := range p {
			// out of turn: some arrival smaller than a is granted later
			for _, b := range p[i+1:] {
				if b < a {
					out++
					break
				}
			}
		}
		assert.Equal(t, out, r.OutOfTurn(), "%v", p)
		if len(p) > 0 {
			assert.Equal(t, time.Duration(len(p))*time.Millisecond, r.WaitPercentile(100), "max of %v", p)
			assert.Equal(t, time.Duration((len(p)+1)/2)*time.Millisecond, r.WaitPercentile(50), "median of %v", p)
		}
	}
}

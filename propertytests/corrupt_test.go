package propertytests

import (
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Every script must terminate on any state, well-formed or not: each loop
// needs a bound that does not depend on the state being consistent, and a
// state the script cannot make sense of must end in an error reply (or be
// repaired), never in a script that runs for ever. A Redis runs one script
// at a time, so a looping script stops every client of that server (BUSY)
// until someone sends SCRIPT KILL, and SCRIPT KILL is refused once the
// script has written: then only SHUTDOWN NOSAVE helps.
//
// TestCorruptStateScriptsReturn builds a random well-formed state with every
// script set (reentrant, fair Redisson-compatible engine, scalable engine;
// three lock names, six owners, random clocks and skews), corrupts it at
// random (one to three of the kinds in corruptions: keys, hash fields, list
// items and zset members deleted, duplicated or added, links of the
// scalable queue pointed elsewhere or at themselves, numbers and scores
// replaced by garbage, keys replaced by keys of another type, the other
// engine's queue created), and then runs every script of every set on it,
// twice over in random orders, with random valid arguments (an owner that is
// often the holder, the head or a queued waiter; any client clock from a
// minute before the start to twenty minutes after it). Each call must return
// (a reply or an error reply) within corruptBound; on redis-server (a server
// the test starts, busy-reply-threshold 500 ms) a second connection PINGs
// while the call runs and a BUSY reply fails the call at once; on miniredis
// (no script time limit) a call that issues more than miniBudget Redis
// commands fails at once. The state has fewer than a hundred elements, so
// both bounds are far above anything a terminating script needs.
//
// A call that does not return is stopped so that the server recovers: SCRIPT
// KILL on redis-server, or a restart of the server when the script wrote
// before looping (UNKILLABLE); on miniredis a pre-command hook makes every
// Redis command the script issues fail, which ends the script at its next
// redis.call. A script that looped without calling Redis could not be
// stopped there: its goroutine would be left running and that miniredis
// blocked (the failure says so).
//
// Besides hangs, every call's outcome is tabulated per script and logged
// (go test -v) when the test passes: error replies (with file:line in lua/),
// error replies after the script had written (the state is left
// half-changed: Redis does not roll a script back), and replies no
// consistent state gives (a negative or huge wait). CORRUPT_SURVEY=1 turns
// hangs into entries of that table instead of failures, so that a long run
// lists every outcome with the shortest corruptions that led to it:
//
//	CORRUPT_SURVEY=1 RAPID_CHECKS=1500 go test ./propertytests/ -run TestCorruptState -v

const (
	corruptBound  = 5 * time.Second // a call must return within this
	busyThreshold = "500"           // ms, redis-server's busy-reply-threshold
	miniBudget    = 2_000           // Redis commands one call may issue on miniredis
)

// The three locks of a sequence: one used by the reentrant scripts only,
// one by the fair Redisson-compatible engine, one by the scalable engine.
// The reentrant scripts also run on the two fair locks' hashes.
var (
	cxR = wire.KeysFor("cx:r")
	cxF = wire.KeysFor("cx:f")
	cxS = wire.KeysFor("cx:s")
)

// tb is what both *testing.T and *rapid.T offer.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
}

// A hangTarget is a Redis the scripts run on, with a guard that bounds each
// call and stops a script that does not return.
type hangTarget interface {
	name() string
	// fresh empties the Redis for one sequence and returns its client.
	fresh(t tb) *redis.Client
	// guard runs one call and reports how it ended. After a hang the
	// Redis may have lost its data (it was restarted) or be blocked
	// (a miniredis whose script could not be stopped): the sequence
	// must not use it again.
	guard(call func(context.Context) error) guarded
}

type guarded struct {
	err error
	// hang says why the call counts as not returning and how it was
	// stopped ("" if it returned), in words that do not depend on timing,
	// so that rapid sees the same failure when it replays a sequence;
	// detail adds the timing.
	hang, detail string
}

// realHangTarget is a redis-server this test starts, so that it may set a
// low busy-reply-threshold, SCRIPT KILL, flush and restart it.
type realHangTarget struct {
	srv      *redistest.Server
	rdb, mon *redis.Client
}

func newRealHangTarget(t *testing.T) *realHangTarget {
	r := &realHangTarget{srv: redistest.StartT(t)}
	if err := r.connect(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { _ = r.rdb.Close(); _ = r.mon.Close() })
	return r
}

func (r *realHangTarget) connect() error {
	// The script connection's read timeout is far above the bound: the
	// guard, not go-redis, decides that a call is hung.
	r.rdb = redis.NewClient(&redis.Options{Addr: r.srv.Addr, MaxRetries: -1,
		ReadTimeout: 6 * corruptBound, WriteTimeout: 6 * corruptBound})
	r.mon = redis.NewClient(&redis.Options{Addr: r.srv.Addr, MaxRetries: -1,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	return r.mon.ConfigSet(context.Background(), "busy-reply-threshold", busyThreshold).Err()
}

func (r *realHangTarget) name() string { return "redis-server" }

func (r *realHangTarget) fresh(t tb) *redis.Client {
	t.Helper()
	// The server is this test's own: flushing it touches nobody else.
	if err := r.rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("flushall: %v", err)
	}
	return r.rdb
}

func (r *realHangTarget) guard(call func(context.Context) error) guarded {
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- call(context.Background()) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	bound := time.NewTimer(corruptBound)
	defer bound.Stop()
	for {
		select {
		case err := <-done:
			return guarded{err: err}
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := r.mon.Ping(ctx).Err()
			cancel()
			if err != nil && strings.HasPrefix(err.Error(), "BUSY") {
				return r.stop(done, start, "it ran past busy-reply-threshold ("+busyThreshold+" ms): a PING on a second connection got "+
					strconv.Quote(err.Error()))
			}
		case <-bound.C:
			return r.stop(done, start, fmt.Sprintf("no reply within %v", corruptBound))
		}
	}
}

func (r *realHangTarget) stop(done chan error, start time.Time, why string) guarded {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := r.mon.Do(ctx, "script", "kill").Err()
	cancel()
	how := "SCRIPT KILL: OK"
	switch {
	case err != nil && strings.Contains(err.Error(), "UNKILLABLE"):
		how = "SCRIPT KILL refused (UNKILLABLE: the script had written before looping); server killed and restarted empty"
		_ = r.rdb.Close()
		_ = r.mon.Close()
		if err := r.srv.Restart(); err != nil {
			how += "; the restart failed: " + err.Error()
		}
		if err := r.connect(); err != nil {
			how += "; reconnecting failed: " + err.Error()
		}
	case err != nil:
		how = "SCRIPT KILL: " + err.Error()
	}
	detected := time.Since(start)
	select {
	case err := <-done:
		return guarded{err: err, hang: why + "; " + how,
			detail: fmt.Sprintf("declared hung %v after it began; its reply once stopped: %v", detected.Round(time.Millisecond), err)}
	case <-time.After(corruptBound):
		return guarded{hang: why + "; " + how + "; the call still has not returned (its goroutine is left behind)",
			detail: fmt.Sprintf("declared hung %v after it began", detected.Round(time.Millisecond))}
	}
}

// miniHangTarget is a miniredis, emptied for each sequence. A pre-command
// hook counts the commands each call issues and, once a call is declared
// hung, fails every command so that the script ends at its next
// redis.call. A miniredis whose script could not be stopped stays blocked
// (its lock is held): the next sequence gets a new one.
type miniHangTarget struct{ cur *miniRun }

type miniRun struct {
	m     *miniredis.Miniredis
	rdb   *redis.Client
	cmds  atomic.Int64
	kill  atomic.Bool
	stuck bool // a call never returned: the server stays locked
}

func newMiniHangTarget(t *testing.T) *miniHangTarget {
	mt := &miniHangTarget{}
	t.Cleanup(func() { mt.close() })
	return mt
}

func (*miniHangTarget) name() string { return "miniredis" }

func (mt *miniHangTarget) close() {
	if mt.cur != nil && !mt.cur.stuck { // a blocked miniredis cannot be closed: it holds its lock
		_ = mt.cur.rdb.Close()
		mt.cur.m.Close()
	}
	mt.cur = nil
}

func (mt *miniHangTarget) fresh(t tb) *redis.Client {
	t.Helper()
	if mt.cur != nil && !mt.cur.stuck {
		if err := mt.cur.rdb.FlushAll(context.Background()).Err(); err != nil {
			t.Fatalf("flushall: %v", err)
		}
		return mt.cur.rdb
	}
	mt.close()
	run := &miniRun{m: miniredis.NewMiniRedis()}
	if err := run.m.Start(); err != nil {
		t.Fatalf("miniredis: %v", err)
	}
	run.m.Server().SetPreHook(func(c *server.Peer, cmd string, args ...string) bool {
		run.cmds.Add(1)
		if run.kill.Load() {
			c.WriteError("ERR stopped by the corruption test: the script did not return")
			return true
		}
		return false
	})
	run.rdb = redis.NewClient(&redis.Options{Addr: run.m.Addr(), MaxRetries: -1,
		ReadTimeout: 6 * corruptBound, WriteTimeout: 6 * corruptBound})
	mt.cur = run
	return run.rdb
}

func (mt *miniHangTarget) guard(call func(context.Context) error) guarded {
	run := mt.cur
	run.cmds.Store(0)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- call(context.Background()) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	bound := time.NewTimer(corruptBound)
	defer bound.Stop()
	why := ""
	for why == "" {
		select {
		case err := <-done:
			return guarded{err: err}
		case <-tick.C:
			if n := run.cmds.Load(); n > miniBudget {
				why = fmt.Sprintf("the call issued more than %d Redis commands", miniBudget)
			}
		case <-bound.C:
			why = fmt.Sprintf("no reply within %v", corruptBound)
		}
	}
	detected := time.Since(start)
	run.kill.Store(true)
	defer run.kill.Store(false)
	select {
	case err := <-done:
		return guarded{err: err, hang: why + "; stopped by failing its next Redis command",
			detail: fmt.Sprintf("declared hung %v after it began; its reply once stopped: %v", detected.Round(time.Millisecond), err)}
	case <-time.After(corruptBound):
		run.stuck = true
		return guarded{hang: why + "; could not be stopped (no Redis command in its loop): its goroutine is left running",
			detail: fmt.Sprintf("declared hung %v after it began", detected.Round(time.Millisecond))}
	}
}

// corruptSeq is one sequence: build, corrupt, check.
type corruptSeq struct {
	ctx     context.Context
	fair    *wire.Scripts
	sc      *wire.ScalableScripts
	tg      hangTarget
	rdb     *redis.Client
	clock   int64            // the true client clock while building, Unix ms
	skew    map[string]int64 // per client
	reqs    []string         // unlock request ids used so far
	applied []string         // the corruptions, as the commands run
	kinds   []string
	calls   []string // the script calls made, for a failure report
	stats   *corruptStats
	survey  bool
}

// A scriptCall is one script of one set, called through its lua wrapper.
type scriptCall struct {
	label string
	set   string // "reentrant", "fair", "scalable": which lock it runs on
	file  string
	run   func(ctx context.Context, rdb *redis.Client, c callArgs) (reply, odd string, err error)
}

type callArgs struct {
	fair  *wire.Scripts         // the reentrant and Redisson-compatible scripts
	sc    *wire.ScalableScripts // the scalable engine's
	k     wire.Keys
	a     wire.Args
	names []string // renew: the locks
	os    []string // renew: their owners
}

var corruptCalls = []scriptCall{
	{"Acquire", "reentrant", wire.FileAcquire, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		ok, ttl, err := c.fair.Acquire(ctx, rdb, c.k, c.a)
		return fmt.Sprintf("acquired=%v ttl=%d", ok, ttl), oddTTL(ok, ttl, -1), err
	}},
	{"Unlock", "reentrant", wire.FileUnlock, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		r, err := c.fair.Unlock(ctx, rdb, c.k, c.a)
		return r.String(), "", err
	}},
	{"ForceUnlock", "reentrant", wire.FileForceUnlock, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		ok, err := c.fair.ForceUnlock(ctx, rdb, c.k, c.a)
		return fmt.Sprint(ok), "", err
	}},
	{"Renew", "reentrant", wire.FileRenew, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		r, err := c.fair.Renew(ctx, rdb, c.names, c.os, c.a.LeaseMs)
		return fmt.Sprint(r), "", err
	}},
	{"FairTryLock", "fair", wire.FileFairTryLock, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		ok, err := c.fair.FairTryLock(ctx, rdb, c.k, c.a)
		return fmt.Sprint(ok), "", err
	}},
	{"FairTryLockWait", "fair", wire.FileFairTryLockWait, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		ok, ttl, err := c.fair.FairTryLockWait(ctx, rdb, c.k, c.a)
		return fmt.Sprintf("acquired=%v ttl=%d", ok, ttl), oddTTL(ok, ttl, -1), err
	}},
	{"FairAcquireFailed", "fair", wire.FileFairAcquireFailed, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		return "", "", c.fair.FairAcquireFailed(ctx, rdb, c.k, c.a)
	}},
	{"FairUnlock", "fair", wire.FileFairUnlock, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		r, err := c.fair.FairUnlock(ctx, rdb, c.k, c.a)
		return r.String(), "", err
	}},
	{"FairForceUnlock", "fair", wire.FileFairForceUnlock, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		ok, err := c.fair.FairForceUnlock(ctx, rdb, c.k, c.a)
		return fmt.Sprint(ok), "", err
	}},
	{"ScalableTryLock", "scalable", wire.FileScalableTryLock, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		ok, err := c.sc.TryLock(ctx, rdb, c.k, c.a)
		return fmt.Sprint(ok), "", err
	}},
	{"ScalableTryLockWait", "scalable", wire.FileScalableTryLockWait, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		ok, ttl, err := c.sc.TryLockWait(ctx, rdb, c.k, c.a)
		return fmt.Sprintf("acquired=%v ttl=%d", ok, ttl), oddTTL(ok, ttl, -1), err
	}},
	{"ScalableAcquireFailed", "scalable", wire.FileScalableAcquireFailed, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		return "", "", c.sc.AcquireFailed(ctx, rdb, c.k, c.a)
	}},
	{"ScalableUnlock", "scalable", wire.FileScalableUnlock, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		r, err := c.sc.Unlock(ctx, rdb, c.k, c.a)
		return r.String(), "", err
	}},
	{"ScalableForceUnlock", "scalable", wire.FileScalableForceUnlock, func(ctx context.Context, rdb *redis.Client, c callArgs) (string, string, error) {
		ok, err := c.sc.ForceUnlock(ctx, rdb, c.k, c.a)
		return fmt.Sprint(ok), "", err
	}},
}

// Draws by name, so that rapid's log of a failing sequence reads well.

func drawLock(t *rapid.T) wire.Keys {
	switch rapid.SampledFrom([]string{cxR.Name, cxF.Name, cxS.Name}).Draw(t, "lock") {
	case cxR.Name:
		return cxR
	case cxF.Name:
		return cxF
	}
	return cxS
}

func drawCall(t *rapid.T) scriptCall {
	var labels []string
	for _, c := range corruptCalls {
		labels = append(labels, c.label)
	}
	return corruptCalls[slices.Index(labels, rapid.SampledFrom(labels).Draw(t, "script"))]
}

func drawCorruption(t *rapid.T) corruption {
	var kinds []string
	for _, c := range corruptions {
		kinds = append(kinds, c.kind)
	}
	return corruptions[slices.Index(kinds, rapid.SampledFrom(kinds).Draw(t, "corruption"))]
}

// oddTTL flags a "ms to wait" reply that no consistent state produces: a
// PTTL is -1 (no expiry) or positive; a wait is at least 1; and nothing here
// is more than a few hours away.
func oddTTL(acquired bool, ttl, low int64) string {
	switch {
	case acquired || ttl >= low && ttl < 24*3600*1000:
		return ""
	case ttl == math.MinInt64:
		return "wait -2^63 ms (a Lua number out of range: inf or NaN)"
	case ttl < low:
		return "negative wait"
	}
	return "wait of more than a day"
}

func TestCorruptStateScriptsReturn(t *testing.T) {
	checkCorruptState(t, wire.Default(), wire.ScalableDefault())
}

// checkCorruptState runs the property with the given script sets (a fix can
// be tried with wire.Edit / wire.EditScalable before it is made).
func checkCorruptState(t *testing.T, fair *wire.Scripts, sc *wire.ScalableScripts) {
	survey := os.Getenv("CORRUPT_SURVEY") == "1"
	for _, be := range []struct {
		name string
		tg   func(*testing.T) hangTarget
	}{
		{"miniredis", func(t *testing.T) hangTarget { return newMiniHangTarget(t) }},
		{"redis-server", func(t *testing.T) hangTarget { return newRealHangTarget(t) }},
	} {
		t.Run(be.name, func(t *testing.T) {
			tg := be.tg(t)
			st := newCorruptStats()
			t.Cleanup(func() {
				// After a failure the table counts rapid's replays
				// too: it is noise next to the minimal sequence.
				if survey || !t.Failed() {
					st.log(t)
				}
			})
			rapid.Check(t, func(rt *rapid.T) {
				s := &corruptSeq{ctx: context.Background(), fair: fair, sc: sc, tg: tg, rdb: tg.fresh(rt), clock: t0,
					skew: map[string]int64{}, stats: st, survey: survey}
				st.sequence()
				s.build(rt)
				s.corrupt(rt)
				s.check(rt)
			})
		})
	}
}

// build runs random valid operations of every script set, after a
// prologue that queues a few waiters behind a holder on both fair locks, so
// that most states have queues to corrupt.
func (s *corruptSeq) build(t *rapid.T) {
	for _, label := range []string{"FairTryLockWait", "ScalableTryLockWait"} {
		c := corruptCalls[slices.IndexFunc(corruptCalls, func(c scriptCall) bool { return c.label == label })]
		for range rapid.IntRange(0, 5).Draw(t, "prologue "+c.set) {
			a := s.drawArgs(t, c, false)
			if _, _, err := s.call(t, c, a, "build"); err != nil {
				t.Fatalf("building a well-formed state: %s %s: %v\nstate:\n%s", c.label, describeArgs(c, a), err, s.snapshot())
			}
		}
	}
	steps := rapid.IntRange(0, 20).Draw(t, "build steps")
	for range steps {
		switch op := rapid.SampledFrom([]string{"call", "call", "call", "call", "clock", "skew", "lease ends", "persist"}).Draw(t, "build op"); op {
		case "clock":
			s.clock += rapid.Int64Range(0, 120).Draw(t, "advance") * 1000
		case "skew":
			s.skew[rapid.SampledFrom(clients).Draw(t, "client")] = rapid.Int64Range(-6, 6).Draw(t, "skew") * 1000
		case "lease ends", "persist":
			k := drawLock(t)
			cmd := []any{"del", k.Name}
			if op == "persist" {
				cmd = []any{"persist", k.Name}
			}
			if err := s.rdb.Do(s.ctx, cmd...).Err(); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
		default:
			c := drawCall(t)
			a := s.drawArgs(t, c, false)
			_, _, err := s.call(t, c, a, "build")
			if err != nil {
				t.Fatalf("building a well-formed state: %s %s: %v\nstate:\n%s", c.label, describeArgs(c, a), err, s.snapshot())
			}
		}
	}
}

// drawArgs draws valid arguments for c: the lock of its set (any of the
// three for the reentrant scripts), an owner that is often the holder, the
// head or a queued waiter, and a client clock (while building, the true
// clock plus the client's skew; while checking, anything from a minute
// before the start to 20 minutes after it).
func (s *corruptSeq) drawArgs(t *rapid.T, c scriptCall, checking bool) callArgs {
	var k wire.Keys
	switch c.set {
	case "fair":
		k = cxF
	case "scalable":
		k = cxS
	default:
		k = drawLock(t)
	}
	owner := s.drawOwner(t, k, c.set)
	now := s.clock + s.skew[clientOf(owner)] // drawOwner draws from owners only
	if checking {
		now = t0 + rapid.Int64Range(-60, 1200).Draw(t, "now")*1000
	}
	a := wire.Args{
		Owner:   owner,
		LeaseMs: rapid.Int64Range(30, 300).Draw(t, "lease") * 1000,
		WaitMs:  rapid.Int64Range(1, 300).Draw(t, "wait") * 1000,
		NowMs:   now,
		GraceMs: rapid.SampledFrom([]int64{0, 1000, 5000}).Draw(t, "grace"),
		LatchMs: rapid.Int64Range(30, 120).Draw(t, "latch") * 1000,
	}
	if len(s.reqs) > 0 && rapid.IntRange(0, 3).Draw(t, "retry") == 0 {
		a.RequestID = rapid.SampledFrom(s.reqs).Draw(t, "request")
	} else {
		a.RequestID = "req" + strconv.Itoa(len(s.reqs)+1)
		s.reqs = append(s.reqs, a.RequestID)
	}
	ca := callArgs{fair: s.fair, sc: s.sc, k: k, a: a}
	if c.label == "Renew" {
		for i := range rapid.IntRange(1, 3).Draw(t, "batch") {
			rk := k
			if i > 0 {
				rk = drawLock(t)
			}
			ca.names = append(ca.names, rk.Name)
			ca.os = append(ca.os, s.drawOwner(t, rk, "reentrant"))
		}
	}
	return ca
}

// drawOwner draws any owner, or the holder of k, or (for the fair sets)
// its head or a queued waiter, as the state says; read errors (a key of
// the wrong type) fall back to any owner.
func (s *corruptSeq) drawOwner(t *rapid.T, k wire.Keys, set string) string {
	var pool []string
	switch rapid.IntRange(0, 3).Draw(t, "who") {
	case 1:
		pool, _ = s.rdb.HKeys(s.ctx, k.Name).Result()
	case 2, 3:
		switch set {
		case "fair":
			pool, _ = s.rdb.LRange(s.ctx, k.Queue, 0, -1).Result()
		case "scalable":
			fs, _ := s.rdb.HKeys(s.ctx, k.ScalableQueue()).Result()
			for _, f := range fs {
				if o, ok := strings.CutPrefix(f, "n:"); ok {
					pool = append(pool, o)
				}
			}
		}
	}
	// Corruption may have put anything in the state: only well-formed
	// owner ids are valid arguments.
	pool = slices.DeleteFunc(pool, func(o string) bool { return !slices.Contains(owners, o) })
	slices.Sort(pool)
	pool = slices.Compact(pool)
	if len(pool) == 0 {
		pool = owners
	}
	return rapid.SampledFrom(pool).Draw(t, "owner")
}

func describeArgs(c scriptCall, ca callArgs) string {
	a := ca.a
	if c.label == "Renew" {
		return fmt.Sprintf("names=%v owners=%v lease=%d", ca.names, ca.os, a.LeaseMs)
	}
	return fmt.Sprintf("lock=%s owner=%s lease=%d wait=%d now=t0%+d grace=%d request=%s latch=%d",
		ca.k.Name, a.Owner, a.LeaseMs, a.WaitMs, a.NowMs-t0, a.GraceMs, a.RequestID, a.LatchMs)
}

// call runs c under the target's guard. A hang fails the test (with the
// state before the call, the corruptions and the calls before it), or in
// survey mode is recorded and ends the sequence (ok false).
func (s *corruptSeq) call(t *rapid.T, c scriptCall, ca callArgs, phase string) (reply string, ok bool, err error) {
	// The state before the call: for the failure report and to see
	// whether a call that failed wrote first. A well-formed state (while
	// building) is not expected to fail: it is not read then.
	before := "  (not read while building)\n"
	if phase == "check" {
		before = s.snapshot()
	}
	desc := c.label + " " + describeArgs(c, ca)
	var r, odd string // written by the call's goroutine: read only once it has returned
	g := s.tg.guard(func(ctx context.Context) error {
		var err error
		r, odd, err = c.run(ctx, s.rdb, ca)
		return err
	})
	if g.hang != "" {
		s.calls = append(s.calls, phase+": "+desc+" -> did not return")
		s.stats.record(s.tg.name(), c, "HANG: "+g.hang, s.applied)
		if s.survey {
			return "", false, g.err
		}
		// The failure message must be the same when rapid replays the
		// sequence: on redis-server the state holds deadlines computed
		// from real PTTLs, so it goes to the log with the timing.
		t.Logf("state before the call:\n%s%s\ncalls so far:\n  %s", before, g.detail, strings.Join(s.calls, "\n  "))
		t.Fatalf("%s did not return on %s: %s\ncall: %s\ncorruptions: %s",
			c.label, s.tg.name(), g.hang, desc, orNone(s.applied))
	}
	reply = r
	s.calls = append(s.calls, phase+": "+desc+" -> "+outcomeOf(reply, g.err))
	if phase != "check" {
		return reply, true, g.err
	}
	switch {
	case g.err != nil:
		what := "error reply: "
		if s.snapshot() != before {
			what = "error reply after writing (state left half-changed): "
		}
		s.stats.record(s.tg.name(), c, what+normalizeLuaError(c.file, g.err.Error()), s.applied)
	case odd != "":
		s.stats.record(s.tg.name(), c, "odd reply: "+odd, s.applied)
	default:
		s.stats.ok(c)
	}
	return reply, true, g.err
}

func outcomeOf(reply string, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	if reply == "" {
		return "ok"
	}
	return reply
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, "; ")
}

// check runs every script of every set on the corrupted state, twice over,
// each round in a random order.
func (s *corruptSeq) check(t *rapid.T) {
	idx := make([]int, len(corruptCalls))
	for i := range idx {
		idx[i] = i
	}
	for round := range 2 {
		for _, i := range rapid.Permutation(idx).Draw(t, "order "+strconv.Itoa(round)) {
			c := corruptCalls[i]
			if _, ok, _ := s.call(t, c, s.drawArgs(t, c, true), "check"); !ok {
				return
			}
		}
	}
}

// snapshot prints every key: type, whether it expires, and its contents
// (hash fields, list items, zset members with scores, strings, sets), in
// three round trips.
func (s *corruptSeq) snapshot() string {
	keys, err := s.rdb.Keys(s.ctx, "*").Result()
	if err != nil {
		return "(cannot read the state: " + err.Error() + ")"
	}
	slices.Sort(keys)
	types := make([]*redis.StatusCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	pipe := s.rdb.Pipeline()
	for i, k := range keys {
		types[i], ttls[i] = pipe.Type(s.ctx, k), pipe.PTTL(s.ctx, k)
	}
	if _, err := pipe.Exec(s.ctx); err != nil {
		return "(cannot read the state: " + err.Error() + ")"
	}
	bodies := make([]func() string, len(keys))
	pipe = s.rdb.Pipeline()
	for i, k := range keys {
		switch types[i].Val() {
		case "hash":
			c := pipe.HGetAll(s.ctx, k)
			bodies[i] = func() string {
				fs := make([]string, 0, len(c.Val()))
				for f, v := range c.Val() {
					fs = append(fs, fmt.Sprintf("%s=%q", f, v))
				}
				slices.Sort(fs)
				return strings.Join(fs, " ")
			}
		case "list":
			c := pipe.LRange(s.ctx, k, 0, -1)
			bodies[i] = func() string { return fmt.Sprintf("%q", c.Val()) }
		case "zset":
			c := pipe.ZRangeWithScores(s.ctx, k, 0, -1)
			bodies[i] = func() string {
				var ms []string
				for _, z := range c.Val() {
					ms = append(ms, fmt.Sprintf("%v=%s", z.Member, strconv.FormatFloat(z.Score, 'f', -1, 64)))
				}
				return strings.Join(ms, " ")
			}
		case "set":
			c := pipe.SMembers(s.ctx, k)
			bodies[i] = func() string { ms := slices.Sorted(slices.Values(c.Val())); return fmt.Sprintf("%q", ms) }
		default:
			c := pipe.Get(s.ctx, k)
			bodies[i] = func() string { return fmt.Sprintf("%q", c.Val()) }
		}
	}
	if _, err := pipe.Exec(s.ctx); err != nil && err != redis.Nil {
		return "(cannot read the state: " + err.Error() + ")"
	}
	var b strings.Builder
	for i, k := range keys {
		exp := ""
		if ttls[i].Val() > 0 {
			exp = ", expires"
		}
		fmt.Fprintf(&b, "  %s (%s%s): %s\n", k, types[i].Val(), exp, bodies[i]())
	}
	if b.Len() == 0 {
		return "  (empty)\n"
	}
	return b.String()
}

// Corruption.

// stateView is what exists, to draw corruption targets from.
type stateView struct {
	keys   []string
	typ    map[string]string
	fields map[string][]string // hash -> fields
	items  map[string][]string // list -> items
	zmem   map[string][]string // zset -> members
}

func (s *corruptSeq) view(t *rapid.T) *stateView {
	keys, err := s.rdb.Keys(s.ctx, "*").Result()
	if err != nil {
		t.Fatalf("keys: %v", err)
	}
	slices.Sort(keys)
	v := &stateView{keys: keys, typ: map[string]string{}, fields: map[string][]string{}, items: map[string][]string{}, zmem: map[string][]string{}}
	for _, k := range keys {
		v.typ[k] = s.rdb.Type(s.ctx, k).Val()
		switch v.typ[k] {
		case "hash":
			fs := s.rdb.HKeys(s.ctx, k).Val()
			slices.Sort(fs)
			v.fields[k] = fs
		case "list":
			v.items[k] = s.rdb.LRange(s.ctx, k, 0, -1).Val()
		case "zset":
			v.zmem[k] = s.rdb.ZRange(s.ctx, k, 0, -1).Val()
		}
	}
	return v
}

// queuedS lists the owners with a node in the scalable queue.
func (v *stateView) queuedS() []string {
	var os []string
	for _, f := range v.fields[cxS.ScalableQueue()] {
		if o, ok := strings.CutPrefix(f, "n:"); ok {
			os = append(os, o)
		}
	}
	return os
}

// garbageNumbers are values no numeric field or hold count should hold:
// not numbers, empty, fractions, out of range, infinities, NaN.
var garbageNumbers = []string{"x", "", "1.5", "-1", "0", "nan", "inf", "-inf", "1e400", "99999999999999999999", "-9000000000000000000"}

// garbageScores are scores ZADD accepts that no deadline should be.
var garbageScores = []string{"inf", "-inf", "0", "-1e18", "1e18", "1700000000000.5", "1699000000000"}

type corruption struct {
	kind  string
	apply func(s *corruptSeq, t *rapid.T, v *stateView) []any // the command to run; nil when nothing to corrupt
}

// corruptions are the kinds of damage, the scalable queue's first (rapid
// draws small indices more often).
var corruptions = []corruption{
	{"squeue: delete a field", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		sq := cxS.ScalableQueue()
		if len(v.fields[sq]) == 0 {
			return nil
		}
		return []any{"hdel", sq, rapid.SampledFrom(v.fields[sq]).Draw(t, "field")}
	}},
	{"squeue: delete a node", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		q := v.queuedS()
		if len(q) == 0 {
			return nil
		}
		o := rapid.SampledFrom(q).Draw(t, "node")
		return []any{"hdel", cxS.ScalableQueue(), "n:" + o, "p:" + o, "d:" + o}
	}},
	{"squeue: relink", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		q := v.queuedS()
		if len(q) == 0 {
			return nil
		}
		o := rapid.SampledFrom(q).Draw(t, "node")
		f := rapid.SampledFrom([]string{"n:" + o, "p:" + o, "h", "t"}).Draw(t, "link")
		val := rapid.SampledFrom(append([]string{o, "", "nobody"}, owners...)).Draw(t, "to")
		return []any{"hset", cxS.ScalableQueue(), f, val}
	}},
	{"squeue: self-loop", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		q := v.queuedS()
		if len(q) == 0 {
			return nil
		}
		o := rapid.SampledFrom(q).Draw(t, "node")
		return []any{"hset", cxS.ScalableQueue(), rapid.SampledFrom([]string{"n:", "p:"}).Draw(t, "link") + o, o}
	}},
	{"squeue: garbage number", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		fs := []string{"hd", "td"}
		for _, o := range v.queuedS() {
			fs = append(fs, "d:"+o)
		}
		return []any{"hset", cxS.ScalableQueue(), rapid.SampledFrom(fs).Draw(t, "field"),
			rapid.SampledFrom(garbageNumbers).Draw(t, "value")}
	}},
	{"squeue: stray node", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		o := rapid.SampledFrom(owners).Draw(t, "owner")
		other := rapid.SampledFrom(append([]string{""}, owners...)).Draw(t, "linked to")
		return []any{"hset", cxS.ScalableQueue(), "n:" + o, other, "p:" + o, other, "d:" + o, "5000"}
	}},
	{"queue list: remove an item", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		items := v.items[cxF.Queue]
		if len(items) == 0 {
			return nil
		}
		return []any{"lrem", cxF.Queue, 1, rapid.SampledFrom(items).Draw(t, "item")}
	}},
	{"queue list: duplicate an item", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		items := v.items[cxF.Queue]
		if len(items) == 0 {
			return nil
		}
		it := rapid.SampledFrom(items).Draw(t, "item")
		if rapid.Bool().Draw(t, "at the tail") {
			return []any{"rpush", cxF.Queue, it}
		}
		return []any{"linsert", cxF.Queue, "after", it, it}
	}},
	{"queue list: insert a stranger", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		val := rapid.SampledFrom(append([]string{"", "nobody"}, owners...)).Draw(t, "value")
		items := v.items[cxF.Queue]
		switch {
		case len(items) > 0 && rapid.Bool().Draw(t, "in the middle"):
			return []any{"linsert", cxF.Queue, "before", rapid.SampledFrom(items).Draw(t, "pivot"), val}
		case rapid.Bool().Draw(t, "head"):
			return []any{"lpush", cxF.Queue, val}
		}
		return []any{"rpush", cxF.Queue, val}
	}},
	{"timeouts: remove a member", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		ms := v.zmem[cxF.Timeouts]
		if len(ms) == 0 {
			return nil
		}
		return []any{"zrem", cxF.Timeouts, rapid.SampledFrom(ms).Draw(t, "member")}
	}},
	{"timeouts: add a stranger", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		o := rapid.SampledFrom(append([]string{"nobody"}, owners...)).Draw(t, "member")
		return []any{"zadd", cxF.Timeouts, t0 + rapid.Int64Range(-60, 600).Draw(t, "deadline")*1000, o}
	}},
	{"timeouts: garbage score", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		ms := v.zmem[cxF.Timeouts]
		if len(ms) == 0 {
			return nil
		}
		return []any{"zadd", cxF.Timeouts, rapid.SampledFrom(garbageScores).Draw(t, "score"), rapid.SampledFrom(ms).Draw(t, "member")}
	}},
	{"lock hash: damage", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		k := drawLock(t).Name
		fs := v.fields[k]
		switch rapid.IntRange(0, 2).Draw(t, "how") {
		case 0: // a second holder
			return []any{"hset", k, rapid.SampledFrom(owners).Draw(t, "owner"), "1"}
		case 1:
			if len(fs) > 0 {
				return []any{"hdel", k, rapid.SampledFrom(fs).Draw(t, "field")}
			}
		}
		o := rapid.SampledFrom(slices.Concat(fs, owners)).Draw(t, "owner")
		return []any{"hset", k, o, rapid.SampledFrom(garbageNumbers).Draw(t, "count")}
	}},
	{"latch: garbage", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		k := drawLock(t)
		req := "req" + strconv.Itoa(rapid.IntRange(1, len(s.reqs)+3).Draw(t, "request"))
		return []any{"set", k.Latch(req), rapid.SampledFrom([]string{"x", "", "2", "-1", "1.5", "0x1"}).Draw(t, "value"), "px", 600_000}
	}},
	{"wrong type", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		cands := []string{cxR.Name, cxF.Name, cxF.Queue, cxF.Timeouts, cxS.Name, cxS.ScalableQueue()}
		for _, k := range v.keys {
			if strings.HasPrefix(k, "redisson_unlock_latch") {
				cands = append(cands, k)
			}
		}
		k := rapid.SampledFrom(cands).Draw(t, "key")
		kind := rapid.SampledFrom([]string{"string", "list", "set", "hash", "zset"}).Draw(t, "as")
		if kind == v.typ[k] {
			return nil
		}
		// One MULTI-less script: delete and recreate with the other type.
		return []any{"eval", `redis.call('del', KEYS[1])
local kind = ARGV[1]
if kind == 'string' then return redis.call('set', KEYS[1], 'x') end
if kind == 'list' then return redis.call('rpush', KEYS[1], 'cA:1') end
if kind == 'set' then return redis.call('sadd', KEYS[1], 'cA:1') end
if kind == 'hash' then return redis.call('hset', KEYS[1], 'cA:1', '1') end
return redis.call('zadd', KEYS[1], 1, 'cA:1')`, 1, k, kind}
	}},
	{"mixed engines", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		switch rapid.IntRange(0, 2).Draw(t, "which") {
		case 0:
			return []any{"rpush", cxS.Queue, rapid.SampledFrom(owners).Draw(t, "owner")}
		case 1:
			return []any{"zadd", cxS.Timeouts, t0, rapid.SampledFrom(owners).Draw(t, "owner")}
		}
		o := rapid.SampledFrom(owners).Draw(t, "owner")
		return []any{"hset", cxF.ScalableQueue(), "h", o, "t", o, "hd", t0, "td", t0, "n:" + o, "", "p:" + o, "", "d:" + o, 0}
	}},
	{"delete a key", func(s *corruptSeq, t *rapid.T, v *stateView) []any {
		if len(v.keys) == 0 {
			return nil
		}
		return []any{"del", rapid.SampledFrom(v.keys).Draw(t, "key")}
	}},
}

// corrupt applies one to three corruptions.
func (s *corruptSeq) corrupt(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "corruptions")
	for range n {
		c := drawCorruption(t)
		cmd := c.apply(s, t, s.view(t))
		if cmd == nil {
			continue
		}
		if err := s.rdb.Do(s.ctx, cmd...).Err(); err != nil && err != redis.Nil {
			continue // e.g. HSET on a key an earlier corruption made a list
		}
		s.kinds = append(s.kinds, c.kind)
		s.applied = append(s.applied, describeCmd(cmd))
		s.stats.applied(c.kind)
	}
}

func describeCmd(cmd []any) string {
	if cmd[0] == "eval" { // wrong type
		return fmt.Sprintf("make %v a %v", cmd[3], cmd[4])
	}
	parts := make([]string, len(cmd))
	for i, a := range cmd {
		parts[i] = fmt.Sprint(a)
		if s, ok := a.(string); ok && (s == "" || strings.ContainsAny(s, " \"")) {
			parts[i] = strconv.Quote(s)
		}
	}
	return strings.ToUpper(parts[0]) + " " + strings.Join(parts[1:], " ")
}

// Findings.

// corruptStats collects, per backend and script, every outcome other than a
// plain reply, with the shortest corruptions that led to it.
type corruptStats struct {
	mu        sync.Mutex
	sequences int
	calls     int
	oks       map[string]int
	kinds     map[string]int
	findings  map[string]*corruptFinding
}

type corruptFinding struct {
	n        int
	examples []string
}

func newCorruptStats() *corruptStats {
	return &corruptStats{oks: map[string]int{}, kinds: map[string]int{}, findings: map[string]*corruptFinding{}}
}

func (st *corruptStats) sequence() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sequences++
}

func (st *corruptStats) applied(kind string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.kinds[kind]++
}

func (st *corruptStats) ok(c scriptCall) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.calls++
	st.oks[c.label]++
}

func (st *corruptStats) record(backend string, c scriptCall, outcome string, applied []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.calls++
	key := fmt.Sprintf("%-22s %s", c.label, outcome)
	f := st.findings[key]
	if f == nil {
		f = &corruptFinding{}
		st.findings[key] = f
	}
	f.n++
	ex := orNone(applied)
	if !slices.Contains(f.examples, ex) {
		f.examples = append(f.examples, ex)
		slices.SortStableFunc(f.examples, func(a, b string) int { return len(a) - len(b) })
		if len(f.examples) > 2 {
			f.examples = f.examples[:2]
		}
	}
}

func (st *corruptStats) log(t *testing.T) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d sequences, %d checked calls\ncorruptions applied:", st.sequences, st.calls)
	for _, c := range corruptions {
		fmt.Fprintf(&b, " %s ×%d;", c.kind, st.kinds[c.kind])
	}
	b.WriteString("\nplain replies per script:")
	for _, c := range corruptCalls {
		fmt.Fprintf(&b, " %s %d;", c.label, st.oks[c.label])
	}
	b.WriteString("\nother outcomes (count, then up to two of the shortest corruptions that led to it):\n")
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range st.findings {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		f := st.findings[k]
		fmt.Fprintf(&b, "  %s  ×%d\n", k, f.n)
		for _, ex := range f.examples {
			fmt.Fprintf(&b, "      after: %s\n", ex)
		}
	}
	t.Log(b.String())
}

// normalizeLuaError makes one line of an error reply: without the script's
// SHA, with the line number turned into file:line of the lua/ sources.
// redis-server: "ERR user_script:71: attempt to ... script: <sha>, on
// @user_script:71." (a failed redis.call has no line before the message);
// miniredis: "ERR Error compiling script (new function): :71: cannot
// perform ... stack traceback: ...". A script run as a Redis Function
// (wire, funclib.go) says "user_function" and "script: fairlock_<sha>"; its
// line numbers are the library's, which has the shared functions first,
// so they are kept as they are ("function:71").
var (
	shaRE  = regexp.MustCompile(`\s*script: (?:fairlock_)?[0-9a-f]{40}, on @(user_script|user_function):(\d+)\.?`)
	lineRE = regexp.MustCompile(`(user_script|user_function|^ERR ):(\d+):`)
)

func normalizeLuaError(file, msg string) string {
	line := func(s string) string { n, _ := strconv.Atoi(s); return sourceLine(file, n) }
	if m := shaRE.FindStringSubmatch(msg); m != nil {
		msg = strings.Replace(msg, m[0], "", 1)
		if !lineRE.MatchString(msg) {
			if m[1] == "user_function" {
				msg += " (at function:" + m[2] + ")"
			} else {
				msg += " (at " + line(m[2]) + ")"
			}
		}
	}
	msg = strings.Replace(msg, "Error compiling script (new function): ", "", 1)
	if i := strings.Index(msg, " stack traceback:"); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.ReplaceAll(msg, "\n", " ")
	return lineRE.ReplaceAllStringFunc(msg, func(m string) string {
		sub := lineRE.FindStringSubmatch(m)
		switch sub[1] {
		case "user_script":
			return line(sub[2]) + ":"
		case "user_function":
			return "function:" + sub[2] + ":"
		}
		return sub[1] + line(sub[2]) + ":"
	})
}

// sourceLine maps line n of a script as sent (the common file, then the
// script's own) to file:line.
func sourceLine(file string, n int) string {
	common := ""
	switch {
	case strings.HasPrefix(file, "scalable_"):
		common = "scalable_common.lua"
	case strings.HasPrefix(file, "fair_"):
		common = "fair_common.lua"
	}
	if common != "" {
		if b, err := os.ReadFile("../lua/" + common); err == nil {
			c := strings.Count(string(b), "\n")
			if n <= c {
				return common + ":" + strconv.Itoa(n)
			}
			n -= c
		}
	}
	return file + ":" + strconv.Itoa(n)
}

// The known hang, deterministically: a node of the scalable queue loses one
// of its fields (HDEL). The queue is a holder and three waiters A, B, C (A
// the head, 60 s apart); one field of A or B (or A's or B's whole node) is
// deleted; then a scalable script is called on that state with a client
// clock past every deadline, so that a pruning script has to remove the
// head (and the others after it). The call must return (a reply or an error
// reply), and so must every scalable script called after it on whatever
// state it left.
func TestScalableDeletedNodeFieldReturns(t *testing.T) {
	var cases []scalableDamage
	for _, d := range []struct{ name, fields string }{
		{"HDEL n:A (the head's next)", "n:A"},
		{"HDEL p:A (the head's prev)", "p:A"},
		{"HDEL d:A (the head's delta)", "d:A"},
		{"HDEL n:B (the middle's next)", "n:B"},
		{"HDEL p:B (the middle's prev)", "p:B"},
		{"HDEL d:B (the middle's delta)", "d:B"},
		{"HDEL the head's node", "n:A p:A d:A"},
		{"HDEL the middle's node", "n:B p:B d:B"},
	} {
		args := []any{"hdel", cxS.ScalableQueue()}
		for _, f := range strings.Fields(d.fields) {
			args = append(args, f)
		}
		cases = append(cases, scalableDamage{d.name, args})
	}
	runScalableDamage(t, wire.ScalableDefault(), cases)
}

// The same for other single damages of the links and numbers that the
// property test found to make a scalable script loop, at once or on a later
// call.
func TestScalableDamagedLinksReturn(t *testing.T) {
	sq := cxS.ScalableQueue()
	runScalableDamage(t, wire.ScalableDefault(), []scalableDamage{
		{"HSET h nobody (the head is not queued)", []any{"hset", sq, "h", "nobody"}},
		{"HSET h '' (an empty head)", []any{"hset", sq, "h", ""}},
		{"HSET p:A B (the head has a predecessor)", []any{"hset", sq, "p:A", "B"}},
		{"HSET n:A A (a self-loop at the head)", []any{"hset", sq, "n:A", "A"}},
		{"HSET p:B B (a self-loop in the middle)", []any{"hset", sq, "p:B", "B"}},
		{"HSET hd x (the head's deadline is not a number)", []any{"hset", sq, "hd", "x"}},
		{"HDEL td (no tail deadline)", []any{"hdel", sq, "td"}},
	})
}

type scalableDamage struct {
	name string
	cmd  []any // run on the state: holder holds, A, B, C queued
}

func runScalableDamage(t *testing.T, sc *wire.ScalableScripts, cases []scalableDamage) {
	const holder = "holder"
	late := t0 + 3_600_000 // past every deadline
	type call struct {
		name string
		run  func(ctx context.Context, rdb *redis.Client) error
	}
	calls := []call{
		{"TryLockWait by C", func(ctx context.Context, rdb *redis.Client) error {
			_, _, err := sc.TryLockWait(ctx, rdb, cxS, wire.Args{Owner: "C", LeaseMs: 30_000, WaitMs: 60_000, NowMs: late, GraceMs: 5000})
			return err
		}},
		{"Unlock by the holder", func(ctx context.Context, rdb *redis.Client) error {
			_, err := sc.Unlock(ctx, rdb, cxS, wire.Args{Owner: holder, LeaseMs: 30_000, NowMs: late, GraceMs: 5000, RequestID: "u1", LatchMs: 10_000})
			return err
		}},
		{"AcquireFailed by A", func(ctx context.Context, rdb *redis.Client) error {
			return sc.AcquireFailed(ctx, rdb, cxS, wire.Args{Owner: "A", WaitMs: 60_000})
		}},
		{"AcquireFailed by B", func(ctx context.Context, rdb *redis.Client) error {
			return sc.AcquireFailed(ctx, rdb, cxS, wire.Args{Owner: "B", WaitMs: 60_000})
		}},
		{"TryLock by C", func(ctx context.Context, rdb *redis.Client) error {
			_, err := sc.TryLock(ctx, rdb, cxS, wire.Args{Owner: "C", LeaseMs: 30_000, WaitMs: 60_000, NowMs: late})
			return err
		}},
		{"ForceUnlock", func(ctx context.Context, rdb *redis.Client) error {
			_, err := sc.ForceUnlock(ctx, rdb, cxS, wire.Args{NowMs: late, GraceMs: 5000})
			return err
		}},
	}
	firsts := calls[:4] // TryLock and ForceUnlock prune as TryLockWait and Unlock do
	for _, be := range []struct {
		name string
		tg   func(*testing.T) hangTarget
	}{
		{"miniredis", func(t *testing.T) hangTarget { return newMiniHangTarget(t) }},
		{"redis-server", func(t *testing.T) hangTarget { return newRealHangTarget(t) }},
	} {
		t.Run(be.name, func(t *testing.T) {
			tg := be.tg(t)
			for _, cs := range cases {
				for _, first := range firsts {
					t.Run(cs.name+"/"+first.name+" first", func(t *testing.T) {
						ctx := context.Background()
						rdb := tg.fresh(t)
						s := &corruptSeq{ctx: ctx, tg: tg, rdb: rdb}
						// The holder holds; A, B, C queue behind it, 60 s apart.
						for _, o := range []string{holder, "A", "B", "C"} {
							ok, _, err := sc.TryLockWait(ctx, rdb, cxS, wire.Args{Owner: o, LeaseMs: 300_000, WaitMs: 60_000, NowMs: t0, GraceMs: 5000})
							if err != nil || ok != (o == holder) {
								t.Fatalf("building the queue: %s got (%v, %v)", o, ok, err)
							}
						}
						if err := rdb.Do(ctx, cs.cmd...).Err(); err != nil {
							t.Fatalf("%v: %v", cs.cmd, err)
						}
						damaged := s.snapshot()
						var done []string
						for _, c := range append([]call{first}, calls...) {
							before := s.snapshot()
							g := tg.guard(func(ctx context.Context) error { return c.run(ctx, rdb) })
							if g.hang != "" {
								t.Fatalf("%s did not return on %s: %s\n%s\ncalls before it: %s\nthe state after %s:\n%sthe state before this call:\n%s",
									c.name, tg.name(), g.hang, g.detail, orNone(done), cs.name, damaged, before)
							}
							done = append(done, fmt.Sprintf("%s -> %v", c.name, outcomeOf("", g.err)))
						}
					})
				}
			}
		})
	}
}

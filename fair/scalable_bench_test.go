package fair_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// The two fair-lock engines side by side on a private redis-server, driven
// through their scripts with synthetic waiters (one owner id each, no
// subscribers), so that what is measured is Redis's work:
//
//	go test ./fair/ -run '^$' -bench BenchmarkFairEngines -benchtime 1x
//
// Redis time is what INFO commandstats counts for EVALSHA/EVAL (the script
// calls, with the commands they run), so client round trips are excluded;
// wall-s of the drain includes them. Each sub-benchmark reports:
//
//	redis-µs/<op>  mean Redis time per operation: join (queueing one of
//	               10,000 waiters), handoff (the holder's unlock plus the
//	               head's acquisition), giveup (the head leaves)
//	max-call-µs    the slowest single script call (SLOWLOG)
//	p99.9-call-µs  its 99.9th percentile (10 means "at most 10")
//	calls          script calls measured
//	cmds/<op>      Redis commands the scripts ran per operation: the work,
//	               free of the machine's noise
//
// drain/n=10000 drains a queue of 10,000; handoff/n=N keeps the queue at N
// (a fresh waiter joins after each measured handoff, unmeasured); giveup
// keeps it at 10,000 the same way. The Redisson engine's full drain takes
// minutes, so by default it drains only its first 500 waiters (metric
// handoffs); FAIRLOCK_BENCH_FULL_DRAIN=1 drains it all.

const benchSlotMs = 300_000 // Redisson's default wait slot

type benchEngine struct {
	name      string
	tryWait   func(ctx context.Context, rdb redis.Scripter, k wire.Keys, a wire.Args) (bool, int64, error)
	unlock    func(ctx context.Context, rdb redis.Scripter, k wire.Keys, a wire.Args) (wire.UnlockResult, error)
	giveUp    func(ctx context.Context, rdb redis.Scripter, k wire.Keys, a wire.Args) error
	drainPart int // 0: the whole queue
	// grant: waiters join with an acquisition request (as Lock sends), so
	// the scalable engine's release grants the lock to the head directly
	// (issue 23); a handoff is then the release and the head's claim (a
	// renewal to its lease), not the head's take.
	grant bool
}

func benchEngines() []benchEngine {
	partial := 500
	if os.Getenv("FAIRLOCK_BENCH_FULL_DRAIN") == "1" {
		partial = 0
	}
	return []benchEngine{
		{"redisson", wire.Default().FairTryLockWait, wire.Default().FairUnlock, wire.Default().FairAcquireFailed, partial, false},
		{"scalable", wire.ScalableDefault().TryLockWait, wire.ScalableDefault().Unlock, wire.ScalableDefault().AcquireFailed, 0, false},
		{"scalable-grant", wire.ScalableDefault().TryLockWait, wire.ScalableDefault().Unlock, wire.ScalableDefault().AcquireFailed, 0, true},
	}
}

// probe measures Redis's time in script calls. Redis 7 also logs the
// commands a script runs in SLOWLOG, so the total comes from INFO
// commandstats (the usec of EVALSHA and EVAL, which include the commands the
// scripts run) and the slowest call from the top-level EVALSHA/EVAL entries of
// SLOWLOG, logged from slowlogMicros up (a call under it is not seen; the
// commands inside scripts, a few µs each, mostly stay out of the log).
type probe struct {
	rdb    *redis.Client
	usec   int64
	calls  int64
	inner  int64
	n      int64           // script calls in all windows
	cmds   int64           // commands the scripts ran, in all windows
	logged []time.Duration // the calls SLOWLOG saw, in all windows
	max    time.Duration
}

const slowlogMicros = 10

// evalUsec reads commandstats: the time and number of script calls, and the
// number of other data commands, which (no other client writes to this
// server) are the commands the scripts ran.
func (p *probe) evalUsec(b *testing.B) (usec, calls, inner int64) {
	info, err := p.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		script := name == "evalsha" || name == "eval" || name == "fcall"
		switch {
		case script:
		case name == "info", strings.HasPrefix(name, "slowlog"), name == "config", strings.HasPrefix(name, "config|"),
			name == "flushdb", name == "ping", name == "hello", strings.HasPrefix(name, "client"), strings.HasPrefix(name, "script"):
			continue
		default:
			for _, f := range strings.Split(strings.TrimSpace(stats), ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						b.Fatal(err)
					}
					inner += n
				}
			}
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			switch {
			case k != "usec" && k != "calls":
			case err != nil:
				b.Fatal(err)
			case k == "usec":
				usec += n
			default:
				calls += n
			}
		}
	}
	return usec, calls, inner
}

// p999 is the 99.9th percentile of the calls' times; a value under
// slowlogMicros is reported as slowlogMicros (an upper bound).
func (p *probe) p999() time.Duration {
	k := int((p.n + 999) / 1000) // the k-th slowest call
	if k > len(p.logged) {
		return slowlogMicros * time.Microsecond
	}
	slices.SortFunc(p.logged, func(a, b time.Duration) int { return int(b - a) })
	return p.logged[k-1]
}

// begin starts a measured window.
func (p *probe) begin(b *testing.B) {
	if err := p.rdb.Do(context.Background(), "slowlog", "reset").Err(); err != nil {
		b.Fatal(err)
	}
	p.usec, p.calls, p.inner = p.evalUsec(b)
}

// end closes the window: it adds the window's slowest call to max and
// returns the Redis time spent in scripts during it.
func (p *probe) end(b *testing.B) time.Duration {
	usec, calls, inner := p.evalUsec(b)
	d := time.Duration(usec-p.usec) * time.Microsecond
	p.n += calls - p.calls
	p.cmds += inner - p.inner
	entries, err := p.rdb.SlowLogGet(context.Background(), -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		if len(e.Args) > 0 && (e.Args[0] == "evalsha" || e.Args[0] == "eval" || e.Args[0] == "fcall") {
			p.max = max(p.max, e.Duration)
			p.logged = append(p.logged, e.Duration)
		}
	}
	return d
}

type benchQueue struct {
	b    *testing.B
	ctx  context.Context
	rdb  *redis.Client
	e    benchEngine
	k    wire.Keys
	next int
	req  int
}

func (q *benchQueue) args(owner string) wire.Args {
	q.req++
	a := wire.Args{Owner: owner, LeaseMs: 60_000, WaitMs: benchSlotMs, NowMs: time.Now().UnixMilli(),
		GraceMs: 5000, RequestID: "r" + strconv.Itoa(q.req), LatchMs: 1000}
	if q.e.grant {
		a.AcquireID = "a-" + owner
	}
	return a
}

// join queues a fresh waiter and returns its owner id.
func (q *benchQueue) join() string {
	q.next++
	o := "w:" + strconv.Itoa(q.next)
	ok, _, err := q.e.tryWait(q.ctx, q.rdb, q.k, q.args(o))
	if err != nil || ok {
		q.b.Fatalf("join %s: acquired %v, %v", o, ok, err)
	}
	return o
}

// handoff: holder releases, head takes the lock. Returns the new holder.
func (q *benchQueue) handoff(holder, head string) {
	r, err := q.e.unlock(q.ctx, q.rdb, q.k, q.args(holder))
	if err != nil || r != wire.Released {
		q.b.Fatalf("unlock by %s: %v, %v", holder, r, err)
	}
	if q.e.grant {
		// the release granted the lock to the head; its client claims it
		st, err := wire.Default().RenewEach(q.ctx, q.rdb, []string{q.k.Name}, []string{head}, 60_000)
		if err != nil || len(st) != 1 || st[0] != wire.RenewOK {
			q.b.Fatalf("head %s was not granted the lock: %v %v", head, st, err)
		}
		return
	}
	ok, _, err := q.e.tryWait(q.ctx, q.rdb, q.k, q.args(head))
	if err != nil || !ok {
		q.b.Fatalf("head %s did not take the lock: %v", head, err)
	}
}

// setup: "holder" holds the lock and n waiters are queued behind it.
func setupQueue(b *testing.B, rdb *redis.Client, e benchEngine, n int) (*benchQueue, []string) {
	q := &benchQueue{b: b, ctx: context.Background(), rdb: rdb, e: e, k: wire.KeysFor(fmt.Sprintf("bench:%s:%d:%d", e.name, n, time.Now().UnixNano()))}
	ok, _, err := e.tryWait(q.ctx, rdb, q.k, q.args("holder"))
	if err != nil || !ok {
		b.Fatalf("holder: %v %v", ok, err)
	}
	queue := make([]string, 0, n)
	for range n {
		queue = append(queue, q.join())
	}
	return q, queue
}

func BenchmarkFairEngines(b *testing.B) {
	srv := redistest.StartT(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for _, kv := range [][2]string{{"slowlog-log-slower-than", strconv.Itoa(slowlogMicros)}, {"slowlog-max-len", "100000"}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	// Load every script first: a first EVAL's compilation is not measured.
	for _, f := range wire.Files {
		if err := wire.Default().Script(f).Load(ctx, rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for _, f := range wire.ScalableFiles {
		if err := wire.ScalableDefault().Script(f).Load(ctx, rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	const big = 10_000
	report := func(b *testing.B, p *probe, redis time.Duration, n int, unit string) {
		b.ReportMetric(float64(redis.Microseconds())/float64(n), "redis-µs/"+unit)
		b.ReportMetric(float64(p.max.Microseconds()), "max-call-µs")
		b.ReportMetric(float64(p.p999().Microseconds()), "p99.9-call-µs")
		b.ReportMetric(float64(p.n), "calls")
		b.ReportMetric(float64(p.cmds)/float64(n), "cmds/"+unit)
	}

	for _, e := range benchEngines() {
		b.Run("join/n=10000/"+e.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				p := &probe{rdb: rdb}
				p.begin(b)
				b.StartTimer()
				setupQueue(b, rdb, e, big)
				b.StopTimer()
				report(b, p, p.end(b), big+1, "join")
				_ = rdb.FlushDB(ctx).Err() // our own private server
				b.StartTimer()
			}
		})
	}

	for _, e := range benchEngines() {
		b.Run("drain/n=10000/"+e.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				q, queue := setupQueue(b, rdb, e, big)
				if e.drainPart > 0 {
					queue = queue[:e.drainPart]
				}
				p := &probe{rdb: rdb}
				var total, wall time.Duration
				b.StartTimer()
				holder := "holder"
				// Windows of 1,000 handoffs keep SLOWLOG from overflowing.
				for i := 0; i < len(queue); i += 1000 {
					p.begin(b)
					start := time.Now()
					for _, head := range queue[i:min(i+1000, len(queue))] {
						q.handoff(holder, head)
						holder = head
					}
					wall += time.Since(start)
					total += p.end(b)
				}
				b.StopTimer()
				b.ReportMetric(float64(len(queue)), "handoffs")
				b.ReportMetric(total.Seconds(), "redis-s")
				b.ReportMetric(wall.Seconds(), "wall-s")
				report(b, p, total, len(queue), "handoff")
				_ = rdb.FlushDB(ctx).Err()
				b.StartTimer()
			}
		})
	}

	// Per handoff at a constant queue length: after each measured handoff a
	// fresh waiter joins at the tail (not measured).
	for _, n := range []int{100, big} {
		for _, e := range benchEngines() {
			b.Run(fmt.Sprintf("handoff/n=%d/%s", n, e.name), func(b *testing.B) {
				const rounds = 1000
				for b.Loop() {
					b.StopTimer()
					q, queue := setupQueue(b, rdb, e, n)
					p := &probe{rdb: rdb}
					var total time.Duration
					holder := "holder"
					for range rounds {
						p.begin(b)
						q.handoff(holder, queue[0])
						total += p.end(b)
						holder, queue = queue[0], append(queue[1:], q.join())
					}
					report(b, p, total, rounds, "handoff")
					_ = rdb.FlushDB(ctx).Err()
					b.StartTimer()
				}
			})
		}
	}

	// The head gives up (the worst case for the Redisson engine: everyone
	// else's deadline moves); it then joins again at the tail (not measured).
	for _, e := range benchEngines() {
		b.Run("giveup/n=10000/"+e.name, func(b *testing.B) {
			const rounds = 100
			for b.Loop() {
				b.StopTimer()
				q, queue := setupQueue(b, rdb, e, big)
				p := &probe{rdb: rdb}
				var total time.Duration
				for range rounds {
					p.begin(b)
					if err := e.giveUp(ctx, rdb, q.k, q.args(queue[0])); err != nil {
						b.Fatal(err)
					}
					total += p.end(b)
					queue = append(queue[1:], q.join())
				}
				report(b, p, total, rounds, "giveup")
				_ = rdb.FlushDB(ctx).Err()
				b.StartTimer()
			}
		})
	}
}

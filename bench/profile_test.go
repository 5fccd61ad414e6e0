package bench_test

// Issue 23: the paths a user's call takes, for profiling. A user builds a
// go-redis client with default options (no ContextTimeoutEnabled) and
// passes a request's context, which can end: every Redis call the locks
// make then runs on a goroutine of its own (internal/core/call.go).
//
//	go test -run '^$' -bench UserCycle -benchtime 3000x -cpuprofile cpu.out -memprofile mem.out .
//	FAIRLOCK_TRACE_DIR=/tmp go test -run TestTraceUserHandoff -count 1 -v .
//
// docs/benchmarks.md, "Issue 23: where a user's call spends its time",
// gives the commands and what they found.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/trace"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
)

// userLock is one of fairlock's locks on a client built as users build it.
type userLock struct {
	name         string
	lock, unlock func(context.Context) error
}

// userLocks opens n handles per lock kind on one lock name each, every
// handle on its own fairlock client (as separate processes would be) over
// a go-redis client with default options, counted by rt when it is not nil.
func userLocks(tb testing.TB, kind string, n int, rt *roundTrips) []userLock {
	tb.Helper()
	be := redistest.Real(tb)
	name := fmt.Sprintf("h23:%s:%d", kind, time.Now().UnixNano())
	var out []userLock
	for range n {
		rdb := redis.NewClient(&redis.Options{Addr: be.Addr}) // default options, as users build them
		if rt != nil {
			rdb.AddHook(rt)
		}
		c, err := fairlock.NewClient(rdb)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
		switch kind {
		case "reentrant":
			m, err := reentrant.New(c, name)
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, userLock{kind, m.Lock, m.Unlock})
		case "fair", "fair-scalable":
			var opts []fair.Option
			if kind == "fair-scalable" {
				opts = append(opts, fair.WithEngine(fair.Scalable))
			}
			m, err := fair.New(c, name, opts...)
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, userLock{kind, m.Lock, m.Unlock})
		default:
			tb.Fatalf("unknown lock kind %q", kind)
		}
	}
	return out
}

// goroutinesCreated is runtime/metrics' count of goroutines created since
// the program started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// BenchmarkUserCycle is an uncontended Lock+Unlock as a user calls it:
// default go-redis options, with context.Background() ("background") or a
// cancellable context ("canend": a context.WithCancel, as a request's).
// Besides allocs/op it reports round trips and goroutines created per
// cycle (runtime/metrics, process-wide).
func BenchmarkUserCycle(b *testing.B) {
	for _, kind := range []string{"reentrant", "fair", "fair-scalable"} {
		for _, how := range []string{"background", "canend"} {
			b.Run(kind+"/"+how, func(b *testing.B) {
				rt := &roundTrips{}
				m := userLocks(b, kind, 1, rt)[0]
				ctx := context.Background()
				if how == "canend" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer cancel()
				}
				for range 20 { // connections, script cache
					if err := m.lock(ctx); err != nil {
						b.Fatal(err)
					}
					if err := m.unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
				n0, g0 := rt.n.Load(), goroutinesCreated()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if err := m.lock(ctx); err != nil {
						b.Fatal(err)
					}
					if err := m.unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(rt.n.Load()-n0)/float64(b.N), "roundtrips/op")
				b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
			})
		}
	}
}

// TestTraceUserHandoff writes a runtime/trace of handoffs as a user's
// service makes them, when FAIRLOCK_TRACE_DIR is set: a holder on one
// client releases, a waiter on another client (blocked in Lock with a
// cancellable context) takes the lock. Each trace covers one handoff,
// from just before Unlock to just after the waiter's Lock returned; it
// logs the goroutines created over that window (runtime/metrics) and
// where the trace was written (h23-<kind>-<i>.trace, several per kind:
// read them with go tool trace -d=parsed or -pprof=sched). It asserts
// nothing about speed.
func TestTraceUserHandoff(t *testing.T) {
	dir := os.Getenv("FAIRLOCK_TRACE_DIR")
	if dir == "" {
		t.Skip("FAIRLOCK_TRACE_DIR not set")
	}
	const handoffs = 5
	for _, kind := range []string{"reentrant", "fair", "fair-scalable"} {
		t.Run(kind, func(t *testing.T) {
			ls := userLocks(t, kind, 2, nil)
			holder, waiter := ls[0], ls[1]
			for i := range handoffs + 3 { // the first 3 warm up connections and scripts
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a request's
				if err := holder.lock(ctx); err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				go func() { got <- waiter.lock(ctx) }()
				time.Sleep(30 * time.Millisecond) // the waiter is subscribed and blocked
				var f *os.File
				if i >= 3 {
					var err error
					f, err = os.Create(filepath.Join(dir, fmt.Sprintf("h23-%s-%d.trace", kind, i-3)))
					if err != nil {
						t.Fatal(err)
					}
					if err := trace.Start(f); err != nil {
						t.Fatal(err)
					}
				}
				g0, t0 := goroutinesCreated(), time.Now()
				trace.Log(ctx, "h23", "unlock")
				if err := holder.unlock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatal(err)
				}
				trace.Log(ctx, "h23", "granted")
				d, g := time.Since(t0), goroutinesCreated()-g0
				if f != nil {
					trace.Stop()
					_ = f.Close()
					t.Logf("%s handoff %d: %v, %d goroutines created, trace %s", kind, i-3, d, g, f.Name())
				}
				if err := waiter.unlock(ctx); err != nil {
					t.Fatal(err)
				}
				cancel()
			}
		})
	}
}

// BenchmarkCallShapes prices the ways a call on a cancellable context can
// be run, on one EVALSHA of `return 1` over a go-redis client with default
// options: "inline" on the caller's goroutine (what a context that cannot
// end gets); "goroutine" on a new goroutine per call, the caller waiting in
// a select on the result and ctx.Done() (what internal/core/call.go does
// today); "worker" on a long-lived goroutine that is handed the call over a
// channel (a warm stack and no goroutine creation, the same two hand-offs);
// "afterfunc" inline with a context.AfterFunc registered and stopped around
// it (what a cancellation hook that needs no hop would cost to arm).
func BenchmarkCallShapes(b *testing.B) {
	be := redistest.Real(b)
	rdb := redis.NewClient(&redis.Options{Addr: be.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	s := redis.NewScript("return 1")
	if err := s.Load(context.Background(), rdb).Err(); err != nil {
		b.Fatal(err)
	}
	call := func(ctx context.Context) (int64, error) { return s.EvalSha(ctx, rdb, nil).Int64() }
	type res struct {
		v   int64
		err error
	}
	shapes := map[string]func(ctx context.Context) (int64, error){
		"inline": call,
		"goroutine": func(ctx context.Context) (int64, error) {
			ch := make(chan res, 1)
			go func() {
				v, err := call(ctx)
				ch <- res{v, err}
			}()
			select {
			case r := <-ch:
				return r.v, r.err
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		},
		"afterfunc": func(ctx context.Context) (int64, error) {
			stop := context.AfterFunc(ctx, func() {})
			defer stop()
			return call(ctx)
		},
	}
	type job struct {
		ctx context.Context
		out chan res
	}
	jobs := make(chan job)
	defer close(jobs)
	go func() {
		for j := range jobs {
			v, err := call(j.ctx)
			j.out <- res{v, err}
		}
	}()
	out := make(chan res, 1) // one caller at a time here; a real pool needs one per call or a free list
	shapes["worker"] = func(ctx context.Context) (int64, error) {
		select {
		case jobs <- job{ctx, out}:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		select {
		case r := <-out:
			return r.v, r.err
		case <-ctx.Done():
			return 0, ctx.Err() // (a real pool must not reuse out after this)
		}
	}
	for _, name := range []string{"inline", "goroutine", "worker", "afterfunc"} {
		f := shapes[name]
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for range 50 {
				if _, err := f(ctx); err != nil {
					b.Fatal(err)
				}
			}
			g0 := goroutinesCreated()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := f(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
		})
	}
}

package fairlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/watchdog"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/reentrant"
)

// stubEngine grants every attempt and releases every unlock without Redis:
// what a Lock+Unlock cycle allocates is then the lock path's own.
type stubEngine struct{}

func (stubEngine) Try(context.Context, wire.Args, bool) (bool, int64, error) { return true, 0, nil }
func (stubEngine) GiveUp(context.Context, wire.Args) error                   { return nil }
func (stubEngine) Unlock(context.Context, wire.Args) (wire.UnlockResult, error) {
	return wire.Released, nil
}
func (stubEngine) ForceUnlock(context.Context, wire.Args) (bool, error) { return true, nil }
func (stubEngine) WakeChannel(string) string                            { return "stub" }

// stubCycle makes a client with opts and returns one Lock+Unlock cycle
// (explicit lease, one attempt) of a handle on the stub engine.
func stubCycle(t testing.TB, opts ...fairlock.Option) func() {
	rdb := obsRedisTB(t)
	opts = append(opts, fairlock.WithReplicaAck(-1)) // no INFO / WAIT
	c, err := fairlock.NewClient(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m, err := core.NewHold(core.Of(c), "stub", c.ID()+":1", stubEngine{}, watchdog.KindLock, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	return func() {
		if ok, err := m.Acquire(ctx, core.AcquireOpts{Lease: time.Minute}); !ok || err != nil {
			t.Fatalf("acquire: %v, %v", ok, err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func obsRedisTB(t testing.TB) *redis.Client {
	// The stub engine sends nothing to Redis; the client still needs one
	// (the hub connects at the first hold).
	mr := newMiniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// allocs is the fewest allocations per cycle over a few measurements
// (background goroutines of the client or of miniredis may add a stray
// one to a measurement).
func allocs(cycle func()) float64 {
	cycle() // warm up: the first hold starts the session's watch
	least := -1.0
	for range 5 {
		if n := testing.AllocsPerRun(200, cycle); least < 0 || n < least {
			least = n
		}
	}
	return least
}

// Without an observer a Lock+Unlock cycle allocates exactly what it
// allocates with WithObserver(nil) (the hooks build nothing), and an
// observer that does nothing adds a small fixed number (the events go by
// value through a buffered channel; the alert timers are the only
// allocations).
func TestObserverAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	none := allocs(stubCycle(t))
	nilObs := allocs(stubCycle(t, fairlock.WithObserver(nil), fairlock.WithLongHoldAlert(time.Hour), fairlock.WithLongWaitAlert(time.Hour)))
	nop := allocs(stubCycle(t, fairlock.WithObserver(fairlock.ObserverFunc(func(fairlock.Event) {}))))
	alerts := allocs(stubCycle(t, fairlock.WithObserver(fairlock.ObserverFunc(func(fairlock.Event) {})),
		fairlock.WithLongHoldAlert(time.Hour), fairlock.WithLongWaitAlert(time.Hour)))
	t.Logf("allocs per Lock+Unlock: no observer %v, WithObserver(nil) %v, no-op observer %v, no-op observer with alerts %v", none, nilObs, nop, alerts)
	if nilObs != none {
		t.Errorf("WithObserver(nil) allocates %v per cycle, no observer %v", nilObs, none)
	}
	if nop < none || nop > none+2 {
		t.Errorf("a no-op observer allocates %v per cycle, want %v to %v", nop, none, none+2)
	}
	if alerts > nop+3 {
		t.Errorf("alerts cost %v allocations per cycle over the observer's %v", alerts-nop, nop)
	}
}

// BenchmarkObserver reports a Lock+Unlock cycle's allocations on the stub
// engine (the lock path alone) and on miniredis (the real scripts), with
// and without an observer.
func BenchmarkObserver(b *testing.B) {
	nop := fairlock.WithObserver(fairlock.ObserverFunc(func(fairlock.Event) {}))
	for _, c := range []struct {
		name string
		opts []fairlock.Option
	}{
		{"none", nil},
		{"nil", []fairlock.Option{fairlock.WithObserver(nil)}},
		{"nop", []fairlock.Option{nop}},
		{"nop+alerts", []fairlock.Option{nop, fairlock.WithLongHoldAlert(time.Hour), fairlock.WithLongWaitAlert(time.Hour)}},
	} {
		b.Run("stub/"+c.name, func(b *testing.B) {
			cycle := stubCycle(b, c.opts...)
			cycle()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				cycle()
			}
		})
		b.Run("miniredis/"+c.name, func(b *testing.B) {
			rdb := obsRedisTB(b)
			cl, err := fairlock.NewClient(rdb, c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			m, _ := reentrant.New(cl, "bench")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func newMiniredis(t testing.TB) string {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mr.Close)
	return mr.Addr()
}

package reentrant_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// roundTrips counts the commands a go-redis client sends.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkLockUnlock is an uncontended Lock+Unlock cycle on a real
// redis-server: ns/op, allocs/op and Redis round trips per cycle.
func BenchmarkLockUnlock(b *testing.B) {
	be := redistest.Real(b)
	rdb := be.Client(b)
	var rt roundTrips
	rdb.AddHook(&rt)
	c := newClient(b, rdb)
	m := newMutex(b, c, redistest.Prefix(b)+"lock")
	ctx := context.Background()
	// load the scripts once, outside the measurement
	if err := m.Lock(ctx); err != nil {
		b.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	rt.n.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rt.n.Load())/float64(b.N), "roundtrips/op")
}

// BenchmarkFloorTwoEvalSha is the floor of a lock+unlock cycle: two
// sequential EVALSHA round trips of a trivial script, on the same client.
func BenchmarkFloorTwoEvalSha(b *testing.B) {
	be := redistest.Real(b)
	rdb := be.Client(b)
	s := redis.NewScript("return 1")
	ctx := context.Background()
	if err := s.Run(ctx, rdb, nil).Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_ = s.EvalSha(ctx, rdb, nil).Err()
		_ = s.EvalSha(ctx, rdb, nil).Err()
	}
}

// BenchmarkHandoff: two goroutines, each with its own handle on one client,
// pass the lock back and forth; each op is one handoff, from the start of
// the holder's Unlock to the return of the waiter's Lock (the waiter is
// already subscribed and asleep). ns/op includes the waiter's re-arming;
// handoff-µs is the median of the measured handoffs.
func BenchmarkHandoff(b *testing.B) {
	be := redistest.Real(b)
	c := newClient(b, be.Client(b))
	name := redistest.Prefix(b) + "lock"
	benchHandoff(b, newMutex(b, c, name), newMutex(b, c, name))
}

type locker interface {
	Lock(context.Context) error
	Unlock(context.Context) error
}

func benchHandoff(b *testing.B, x, y locker) {
	ctx := context.Background()
	hs := [2]locker{x, y}
	if err := hs[0].Lock(ctx); err != nil {
		b.Fatal(err)
	}
	holder := 0
	lat := make([]time.Duration, 0, 1024)
	got := make(chan time.Time, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := 1 - holder
		go func() {
			if err := hs[w].Lock(ctx); err != nil {
				b.Error(err)
			}
			got <- time.Now()
		}()
		time.Sleep(time.Millisecond) // the waiter tries, subscribes and sleeps
		t0 := time.Now()
		if err := hs[holder].Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-got).Sub(t0))
		holder = w
	}
	b.StopTimer()
	_ = hs[holder].Unlock(ctx)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "handoff-µs")
}

// BenchmarkHandoffFloor is BenchmarkHandoff's floor on the same server: an
// EVALSHA that publishes, its delivery to a subscriber reading on another
// connection, and that subscriber's EVALSHA.
func BenchmarkHandoffFloor(b *testing.B) {
	be := redistest.Real(b)
	rdb := be.Client(b)
	ctx := context.Background()
	ch := redistest.Prefix(b) + "floor"
	pub := redis.NewScript("redis.call('del', KEYS[1]); return redis.call('publish', KEYS[2], '0')")
	take := redis.NewScript("return redis.call('set', KEYS[1], ARGV[1], 'px', 30000)")
	ps := rdb.Subscribe(ctx, ch)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		b.Fatal(err)
	}
	_ = pub.Run(ctx, rdb, []string{ch + "k", ch}).Err()
	_ = take.Run(ctx, rdb, []string{ch + "k"}, "x").Err()
	got := make(chan time.Time, 1)
	go func() {
		for {
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				return
			}
			_ = take.EvalSha(ctx, rdb, []string{ch + "k"}, "x").Err()
			got <- time.Now()
		}
	}()
	<-got // the warm-up's message
	lat := make([]time.Duration, 0, 1024)
	b.ResetTimer()
	for b.Loop() {
		time.Sleep(time.Millisecond)
		t0 := time.Now()
		_ = pub.EvalSha(ctx, rdb, []string{ch + "k", ch}).Err()
		lat = append(lat, (<-got).Sub(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "handoff-µs")
}

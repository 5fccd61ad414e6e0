package reentrant_test

import (
	"context"
	"sync/atomic"
	"testing"

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
	redistest.BenchHandoff(b, newMutex(b, c, name), newMutex(b, c, name))
}

// BenchmarkHandoffFloor is BenchmarkHandoff's floor on the same server
// (redistest.BenchHandoffFloor).
func BenchmarkHandoffFloor(b *testing.B) { redistest.BenchHandoffFloor(b) }

package bench_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/semaphore"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// roundTrips counts the commands (and pipelines) a go-redis client sends.
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

// client returns a go-redis client on the real redis-server (started for
// this test binary, or $REDIS_ADDR) with a round-trip counter.
func client(b *testing.B) (*redis.Client, *roundTrips) {
	be := redistest.Real(b)
	rdb := be.Client(b)
	rt := &roundTrips{}
	rdb.AddHook(rt)
	return rdb, rt
}

// cycle runs lock+unlock b.N times after a warm-up and reports allocs/op and
// roundtrips/op.
func cycle(b *testing.B, rt *roundTrips, lock, unlock func(context.Context) error) {
	ctx := context.Background()
	for range 10 { // connections, script cache
		if err := lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var n0 int64
	if rt != nil {
		n0 = rt.n.Load()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if rt != nil {
		b.ReportMetric(float64(rt.n.Load()-n0)/float64(b.N), "roundtrips/op")
	}
}

func newFairlock(b *testing.B, rdb *redis.Client) *fairlock.Client {
	c, err := fairlock.NewClient(rdb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// BenchmarkReentrantLockUnlock is an uncontended Lock+Unlock of this
// project's reentrant lock.
func BenchmarkReentrantLockUnlock(b *testing.B) {
	rdb, rt := client(b)
	m, err := reentrant.New(newFairlock(b, rdb), redistest.Prefix(b)+"lock")
	if err != nil {
		b.Fatal(err)
	}
	cycle(b, rt, m.Lock, m.Unlock)
}

// BenchmarkFairLockUnlock is an uncontended Lock+Unlock of this project's
// fair lock.
func BenchmarkFairLockUnlock(b *testing.B) {
	rdb, rt := client(b)
	m, err := fair.New(newFairlock(b, rdb), redistest.Prefix(b)+"lock")
	if err != nil {
		b.Fatal(err)
	}
	cycle(b, rt, m.Lock, m.Unlock)
}

// BenchmarkFairScalableLockUnlock is the fair lock on its scalable engine.
func BenchmarkFairScalableLockUnlock(b *testing.B) {
	rdb, rt := client(b)
	m, err := fair.New(newFairlock(b, rdb), redistest.Prefix(b)+"lock", fair.WithEngine(fair.Scalable))
	if err != nil {
		b.Fatal(err)
	}
	cycle(b, rt, m.Lock, m.Unlock)
}

// BenchmarkFairSemaphoreAcquireRelease is an uncontended Acquire(1)+Release
// of this project's fair semaphore on a pool of 1 permit: the cycle issue 21
// compares with the fair lock's (BenchmarkFairLockUnlock,
// BenchmarkFairScalableLockUnlock).
func BenchmarkFairSemaphoreAcquireRelease(b *testing.B) {
	rdb, rt := client(b)
	s, err := semaphore.NewFair(newFairlock(b, rdb), redistest.Prefix(b)+"sem")
	if err != nil {
		b.Fatal(err)
	}
	if err := s.SetPermits(context.Background(), 1); err != nil {
		b.Fatal(err)
	}
	var p *semaphore.Permit
	cycle(b, rt, func(ctx context.Context) (err error) {
		p, err = s.Acquire(ctx, 1, 0)
		return err
	}, func(ctx context.Context) error { return p.Release(ctx) })
}

// BenchmarkFloorEvalSha is one round trip of a trivial script.
func BenchmarkFloorEvalSha(b *testing.B) {
	rdb, rt := client(b)
	s := redis.NewScript("return 1")
	eval := func(ctx context.Context) error { return s.EvalSha(ctx, rdb, nil).Err() }
	if err := s.Load(context.Background(), rdb).Err(); err != nil {
		b.Fatal(err)
	}
	cycle(b, rt, eval, func(context.Context) error { return nil })
}

// BenchmarkFloorTwoEvalSha is two sequential round trips of a trivial
// script: the least a lock+unlock cycle can cost.
func BenchmarkFloorTwoEvalSha(b *testing.B) {
	rdb, rt := client(b)
	s := redis.NewScript("return 1")
	eval := func(ctx context.Context) error { return s.EvalSha(ctx, rdb, nil).Err() }
	if err := s.Load(context.Background(), rdb).Err(); err != nil {
		b.Fatal(err)
	}
	cycle(b, rt, eval, eval)
}

// BenchmarkRedsyncLockUnlock is redsync with one go-redis pool, as its README.
func BenchmarkRedsyncLockUnlock(b *testing.B) {
	rdb, rt := client(b)
	m := redsync.New(rsgoredis.NewPool(rdb)).NewMutex(redistest.Prefix(b) + "lock")
	cycle(b, rt, m.LockContext, func(ctx context.Context) error {
		_, err := m.UnlockContext(ctx)
		return err
	})
}

// BenchmarkRedislockLockUnlock is bsm/redislock's Obtain+Release.
func BenchmarkRedislockLockUnlock(b *testing.B) {
	rdb, rt := client(b)
	l := redislock.New(rdb)
	key := redistest.Prefix(b) + "lock"
	var held *redislock.Lock
	cycle(b, rt, func(ctx context.Context) (err error) {
		held, err = l.Obtain(ctx, key, 8*time.Second, nil)
		return err
	}, func(ctx context.Context) error { return held.Release(ctx) })
}

// BenchmarkRueidislockLockUnlock is rueidislock configured for one Redis as
// its README says (KeyMajority 1, NoLoopTracking).
func BenchmarkRueidislockLockUnlock(b *testing.B) {
	be := redistest.Real(b)
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{be.Addr}},
		KeyPrefix:      redistest.Prefix(b) + "rueidislock",
		KeyMajority:    1,
		NoLoopTracking: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	var cancel context.CancelFunc
	cycle(b, nil, func(ctx context.Context) (err error) {
		_, cancel, err = l.WithContext(ctx, "lock")
		return err
	}, func(context.Context) error { cancel(); return nil })
}

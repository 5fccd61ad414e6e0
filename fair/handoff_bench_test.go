package fair_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// BenchmarkHandoff: two goroutines, each with its own handle on one client,
// pass the fair lock back and forth, on each engine; each op is one
// handoff, from the start of the holder's Unlock to the return of the
// waiter's Lock (the waiter is queued, subscribed and asleep). handoff-µs is
// the median; compare it with BenchmarkHandoffFloor's from the same run
// (the reentrant package has the same pair).
func BenchmarkHandoff(b *testing.B) {
	for _, e := range []struct {
		name string
		opts []fair.Option
	}{{"redisson", nil}, {"scalable", []fair.Option{fair.WithEngine(fair.Scalable)}}} {
		b.Run(e.name, func(b *testing.B) {
			be := redistest.Real(b)
			c := newClient(b, be.Client(b))
			name := redistest.Prefix(b) + "lock"
			x, y := newMutex(b, c, name, e.opts...), newMutex(b, c, name, e.opts...)
			ctx := context.Background()
			hs := [2]*fair.Mutex{x, y}
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
				time.Sleep(time.Millisecond) // the waiter joins, subscribes and sleeps
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
		})
	}
}

// BenchmarkHandoffFloor is BenchmarkHandoff's floor on the same server (as
// reentrant's): an EVALSHA that publishes, its delivery to a subscriber
// reading on another connection, and that subscriber's EVALSHA.
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

package redistest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Locker is what BenchHandoff hands the lock between.
type Locker interface {
	Lock(context.Context) error
	Unlock(context.Context) error
}

// BenchHandoff measures the handoff between two handles of one lock: from
// just before the holder's Unlock to just after the waiter's Lock returns
// (the waiter queued a millisecond before); it reports the median as
// handoff-µs.
func BenchHandoff(b *testing.B, x, y Locker) {
	ctx := context.Background()
	hs := [2]Locker{x, y}
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

// BenchHandoffFloor is BenchHandoff's floor on the same server: an EVALSHA
// that publishes, its delivery to a subscriber reading on another
// connection, and that subscriber's EVALSHA; the median as handoff-µs.
func BenchHandoffFloor(b *testing.B) {
	be := Real(b)
	rdb := be.Client(b)
	ctx := context.Background()
	ch := Prefix(b) + "floor"
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

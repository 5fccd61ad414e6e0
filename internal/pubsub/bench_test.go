package pubsub_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/pubsub"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// BenchmarkDelivery measures one step of a handoff (issue 14): from a
// PUBLISH sent to the wake-up arriving on a waiter's channel through the
// hub ("hub"), against the same message read straight off a go-redis
// PubSub by the goroutine that waits ("direct"). The difference is the
// hub's dispatch: its reader goroutine hands the wake-up to the waiter's.
func BenchmarkDelivery(b *testing.B) {
	be := redistest.Real(b)
	rdb := be.Client(b)
	ctx := context.Background()
	ch := redistest.Prefix(b) + "ch"
	report := func(b *testing.B, lat []time.Duration) {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "delivery-µs")
	}
	b.Run("hub", func(b *testing.B) {
		h := pubsub.New(rdb, 30*time.Second)
		defer h.Close()
		w, err := h.Subscribe(ctx, ch)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		lat := make([]time.Duration, 0, 1024)
		for b.Loop() {
			time.Sleep(200 * time.Microsecond)
			t0 := time.Now()
			if err := rdb.Publish(ctx, ch, "0").Err(); err != nil {
				b.Fatal(err)
			}
			<-w.C()
			lat = append(lat, time.Since(t0))
		}
		report(b, lat)
	})
	b.Run("direct", func(b *testing.B) {
		ps := rdb.Subscribe(ctx, ch)
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, 1024)
		for b.Loop() {
			time.Sleep(200 * time.Microsecond)
			t0 := time.Now()
			if err := rdb.Publish(ctx, ch, "0").Err(); err != nil {
				b.Fatal(err)
			}
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		report(b, lat)
	})
}

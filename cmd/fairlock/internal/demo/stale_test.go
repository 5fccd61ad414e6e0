package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/fence"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// The stale-writer mode: A's goroutine stops while it holds the lock, past
// its lease; B books the seat with a newer token; A's late write is
// rejected by the fence and the seat keeps B's booking.
func TestStaleWriterRejected(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := RunStale(ctx, StaleConfig{Redis: &redis.Options{Addr: b.Addr}, Prefix: redistest.Prefix(t), Lease: time.Second, Mini: b.Mini})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		ReportStale(&out, r)
		t.Log("\n" + out.String())
		a, okA := r.Step("A")
		bb, okB := r.Step("B")
		if !okA || !okB {
			t.Fatalf("steps %+v", r.Steps)
		}
		if !(bb.Token > a.Token) {
			t.Errorf("B's token %d is not newer than A's %d", bb.Token, a.Token)
		}
		if !bb.Result.Accepted {
			t.Errorf("B's fresh write was rejected: %v", bb.Result)
		}
		if a.Result.Accepted || a.Result.Last != bb.Token {
			t.Errorf("A's stale write: %v, want rejected naming B's token %d", a.Result, bb.Token)
		}
		if a.LeaseEnd == 0 || a.Wrote < a.LeaseEnd || a.Wrote < bb.Wrote {
			t.Errorf("A wrote at %v: not after its lease ended (%v) and B's write (%v)", a.Wrote, a.LeaseEnd, bb.Wrote)
		}
		if r.FinalHolder != "B" || r.FinalToken != bb.Token {
			t.Errorf("the seat is held by %q with token %d, want B with %d", r.FinalHolder, r.FinalToken, bb.Token)
		}
		if !strings.Contains(out.String(), "REJECTED") {
			t.Errorf("the table does not show the rejection:\n%s", out.String())
		}
	})
}

// Without the fence (a write that ignores the token), the same run lets A
// replace B's booking: what TestStaleWriterRejected's checks catch.
func TestStaleWriterUnfencedOverwrites(t *testing.T) {
	b := redistest.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	unfenced := func(ctx context.Context, rdb *redis.Client, seat, who string, token int64) (fence.Result, error) {
		return fence.Result{Accepted: true, Last: token}, rdb.HSet(ctx, seat, "holder", who, "token", token).Err()
	}
	r, err := RunStale(ctx, StaleConfig{Redis: &redis.Options{Addr: b.Addr}, Prefix: redistest.Prefix(t), Lease: time.Second, Write: unfenced})
	if err != nil {
		t.Fatal(err)
	}
	if r.FinalHolder != "A" {
		t.Fatalf("without the fence the seat ends with %q; expected A's stale write to win", r.FinalHolder)
	}
	t.Logf("unfenced: the seat ends booked by %s with token %d (B had booked it with a newer token)", r.FinalHolder, r.FinalToken)
}

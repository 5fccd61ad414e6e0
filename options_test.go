package fairlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/reentrant"
)

// Each duration option says one thing: 0 keeps the default, a value the
// option does not define is refused by NewClient with ErrInvalidValue.
func TestOptionValues(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	ctx := context.Background()

	// WithLease(0) keeps the 30 s watchdog lease
	c, err := fairlock.NewClient(rdb, fairlock.WithLease(0))
	if err != nil {
		t.Fatalf("WithLease(0): %v", err)
	}
	m, _ := reentrant.New(c, "opt")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if left, _ := m.RemainingLease(ctx); left < 20*time.Second || left > 30*time.Second {
		t.Errorf("WithLease(0): lease %v, want the default 30 s", left)
	}
	_ = m.Unlock(ctx)
	c.Close()

	for _, tc := range []struct {
		what string
		opt  fairlock.Option
		ok   bool
	}{
		{"WithLease(0)", fairlock.WithLease(0), true},
		{"WithLease(3ms)", fairlock.WithLease(3 * time.Millisecond), true},
		{"WithLease(2ms)", fairlock.WithLease(2 * time.Millisecond), false},
		{"WithLease(-1s)", fairlock.WithLease(-time.Second), false},
		{"WithHeadGrace(0)", fairlock.WithHeadGrace(0), true},
		{"WithHeadGrace(-1)", fairlock.WithHeadGrace(-1), true},
		{"WithHeadGrace(1ms)", fairlock.WithHeadGrace(time.Millisecond), true},
		{"WithHeadGrace(500us)", fairlock.WithHeadGrace(500 * time.Microsecond), false},
		{"WithWaitSlot(0)", fairlock.WithWaitSlot(0), true},
		{"WithWaitSlot(-1s)", fairlock.WithWaitSlot(-time.Second), false},
		{"WithLatchTTL(-1s)", fairlock.WithLatchTTL(-time.Second), false},
		{"WithCleanupTimeout(-1s)", fairlock.WithCleanupTimeout(-time.Second), false},
		{"WithReplicaAck(-1)", fairlock.WithReplicaAck(-1), true},
	} {
		c, err := fairlock.NewClient(rdb, tc.opt)
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.what, err)
		}
		if !tc.ok && !errors.Is(err, fairlock.ErrInvalidValue) {
			t.Errorf("%s: %v, want ErrInvalidValue", tc.what, err)
		}
		if c != nil {
			c.Close()
		}
	}
}

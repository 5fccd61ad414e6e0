package watchdog

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// holder records what the watchdog tells it; it is valid for an hour unless
// told otherwise.
type holder struct {
	lost    atomic.Int64
	renewed atomic.Int64
	mu      sync.Mutex
	valid   time.Time
}

func newHolder() *holder { return &holder{valid: time.Now().Add(time.Hour)} }

func (h *holder) Lost(error)        { h.lost.Add(1) }
func (h *holder) Renewed(time.Time) { h.renewed.Add(1) }
func (h *holder) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.valid
}

func all(st Status, n int) []Status {
	out := make([]Status, n)
	for i := range out {
		out[i] = st
	}
	return out
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Many slots, each renewal call taking a few milliseconds: none is reported
// lost, and every one is renewed.
func TestManySlotsNoFalseLoss(t *testing.T) {
	renew := func(ctx context.Context, names, owners []string) ([]Status, error) {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return all(Renewed, len(names)), nil
	}
	slot := func(key string) int { n, _ := strconv.Atoi(key); return n }
	w := New(renew, slot, 300*time.Millisecond, 100)
	defer w.Close()
	var hs []*holder
	for i := 0; i < 200; i++ {
		h := newHolder()
		hs = append(hs, h)
		w.Add(strconv.Itoa(i), "o", h)
	}
	eventually(t, "every lock renewed twice", func() bool {
		for _, h := range hs {
			if h.renewed.Load() < 2 {
				return false
			}
		}
		return true
	})
	for i, h := range hs {
		if h.lost.Load() != 0 {
			t.Fatalf("lock %d reported lost", i)
		}
	}
}

// A lock the renewal reports as not held (or broken) is reported lost and
// unregistered; the others in its batch are renewed.
func TestGoneIsLostAlone(t *testing.T) {
	renew := func(ctx context.Context, names, owners []string) ([]Status, error) {
		st := all(Renewed, len(names))
		for i, n := range names {
			switch n {
			case "gone":
				st[i] = Gone
			case "broken":
				st[i] = Broken
			}
		}
		return st, nil
	}
	w := New(renew, nil, 30*time.Millisecond, 100)
	defer w.Close()
	gone, broken, fine := newHolder(), newHolder(), newHolder()
	w.Add("gone", "o", gone)
	w.Add("broken", "o", broken)
	w.Add("fine", "o", fine)
	eventually(t, "both bad locks reported lost", func() bool { return gone.lost.Load() == 1 && broken.lost.Load() == 1 })
	eventually(t, "the good lock renewed after", func() bool { return fine.renewed.Load() > 3 })
	if fine.lost.Load() != 0 || w.Len() != 1 {
		t.Fatalf("fine lost %d, still registered %d", fine.lost.Load(), w.Len())
	}
}

// A call that does not return (a stalled node) delays only its own locks:
// locks in other slots keep being renewed, and the stuck lock gets no second
// call while the first is in flight.
func TestStuckSlotDelaysOnlyItself(t *testing.T) {
	release := make(chan struct{})
	var stuckCalls atomic.Int64
	renew := func(ctx context.Context, names, owners []string) ([]Status, error) {
		if names[0] == "0" {
			stuckCalls.Add(1)
			<-release // ignores ctx: a client whose reads never time out
			return nil, context.DeadlineExceeded
		}
		return all(Renewed, len(names)), nil
	}
	slot := func(key string) int { n, _ := strconv.Atoi(key); return n }
	w := New(renew, slot, 90*time.Millisecond, 100)
	stuck, healthy := newHolder(), newHolder()
	w.Add("0", "o", stuck)
	w.Add("1", "o", healthy)
	eventually(t, "the healthy lock renewed ten times", func() bool { return healthy.renewed.Load() >= 10 })
	if n := stuckCalls.Load(); n != 1 {
		t.Errorf("%d calls for the stuck lock; want 1 while it is in flight", n)
	}
	if stuck.lost.Load() != 0 || stuck.renewed.Load() != 0 {
		t.Errorf("the stuck lock was reported: lost %d renewed %d", stuck.lost.Load(), stuck.renewed.Load())
	}
	close(release)
	w.Close()
}

// Each call is bounded by the earliest validity among its locks.
func TestCallBoundedByValidity(t *testing.T) {
	var left atomic.Int64
	renew := func(ctx context.Context, names, owners []string) ([]Status, error) {
		d, _ := ctx.Deadline()
		left.Store(int64(time.Until(d)))
		return all(Renewed, len(names)), nil
	}
	w := New(renew, nil, 3*time.Second, 100)
	defer w.Close()
	h := newHolder()
	h.valid = time.Now().Add(1500 * time.Millisecond)
	w.Add("a", "o", h)
	eventually(t, "one renewal", func() bool { return h.renewed.Load() >= 1 })
	if d := time.Duration(left.Load()); d > 600*time.Millisecond {
		t.Fatalf("the call had %v left; the lock was valid for at most ~500ms more", d)
	}
}

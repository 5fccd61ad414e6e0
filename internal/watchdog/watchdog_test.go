package watchdog

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

type countLost struct{ n *atomic.Int64 }

func (c countLost) Lost(error) { c.n.Add(1) }

// Many slots, each renewal call taking a few milliseconds: every call must
// get its own deadline, or the calls late in a tick time out and report live
// locks lost.
func TestManySlotsNoFalseLoss(t *testing.T) {
	renew := func(ctx context.Context, names, owners []string) ([]bool, error) {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		ok := make([]bool, len(names))
		for i := range ok {
			ok[i] = true
		}
		return ok, nil
	}
	slot := func(key string) int { n, _ := strconv.Atoi(key); return n }
	w := New(renew, slot, 300*time.Millisecond, 100)
	defer w.Close()
	var lost atomic.Int64
	for i := 0; i < 200; i++ {
		w.Add(strconv.Itoa(i), "o", countLost{&lost})
	}
	time.Sleep(1500 * time.Millisecond) // several ticks
	if n := lost.Load(); n != 0 {
		t.Fatalf("%d of 200 live locks reported lost", n)
	}
}

// A lock the renewal reports as not held is reported lost and unregistered.
func TestGoneIsLost(t *testing.T) {
	renew := func(ctx context.Context, names, owners []string) ([]bool, error) {
		return make([]bool, len(names)), nil
	}
	w := New(renew, nil, 30*time.Millisecond, 100)
	defer w.Close()
	var lost atomic.Int64
	w.Add("a", "o", countLost{&lost})
	deadline := time.Now().Add(5 * time.Second)
	for lost.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if lost.Load() != 1 || w.Len() != 0 {
		t.Fatalf("lost %d, still registered %d", lost.Load(), w.Len())
	}
}

package propertytests

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// H1: a queued waiter whose deadline was deleted by hand (or evicted) is a
// "ghost". Redisson stops pruning at a ghost head, which then blocks the lock
// for ever; our scripts prune it like a dead head. The machines never make a
// ghost (the invariants forbid it), so this test makes one on both the model
// and Redis, in a random state of the fair machine, and requires that they
// still agree step by step and that the ghost is gone once it reaches the
// head of the queue and any script runs.
func TestGhostWaiterIsPruned(t *testing.T) {
	for _, be := range []struct {
		name string
		b    func(*testing.T) backend
	}{
		{"miniredis", func(*testing.T) backend { return miniBackend{} }},
		{"redis-server", func(t *testing.T) backend { return newRealBackend(t) }},
	} {
		t.Run(be.name, func(t *testing.T) {
			b := be.b(t)
			rapid.Check(t, ghostMachine(b, wire.Default()))
		})
	}
}

// Redisson's prune, which stops at a head without a deadline, fails it.
func TestGhostWaiterBlocksRedissonsPrune(t *testing.T) {
	setFlag(t, "rapid.shrinktime", "200ms")
	setFlag(t, "rapid.nofailfile", "true")
	v := brokenVariant{
		name: "Redisson's prune (stops at a ghost head)", file: wire.FileFairUnlock,
		old: "if deadline and (grace > 0 or deadline > now) and",
		new: "if (not deadline or grace > 0 or deadline > now) and",
	}
	r := &recorder{name: t.Name()}
	func() {
		defer func() {
			if p := recover(); p != nil && p != errFailNow {
				panic(p)
			}
		}()
		rapid.Check(r, ghostMachine(miniBackend{}, v.scripts(t)))
	}()
	if !r.Failed() {
		t.Fatal("the ghost test did not catch Redisson's prune")
	}
	t.Logf("caught: %s", r.first())
}

func ghostMachine(b backend, scripts *wire.Scripts) func(*rapid.T) {
	return func(t *rapid.T) {
		h := newHarness(t, b, scripts, new(counts))
		h.fair = true
		// Some waiters behind a holder.
		h.fairTryLockWait(t, owners[0])
		for _, o := range owners[1:4] {
			h.fairTryLockWait(t, o)
		}
		if len(h.m.Queue) == 0 {
			t.Skip("nobody queued")
		}
		ghost := rapid.SampledFrom(h.m.Queue).Draw(t, "ghost")
		delete(h.m.Deadlines, ghost)
		h.noErr(t, "zrem", h.rdb.ZRem(h.ctx, h.keys.Timeouts, ghost).Err())
		got, err := dump(h.ctx, h.rdb, h.m.Names(), h.server)
		h.noErr(t, "dump", err)
		h.got = got

		// Release and let the queue drain: each head takes the lock
		// and releases it. The ghost never takes it.
		for range len(owners) + 1 {
			if hd := h.m.Holder(); hd != "" {
				h.fairUnlock(t, hd)
				continue
			}
			if len(h.m.Queue) == 0 {
				break
			}
			h.fairTryLockWait(t, h.m.Queue[0])
		}
		if slices.Contains(h.m.Queue, ghost) {
			t.Fatalf("the ghost %s is still queued: %v", ghost, h.m)
		}
		if h.m.Holder() == ghost {
			t.Fatalf("the ghost %s took the lock", ghost)
		}
		h.check(t)
	}
}

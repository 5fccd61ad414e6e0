package semaphore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// The fair semaphore through its Go API, on both backends. The promises
// checked are the statements, not the scripts' decisions: grants
// follow arrival order; a head that does not fit blocks later, smaller
// requests (semaphore.Weighted's rule); permits are holds (lease, Close,
// ctx); a crashed holder's permits come back when its lease ends. Waits are
// generous; nothing asserts that something happened within a tight time.

func newFair(t *testing.T, b *redistest.Backend, pool int, opts ...fairlock.Option) (*semaphore.Fair, *fairlock.Client) {
	t.Helper()
	c, err := fairlock.NewClient(b.Client(t), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	f, err := semaphore.NewFair(c, redistest.Prefix(t)+"fair")
	require.NoError(t, err)
	f = setPool(t, f, pool)
	return f, c
}

// sameFair is another client's handle on f's semaphore.
func sameFair(t *testing.T, b *redistest.Backend, f *semaphore.Fair) *semaphore.Fair {
	t.Helper()
	c, err := fairlock.NewClient(b.Client(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	g, err := semaphore.NewFair(c, f.Name())
	require.NoError(t, err)
	return g
}

func setPool(t *testing.T, f *semaphore.Fair, pool int) *semaphore.Fair {
	t.Helper()
	if pool >= 0 {
		require.NoError(t, f.SetPermits(context.Background(), pool))
	}
	return f
}

type acquired struct {
	p   *semaphore.Permit
	err error
}

// eventually polls cond for up to 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func state(t *testing.T, f *semaphore.Fair) semaphore.State {
	t.Helper()
	st, err := f.State(context.Background())
	require.NoError(t, err)
	return st
}

// enqueue starts an Acquire of n permits and returns once it is queued
// (the queue grew by one), so that arrivals are ordered.
func enqueue(t *testing.T, ctx context.Context, f *semaphore.Fair, n int) <-chan acquired {
	t.Helper()
	before := state(t, f).Queued
	ch := make(chan acquired, 1)
	go func() {
		p, err := f.Acquire(ctx, n, 0)
		ch <- acquired{p, err}
	}()
	eventually(t, "the waiter is queued", func() bool { return state(t, f).Queued == before+1 })
	return ch
}

func got(t *testing.T, ch <-chan acquired) *semaphore.Permit {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		require.NotNil(t, r.p)
		return r.p
	case <-time.After(30 * time.Second):
		t.Fatal("the acquisition was not granted")
		return nil
	}
}

func pending(ch <-chan acquired) bool {
	select {
	case r := <-ch:
		_ = r
		return false
	default:
		return true
	}
}

func TestFairGrantsInArrivalOrderWithWeights(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _ := newFair(t, b, 3)
		all, err := f.Acquire(ctx, 3, 0)
		require.NoError(t, err)
		assert.Equal(t, 3, all.Count())
		assert.Nil(t, all.IDs())
		a := enqueue(t, ctx, f, 2)
		bb := enqueue(t, ctx, f, 1)
		c := enqueue(t, ctx, f, 1)
		d := enqueue(t, ctx, f, 3)
		e := enqueue(t, ctx, f, 1)
		require.NoError(t, all.Release(ctx))
		// 3 free: a (2) and b (1) fit, in order; c must wait for them
		pa, pb := got(t, a), got(t, bb)
		assert.Less(t, all.Token(), pa.Token())
		assert.Less(t, pa.Token(), pb.Token())
		eventually(t, "c stays queued", func() bool { return state(t, f).Queued == 3 })
		assert.True(t, pending(c))
		require.NoError(t, pb.Release(ctx))
		pc := got(t, c)
		assert.Less(t, pb.Token(), pc.Token())
		// d wants 3 with 1 free: it blocks e (1), which would fit
		require.NoError(t, pa.Release(ctx))
		st := state(t, f)
		assert.Equal(t, 2, st.Available)
		assert.Equal(t, 2, st.Queued)
		assert.True(t, pending(d))
		assert.True(t, pending(e), "a smaller later request passed the blocked head")
		require.NoError(t, pc.Release(ctx))
		pd := got(t, d)
		assert.True(t, pending(e))
		require.NoError(t, pd.Release(ctx))
		pe := got(t, e)
		assert.Less(t, pd.Token(), pe.Token())
		require.NoError(t, pe.Release(ctx))
		st = state(t, f)
		assert.Equal(t, semaphore.State{Pool: 3, Available: 3}, st)
	})
}

func TestFairTryAcquireDoesNotBarge(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _ := newFair(t, b, 2)
		p, err := f.TryAcquire(ctx, 1, 0, 0)
		require.NoError(t, err)
		require.NotNil(t, p)
		head := enqueue(t, ctx, f, 2) // needs 2, 1 free: blocks
		q, err := f.TryAcquire(ctx, 1, 0, 0)
		require.NoError(t, err)
		assert.Nil(t, q, "a one-shot try took the free permit past the queued head")
		q, err = f.TryAcquire(ctx, 1, 200*time.Millisecond, 0)
		require.NoError(t, err)
		assert.Nil(t, q, "a timed try took the free permit past the queued head")
		assert.Equal(t, 1, state(t, f).Queued, "the timed try left the queue when its wait ran out")
		require.NoError(t, p.Release(ctx))
		require.NoError(t, got(t, head).Release(ctx))
	})
}

func TestFairRefusals(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		unset, _ := newFair(t, b, -1)
		_, err := unset.Acquire(ctx, 1, 0)
		assert.ErrorIs(t, err, semaphore.ErrNotSet)
		_, err = unset.AddPermits(ctx, 1)
		assert.ErrorIs(t, err, semaphore.ErrNotSet)

		f, _ := newFair(t, b, 2)
		_, err = f.Acquire(ctx, 3, 0)
		assert.ErrorIs(t, err, semaphore.ErrTooMany)
		_, err = f.AddPermits(ctx, -3)
		assert.ErrorIs(t, err, semaphore.ErrNegative)
		for _, bad := range []func() error{
			func() error { _, err := f.Acquire(ctx, 0, 0); return err },
			func() error { _, err := f.Acquire(ctx, 1, -time.Second); return err },
			func() error { _, err := f.Acquire(ctx, 1, time.Millisecond); return err }, // under MinLease
			func() error { _, err := f.TryAcquire(ctx, 1, -time.Second, 0); return err },
			func() error { _, err := f.Acquire(nil, 1, 0); return err }, //nolint:staticcheck // a nil ctx is refused
			func() error { return f.SetPermits(ctx, -1) },
			func() error { _, err := (&semaphore.Fair{}).Acquire(ctx, 1, 0); return err },
			func() error { _, err := (*semaphore.Fair)(nil).State(ctx); return err },
		} {
			assert.ErrorIs(t, bad(), fairlock.ErrInvalidValue)
		}
		assert.Equal(t, semaphore.State{Pool: 2, Available: 2}, state(t, f), "bad input changed nothing")
		_, err = semaphore.NewFair(nil, "x")
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	})
}

func TestFairPermitsAreHolds(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		t.Run("CtxEndLeavesTheQueue", func(t *testing.T) {
			f, _ := newFair(t, b, 1)
			p, err := f.Acquire(ctx, 1, 0)
			require.NoError(t, err)
			wctx, cancel := context.WithCancel(ctx)
			w := enqueue(t, wctx, f, 1)
			cancel()
			select {
			case r := <-w:
				assert.ErrorIs(t, r.err, fairlock.ErrCanceled)
				assert.ErrorIs(t, r.err, context.Canceled)
				assert.Nil(t, r.p)
			case <-time.After(30 * time.Second):
				t.Fatal("the canceled wait did not return")
			}
			eventually(t, "the canceled waiter left the queue", func() bool { return state(t, f).Queued == 0 })
			require.NoError(t, p.Release(ctx))
			assert.Equal(t, semaphore.State{Pool: 1, Available: 1}, state(t, f))
		})
		t.Run("CloseEndsPermitsAndGivesThemBack", func(t *testing.T) {
			f, c := newFair(t, b, 3)
			p, err := f.Acquire(ctx, 2, 0)
			require.NoError(t, err)
			other := sameFair(t, b, f)     // another client on the same name
			w := enqueue(t, ctx, other, 2) // 1 free: waits
			require.NoError(t, c.Close())
			assert.True(t, closed(p.Done()))
			assert.ErrorIs(t, p.Err(), fairlock.ErrClosed)
			_, err = f.Acquire(ctx, 1, 0)
			assert.ErrorIs(t, err, fairlock.ErrClosed)
			q := got(t, w) // Close gave the 2 permits back
			require.NoError(t, q.Release(ctx))
			assert.Equal(t, semaphore.State{Pool: 3, Available: 3}, state(t, other))
		})
		t.Run("CrashedHolderPermitsComeBackAtLeaseEnd", func(t *testing.T) {
			f, _ := newFair(t, b, 2)
			// the "crashed" holder: an explicit lease that nobody renews
			// or releases
			p, err := f.Acquire(ctx, 2, 300*time.Millisecond)
			require.NoError(t, err)
			w := enqueue(t, ctx, f, 2)
			// the lease ends on the server's clock (TIME; miniredis's is
			// the real one): the waiter's sleep is bounded by it, and its
			// next attempt reclaims the permits
			q := got(t, w)
			assert.ErrorIs(t, p.Err(), fairlock.ErrLost)
			require.NoError(t, q.Release(ctx))
		})
		t.Run("WatchdogKeepsAPermitPastTheLease", func(t *testing.T) {
			f, _ := newFair(t, b, 1, fairlock.WithLease(1500*time.Millisecond))
			p, err := f.Acquire(ctx, 1, 0)
			require.NoError(t, err)
			time.Sleep(4 * time.Second) // more than two leases
			require.NoError(t, p.Err(), "the watchdog kept the permit")
			assert.Equal(t, 1, state(t, f).Holders)
			q, err := f.TryAcquire(ctx, 1, 0, 0)
			require.NoError(t, err)
			assert.Nil(t, q)
			require.NoError(t, p.Release(ctx))
		})
	})
}

func TestFairTokensIncrease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _ := newFair(t, b, 3)
		g := sameFair(t, b, f) // a second client
		var last int64
		for i := 0; i < 6; i++ {
			s := f
			if i%2 == 1 {
				s = g
			}
			p, err := s.Acquire(ctx, 1+i%3, 0)
			require.NoError(t, err)
			assert.Greater(t, p.Token(), last)
			last = p.Token()
			require.NoError(t, p.Release(ctx))
		}
	})
}

// TestFairChecksCatchABrokenQueue shows that the API-level statements
// above fail on a semaphore whose acquisition lets a request that fits pass
// a blocked head (a broken variant of sem_fair_acquire.lua).
func TestFairChecksCatchABrokenQueue(t *testing.T) {
	const good = "        if head and head ~= owner then\n            return false, false"
	broken := wire.EditSemFair(func(file, src string) string {
		if file == wire.FileSemFairAcquire {
			require.Contains(t, src, good)
			return strings.Replace(src, good, "        if head and head ~= owner and res_free(head) then\n            return false, false", 1)
		}
		return src
	})
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _ := newFair(t, b, 2, core.WithSemFairScripts(broken))
		p, err := f.Acquire(ctx, 1, 0)
		require.NoError(t, err)
		head := enqueue(t, ctx, f, 2)
		q, err := f.TryAcquire(ctx, 1, 0, 0)
		require.NoError(t, err)
		assert.NotNil(t, q, "the broken script kept the head's turn: TestFairTryAcquireDoesNotBarge could not catch it")
		require.NoError(t, p.Release(ctx))
		if q != nil {
			require.NoError(t, q.Release(ctx))
		}
		require.NoError(t, got(t, head).Release(ctx))
	})
}

// Check (c) of issue 21: a live waiter behind a dead head is granted within
// the fair lock's bound once a permit is free (two head graces for the dead
// head, design.md "Fair-lock liveness"), not after the dead waiter's 5
// minute slot nor the holder's 60 s watchdog lease that bounds a sleep
// when no wake-up comes.
func TestFairDeadHeadCostsTwoGraces(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.RealClock(t, b) // the graces are key TTLs
		ctx := context.Background()
		const grace = time.Second
		f, _ := newFair(t, b, 1, fairlock.WithHeadGrace(grace), fairlock.WithLease(60*time.Second))
		holder, err := f.Acquire(ctx, 1, 0)
		require.NoError(t, err)
		// the dead waiter: joins the queue and never calls again
		k := wire.SemFairKeysFor(f.Name())
		r, err := wire.SemFairDefault().Acquire(ctx, b.Client(t), k, wire.SemArgs{Owner: "dead-client:1", Permits: 1,
			LeaseMs: 60000, WaitMs: (5 * time.Minute).Milliseconds(), GraceMs: grace.Milliseconds(), Queue: true,
			AcquireID: "dead-request", LatchMs: 10000})
		require.NoError(t, err)
		require.False(t, r.Granted)
		w := enqueue(t, ctx, f, 1)
		released := time.Now()
		require.NoError(t, holder.Release(ctx))
		p := got(t, w)
		took := time.Since(released)
		t.Logf("granted %v after the release (grace %v)", took, grace)
		assert.Less(t, took, 3*grace+3*time.Second, "the live waiter waited past the dead head's two graces")
		assert.Equal(t, 0, state(t, f).Queued, "the dead head was pruned")
		require.NoError(t, p.Release(ctx))
	})
}

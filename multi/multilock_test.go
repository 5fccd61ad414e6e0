package multi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/multi"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/rwlock"
)

func TestNewRefusesBadInput(t *testing.T) {
	b := redistest.Mini(t)
	c := newClient(t, b.Client(t))
	c2 := newClient(t, b.Client(t))
	n := names(t, 3)
	a, err := reentrant.New(c, n[0])
	require.NoError(t, err)
	a2, err := fenced.New(c2, n[0])
	require.NoError(t, err)
	bb, err := reentrant.New(c, n[1])
	require.NoError(t, err)
	rw, err := rwlock.New(c, n[2])
	require.NoError(t, err)
	rwOther, err := rwlock.New(c, n[2])
	require.NoError(t, err)
	var nilMutex *reentrant.Mutex

	for _, tc := range []struct {
		name    string
		members []multi.Member
	}{
		{"no members", nil},
		{"nil member", []multi.Member{a, nil}},
		{"typed nil member", []multi.Member{a, nilMutex}},
		{"zero handle", []multi.Member{a, &reentrant.Mutex{}}},
		{"one handle twice", []multi.Member{a, bb, a}},
		{"two handles on one name", []multi.Member{a, bb, a2}},
		{"halves of two rwlocks on one name", []multi.Member{rw.WriteLock(), rwOther.ReadLock()}},
		{"the read half twice", []multi.Member{rw.ReadLock(), rw.ReadLock()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := multi.New(tc.members...)
			require.ErrorIs(t, err, fairlock.ErrInvalidValue)
			require.Nil(t, l)
			t.Log(err)
		})
	}

	// Accepted: members of different Clients, and the two halves of one
	// rwlock (taken write half first whatever the caller's order).
	l, err := multi.New(rw.ReadLock(), bb, a2, rw.WriteLock())
	require.NoError(t, err)
	ms := l.Members()
	iw := slices.Index(ms, multi.Member(rw.WriteLock()))
	ir := slices.Index(ms, multi.Member(rw.ReadLock()))
	require.Equal(t, iw+1, ir, "the write half is taken just before the read half")

	ctx := testCtx(t)
	_, err = l.TryLockFor(ctx, -time.Second, 0)
	require.ErrorIs(t, err, fairlock.ErrInvalidValue)
	require.ErrorIs(t, l.LockWithLease(ctx, -time.Second), fairlock.ErrInvalidValue)
	//lint:ignore SA1012 a nil context is what is tested
	require.ErrorIs(t, l.Lock(nil), fairlock.ErrInvalidValue) //nolint:staticcheck
	require.ErrorIs(t, l.Unlock(ctx), fairlock.ErrNotHeld)
	// Lease 0 is Lock's: the watchdog keeps every member.
	require.NoError(t, l.LockWithLease(ctx, 0))
	left, err := bb.RemainingLease(ctx)
	require.NoError(t, err)
	require.Greater(t, left, 10*time.Second, "the watchdog's lease")
	require.NoError(t, l.Unlock(ctx))
}

// The canonical order is (slot, name, write half first), whatever the
// order the members were given in.
func TestCanonicalOrder(t *testing.T) {
	b := redistest.Mini(t)
	c := newClient(t, b.Client(t))
	p := redistest.Prefix(t)
	var ns []string
	for i := range 12 {
		ns = append(ns, fmt.Sprintf("%sseat-%d", p, i))
	}
	ns = append(ns, "{venue}"+p+"x", "{venue}"+p+"a") // one slot, ordered by name
	want := slices.Clone(ns)
	slices.SortFunc(want, func(a, b string) int {
		if d := core.Slot(a) - core.Slot(b); d != 0 {
			return d
		}
		return map[bool]int{true: -1, false: 1}[a < b]
	})
	for _, order := range [][]string{ns, reversed(ns)} {
		ms := handles(t, kinds[0], c, order)
		l := newMulti(t, ms...)
		var got []string
		for _, m := range l.Members() {
			got = append(got, m.Name())
		}
		require.Equal(t, want, got)
	}
}

// oppositeOrders runs two callers, each on its own Client with its own
// handles, one listing names in order and the other in reverse, rounds
// times each: Lock, check that it is alone, Unlock. It returns an error
// when a Lock has not returned after stuck (the callers deadlocked) or when
// both held the locks at once.
func oppositeOrders(t *testing.T, b *redistest.Backend, k kind, rounds int, stuck time.Duration, broken bool) error {
	ns := names(t, 4)
	var inside atomic.Int32
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for caller := range 2 {
		c := newClient(t, b.Client(t))
		order := ns
		if caller == 1 {
			order = reversed(ns)
		}
		l := newMulti(t, handles(t, k, c, order)...)
		if broken {
			multi.BreakOrder(l)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), stuck)
				err := l.Lock(ctx)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("caller %d round %d: Lock did not return within %v (deadlock): %w", caller, r, stuck, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("caller %d round %d: %d holders at once", caller, r, n)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Unlock(context.Background()); err != nil {
					errs <- fmt.Errorf("caller %d round %d: Unlock: %w", caller, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(slices.Collect(func(yield func(error) bool) {
		for e := range errs {
			if !yield(e) {
				return
			}
		}
	})...)
}

// Two callers listing the same four locks in opposite orders, in a loop:
// never a deadlock, never two holders, for every lock kind.
func TestOppositeOrdersNeverDeadlock(t *testing.T) {
	redistest.Long(t)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				require.NoError(t, oppositeOrders(t, b, k, 40, 20*time.Second, false))
			})
		})
	}
}

// The same check catches a MultiLock that takes its members in the
// caller's order (Redisson's): the two callers deadlock, each holding the
// lock the other waits for, until their ctx ends.
func TestOppositeOrdersCatchesCallerOrder(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		err := oppositeOrders(t, b, kinds[0], 400, 3*time.Second, true)
		require.Error(t, err, "taking members in the caller's order must deadlock")
		require.ErrorIs(t, err, fairlock.ErrCanceled)
		t.Log(err)
	})
}

// allOrNothing holds the last member (in the canonical order) through
// another owner, then tries the MultiLock with TryLock and TryLockFor (with
// and without a lease): each must report false and leave no member held.
func allOrNothing(t *testing.T, b *redistest.Backend, k kind, broken bool) error {
	ctx := testCtx(t)
	c := newClient(t, b.Client(t))
	ns := names(t, 4)
	l := newMulti(t, handles(t, k, c, reversed(ns))...)
	if broken {
		multi.BreakRollback(l)
	}
	order := l.Members()
	last := order[len(order)-1].Name()
	blocker := k.make(t, newClient(t, b.Client(t)), last)
	require.NoError(t, blocker.Lock(ctx))
	defer func() { require.NoError(t, blocker.Unlock(ctx)) }()
	var errs []error
	for _, try := range []struct {
		name string
		f    func() (bool, error)
	}{
		{"TryLock", func() (bool, error) { return l.TryLock(ctx) }},
		{"TryLockFor(300ms, 0)", func() (bool, error) { return l.TryLockFor(ctx, 300*time.Millisecond, 0) }},
		{"TryLockFor(300ms, 10s)", func() (bool, error) { return l.TryLockFor(ctx, 300*time.Millisecond, 10*time.Second) }},
		{"TryLockFor(0, 10s)", func() (bool, error) { return l.TryLockFor(ctx, 0, 10*time.Second) }},
	} {
		ok, err := try.f()
		require.NoError(t, err, try.name)
		require.False(t, ok, try.name)
		require.Nil(t, l.Tokens())
		select {
		case <-l.Done():
		default:
			t.Fatalf("%s: Done open after a failed acquisition", try.name)
		}
		if held := locked(t, ctx, c, ns); !slices.Equal(held, []string{last}) {
			errs = append(errs, fmt.Errorf("%s: after a failed acquisition these are locked: %v (want only %s, the blocker's)", try.name, held, last))
		}
	}
	return errors.Join(errs...)
}

// A TryLock or TryLockFor that cannot get one member leaves none held.
func TestAllOrNothing(t *testing.T) {
	redistest.Long(t)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				require.NoError(t, allOrNothing(t, b, k, false))
			})
		})
	}
}

func TestAllOrNothingCatchesNoRollback(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		err := allOrNothing(t, b, kinds[0], true)
		require.Error(t, err)
		t.Log(err)
	})
}

// rollbackOnCtxEnd: a Lock waiting for the last member when its ctx ends
// (deadline, or cancel) returns an error matching ErrCanceled and ctx.Err()
// and leaves no member held.
func rollbackOnCtxEnd(t *testing.T, b *redistest.Backend, k kind, broken bool) error {
	ctx := testCtx(t)
	c := newClient(t, b.Client(t))
	ns := names(t, 3)
	l := newMulti(t, handles(t, k, c, ns)...)
	if broken {
		multi.BreakRollback(l)
	}
	last := l.Members()[len(ns)-1].Name()
	blocker := k.make(t, newClient(t, b.Client(t)), last)
	require.NoError(t, blocker.Lock(ctx))
	defer func() { require.NoError(t, blocker.Unlock(ctx)) }()

	var errs []error
	dctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	err := l.Lock(dctx)
	cancel()
	require.ErrorIs(t, err, fairlock.ErrCanceled)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	if held := locked(t, ctx, c, ns); !slices.Equal(held, []string{last}) {
		errs = append(errs, fmt.Errorf("deadline: locked after the ctx ended: %v", held))
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	err = l.LockWithLease(cctx, 20*time.Second)
	require.ErrorIs(t, err, fairlock.ErrCanceled)
	require.ErrorIs(t, err, context.Canceled)
	if held := locked(t, ctx, c, ns); !slices.Equal(held, []string{last}) {
		errs = append(errs, fmt.Errorf("cancel: locked after the ctx ended: %v", held))
	}
	return errors.Join(errs...)
}

func TestRollbackOnCtxEnd(t *testing.T) {
	redistest.Long(t)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				require.NoError(t, rollbackOnCtxEnd(t, b, k, false))
			})
		})
	}
}

func TestRollbackOnCtxEndCatchesNoRollback(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		err := rollbackOnCtxEnd(t, b, kinds[0], true)
		require.Error(t, err)
		t.Log(err)
	})
}

// doneOnLoss: a member force-unlocked by another owner closes the
// MultiLock's Done (at the member's next watchdog renewal: a 3 s watchdog
// lease renews every second), and Err names it.
func doneOnLoss(t *testing.T, b *redistest.Backend, k kind, within time.Duration, broken bool) error {
	ctx := testCtx(t)
	c := newClient(t, b.Client(t), fairlock.WithLease(3*time.Second))
	ns := names(t, 3)
	l := newMulti(t, handles(t, k, c, ns)...)
	if broken {
		multi.BreakDone(l)
	}
	require.NoError(t, l.Lock(ctx))
	require.NoError(t, l.Err())
	v := l.ValidUntil()
	require.False(t, v.IsZero())
	for _, m := range l.Members() {
		require.False(t, m.ValidUntil().Before(v), "ValidUntil is the earliest member's")
	}
	select {
	case <-l.Done():
		t.Fatal("Done closed while held")
	default:
	}
	other, err := reentrant.New(newClient(t, b.Client(t)), ns[1])
	require.NoError(t, err)
	ok, err := other.ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, ok)

	var result error
	select {
	case <-l.Done():
		err := l.Err()
		var me *multi.MemberError
		switch {
		case !errors.Is(err, fairlock.ErrLost):
			result = fmt.Errorf("Err %v does not match ErrLost", err)
		case !errors.As(err, &me) || me.Name != ns[1] || me.Index != 1:
			result = fmt.Errorf("Err %v does not name member 1 (%s)", err, ns[1])
		case !l.ValidUntil().IsZero():
			result = errors.New("ValidUntil not zero after the loss")
		}
		t.Log(err)
	case <-time.After(within):
		result = fmt.Errorf("Done still open %v after a member was force-unlocked", within)
	}
	// Unlock releases the members still held and reports the lost one.
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, fairlock.ErrNotHeld)
	require.Empty(t, locked(t, ctx, c, ns))
	return result
}

func TestDoneClosesWhenAMemberIsLost(t *testing.T) {
	redistest.Long(t)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				require.NoError(t, doneOnLoss(t, b, k, 20*time.Second, false))
			})
		})
	}
}

func TestDoneCatchesIgnoredLoss(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		err := doneOnLoss(t, b, kinds[0], 5*time.Second, true)
		require.Error(t, err)
		t.Log(err)
	})
}

// Done closes on Unlock with Err nil; the MultiLock re-enters; tokens come
// per member in the caller's order, 0 for a member without tokens, and
// grow across acquisitions.
func TestHoldUnlockReentryTokens(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		ns := names(t, 4)
		var ms []multi.Member
		for i, n := range ns {
			ms = append(ms, kinds[i].make(t, c, n))
		}
		l := newMulti(t, reversed(ms)...)
		require.Nil(t, l.Tokens())
		require.NoError(t, l.Lock(ctx))
		t1 := l.Tokens()
		// reversed: [rwlock-write, fenced, fair, reentrant]
		require.Len(t, t1, 4)
		require.Zero(t, t1[0])
		require.Positive(t, t1[1])
		require.Positive(t, t1[2])
		require.Zero(t, t1[3])
		held, err := l.IsHeld(ctx)
		require.NoError(t, err)
		require.True(t, held)
		done := l.Done()

		require.NoError(t, l.Lock(ctx)) // re-entry
		require.NoError(t, l.Unlock(ctx))
		held, err = l.IsHeld(ctx)
		require.NoError(t, err)
		require.True(t, held, "one Unlock of two acquisitions keeps the hold")
		select {
		case <-done:
			t.Fatal("Done closed by the first of two Unlocks")
		default:
		}
		require.NoError(t, l.Unlock(ctx))
		<-done
		require.NoError(t, l.Err())
		require.True(t, l.ValidUntil().IsZero())
		require.Empty(t, locked(t, ctx, c, ns))

		ok, err := l.TryLockFor(ctx, time.Second, 10*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		t2 := l.Tokens()
		require.Greater(t, t2[1], t1[1])
		require.Greater(t, t2[2], t1[2])
		for _, m := range ms {
			lease, err := m.(interface {
				RemainingLease(context.Context) (time.Duration, error)
			}).RemainingLease(ctx)
			require.NoError(t, err)
			require.Greater(t, lease, 5*time.Second, "each member has the explicit lease")
			require.LessOrEqual(t, lease, 10*time.Second)
		}
		require.NoError(t, l.Unlock(ctx))
	})
}

// The two halves of one rwlock in one MultiLock, listed read half first:
// taken write half first, so the owner does not wait for itself. Taken in
// the caller's order (read first) the writer waits for its own read hold.
func TestRWLockHalves(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		ns := names(t, 2)
		rw, err := rwlock.New(c, ns[0])
		require.NoError(t, err)
		other, err := reentrant.New(c, ns[1])
		require.NoError(t, err)
		l := newMulti(t, rw.ReadLock(), other, rw.WriteLock())
		ok, err := l.TryLockFor(ctx, 5*time.Second, 0)
		require.NoError(t, err)
		require.True(t, ok)
		// Another owner can neither read nor write.
		rw2, err := rwlock.New(newClient(t, b.Client(t)), ns[0])
		require.NoError(t, err)
		ok, err = rw2.ReadLock().TryLock(ctx)
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, l.Unlock(ctx))
		require.Empty(t, locked(t, ctx, c, ns))

		broken := newMulti(t, rw.ReadLock(), rw.WriteLock())
		multi.BreakOrder(broken)
		ok, err = broken.TryLockFor(ctx, 500*time.Millisecond, 0)
		require.NoError(t, err)
		require.False(t, ok, "read half first: the writer waits for its own reader")
		require.Empty(t, locked(t, ctx, c, ns))
	})
}

// A member taken earlier whose explicit lease runs out while a later member
// is awaited makes the acquisition start again; it succeeds once the later
// member is free, with every member valid.
func TestRestartWhenAnEarlierMemberExpires(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		redistest.RealClock(t, b)
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		ns := names(t, 2)
		l := newMulti(t, handles(t, kinds[0], c, ns)...)
		last := l.Members()[1].Name()
		blocker, err := reentrant.New(newClient(t, b.Client(t)), last)
		require.NoError(t, err)
		require.NoError(t, blocker.LockWithLease(ctx, 3*time.Second))
		start := time.Now()
		ok, err := l.TryLockFor(ctx, 30*time.Second, time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, time.Since(start), 2*time.Second, "acquired only after the blocker's lease")
		require.True(t, l.ValidUntil().After(start.Add(2*time.Second)), "the first member was taken again after the restart")
		held, err := l.IsHeld(ctx)
		require.NoError(t, err)
		if time.Now().Before(l.ValidUntil()) {
			require.True(t, held)
		}
		// The members' lease is 1 s: on a loaded machine it may run out
		// before the Unlock, which then reports the hold gone.
		if err := l.Unlock(ctx); err != nil {
			require.ErrorIs(t, err, fairlock.ErrNotHeld)
			require.False(t, time.Now().Before(l.ValidUntil()), "an Unlock within the validity failed: %v", err)
		}
	})
}

// A lost hold must be unlocked before the MultiLock acquires again.
func TestAcquireAfterLossWantsUnlock(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	c := newClient(t, b.Client(t))
	ns := names(t, 2)
	ms := handles(t, kinds[0], c, ns)
	l := newMulti(t, ms...)
	require.NoError(t, l.Lock(ctx))
	require.NoError(t, ms[0].Unlock(ctx)) // released outside the MultiLock
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done open after a member was released through its own handle")
	}
	require.ErrorIs(t, l.Err(), fairlock.ErrLost)
	_, err := l.TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrLost)
	require.ErrorIs(t, l.Unlock(ctx), fairlock.ErrNotHeld)
	ok, err := l.TryLock(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, l.Unlock(ctx))
}

var _ = assert.True

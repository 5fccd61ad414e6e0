package fair_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Issue 23: the scalable engine's release grants the lock to the live head
// directly; the head returns from Lock on the grant message without running
// its acquisition script again, with the next fencing token, and then claims
// its full lease (the grant's TTL is min(lease, 2 graces)).
func TestScalableHandoffGrantsWithoutAScript(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		opt := fair.WithEngine(fair.Scalable)
		grace := 500 * time.Millisecond // a grant of 1 s; the watchdog lease is 30 s
		holder := newMutex(t, newClient(t, rdb, fairlock.WithHeadGrace(grace)), name, opt)
		t1, err := holder.LockAndGetToken(ctx)
		require.NoError(t, err)

		waiterRDB := b.Client(t)
		var tries atomic.Int64
		waiterRDB.AddHook(countHook{n: &tries, sha: wire.ScalableDefault().Script(wire.FileFairTryLockWait).Hash()})
		waiter := newMutex(t, newClient(t, waiterRDB, fairlock.WithHeadGrace(grace)), name, opt)
		type res struct {
			tok int64
			err error
		}
		got := make(chan res, 1)
		go func() {
			tok, err := waiter.LockAndGetToken(ctx)
			got <- res{tok, err}
		}()
		engineCases[1].waitQueued(t, rdb, name, 1)
		// The waiter joined, and re-checked once after subscribing; wait
		// until both are done, so that no attempt of its own is in flight.
		require.Eventually(t, func() bool { return tries.Load() >= 2 }, 10*time.Second, time.Millisecond)
		before := tries.Load()
		require.NoError(t, holder.Unlock(ctx))
		r := <-got
		require.NoError(t, r.err)
		assert.Equal(t, t1+1, r.tok, "a grant takes the next token, as a take would")
		assert.Equal(t, before, tries.Load(), "the head took the grant without another acquisition script")
		held, err := waiter.IsHeld(ctx)
		require.NoError(t, err)
		assert.True(t, held)
		assert.True(t, waiter.ValidUntil().After(time.Now()))
		// The claim sets the watchdog lease, far beyond the grant's 1 s.
		require.Eventually(t, func() bool {
			d, err := waiter.RemainingLease(ctx)
			return err == nil && d > 2*grace
		}, 10*time.Second, 5*time.Millisecond, "the grant was never claimed")
		q, _ := engineCases[1].queue(t, rdb, name)
		assert.Empty(t, q, "the grant took the head out of the queue")
		require.NoError(t, waiter.Unlock(ctx))
	})
}

// A grant that nobody claims (the head is dead: it joined and never came
// back) passes on: the key expires after the grant's TTL (2 graces) and the
// next waiter, woken by the release as the new head, takes the lock.
func TestScalableUnclaimedGrantPassesOn(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		opt := fair.WithEngine(fair.Scalable)
		grace := 200 * time.Millisecond
		c := newClient(t, rdb, fairlock.WithHeadGrace(grace))
		holder := newMutex(t, c, name, opt)
		require.NoError(t, holder.Lock(ctx))
		// A dead head that joined with a latch (what a waiting Lock sends).
		k := wire.KeysFor(name)
		_, _, err := wire.ScalableDefault().TryLockWait(ctx, rdb, k, wire.Args{
			Owner: "dead:1", LeaseMs: 30000, WaitMs: 300000, NowMs: time.Now().UnixMilli(),
			GraceMs: grace.Milliseconds(), AcquireID: "dead-request", LatchMs: 10000})
		require.NoError(t, err)
		live := newMutex(t, c, name, opt)
		done := make(chan error, 1)
		go func() { done <- live.Lock(ctx) }()
		engineCases[1].waitQueued(t, rdb, name, 2)
		require.NoError(t, holder.Unlock(ctx))
		holds, err := rdb.HGetAll(ctx, name).Result()
		require.NoError(t, err)
		if b.Mini != nil {
			assert.Equal(t, map[string]string{"dead:1": "1"}, holds, "the release granted the lock to the dead head")
			b.Mini.FastForward(2 * grace)
		} else if len(holds) > 0 {
			assert.Equal(t, map[string]string{"dead:1": "1"}, holds, "the release granted the lock to the dead head")
		}
		require.NoError(t, <-done, "the follower takes the lock once the unclaimed grant expires")
		require.NoError(t, live.Unlock(ctx))
	})
}

// A waiter that gives up while queued voids its request: a release then does
// not grant it the lock (its latch exists), and a grant already made is
// given back by the give-up's abandon and unlock (script level: the grant
// made, then the give-up's calls as core sends them).
func TestScalableGiveUpAndGrant(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		k := wire.KeysFor(redistest.Prefix(t) + "lock")
		s := wire.ScalableDefault()
		now := time.Now().UnixMilli()
		args := func(owner, req string) wire.Args {
			return wire.Args{Owner: owner, LeaseMs: 30000, WaitMs: 300000, NowMs: now, GraceMs: 5000,
				AcquireID: req, LatchMs: 10000, RequestID: owner + "-unlock"}
		}
		ok, _, err := s.TryLockWait(ctx, rdb, k, args("h:1", "rh"))
		require.NoError(t, err)
		require.True(t, ok)
		for _, w := range []string{"a:1", "b:1", "c:1"} {
			ok, _, err := s.TryLockWait(ctx, rdb, k, args(w, "r"+w))
			require.NoError(t, err)
			require.False(t, ok)
		}
		// a, the head, gives up: its abandon comes first (its latch is
		// then 'void'), the release finds it still queued and does not
		// grant it the lock (a wake-up goes to it instead), then it leaves.
		held, err := wire.Default().Abandon(ctx, rdb, k, args("a:1", "ra:1"))
		require.NoError(t, err)
		assert.False(t, held)
		_, err = s.Unlock(ctx, rdb, k, args("h:1", ""))
		require.NoError(t, err)
		holds, _ := rdb.HGetAll(ctx, k.Name).Result()
		assert.Empty(t, holds, "no grant to a request given up")
		require.NoError(t, s.AcquireFailed(ctx, rdb, k, args("a:1", "ra:1")))
		// b takes it by itself (it is the head of a free lock now), then
		// releases: c is granted the lock; c's give-up then hands it back
		// (abandon says held, the unlock releases it).
		ok, _, err = s.TryLockWait(ctx, rdb, k, args("b:1", "rb:1"))
		require.NoError(t, err)
		require.True(t, ok)
		_, err = s.Unlock(ctx, rdb, k, args("b:1", ""))
		require.NoError(t, err)
		holds, _ = rdb.HGetAll(ctx, k.Name).Result()
		assert.Equal(t, map[string]string{"c:1": "1"}, holds, "the release granted c")
		held, err = wire.Default().Abandon(ctx, rdb, k, args("c:1", "rc:1"))
		require.NoError(t, err)
		assert.True(t, held, "the abandon of a granted request says it holds, so the give-up unlocks")
		r, err := s.Unlock(ctx, rdb, k, args("c:1", ""))
		require.NoError(t, err)
		assert.Equal(t, wire.Released, r)
		// A late copy of c's request does nothing.
		_, _, err = s.TryLockWait(ctx, rdb, k, args("c:1", "rc:1"))
		assert.True(t, err != nil && strings.Contains(err.Error(), "abandoned"), "%v", err)
		n, _ := rdb.Exists(ctx, k.Name).Result()
		assert.Zero(t, n)
	})
}

// A waiter whose ctx ends while the release grants it the lock (the two race
// here, each round) either returns holding the lock or returns the ctx's
// error and gives the grant back: whichever, the lock never stays with it,
// and a third handle then takes the lock.
func TestScalableCancelDuringGrantGivesBack(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		opt := fair.WithEngine(fair.Scalable)
		c := newClient(t, rdb)
		holder, waiter, third := newMutex(t, c, name, opt), newMutex(t, c, name, opt), newMutex(t, c, name, opt)
		var got, gaveBack int
		for i := range 40 {
			require.NoError(t, holder.Lock(ctx))
			wctx, cancel := context.WithCancel(ctx)
			res := make(chan error, 1)
			go func() { res <- waiter.Lock(wctx) }()
			engineCases[1].waitQueued(t, rdb, name, 1)
			if i%2 == 0 {
				go cancel() // mostly before the release: no grant
			}
			require.NoError(t, holder.Unlock(ctx))
			if i%2 == 1 {
				cancel() // the grant is made: it races its message
			}
			err := <-res
			cancel()
			if err == nil {
				got++
				require.NoError(t, waiter.Unlock(ctx))
			} else {
				gaveBack++
				require.ErrorIs(t, err, context.Canceled)
				require.ErrorIs(t, err, fairlock.ErrCanceled)
			}
			// Whatever happened, the lock is not left with the waiter:
			// the third handle takes it (a grant to the waiter given
			// back is handed on to it, or it finds the lock free).
			require.NoError(t, third.Lock(ctx))
			held, err := waiter.IsHeld(ctx)
			require.NoError(t, err)
			assert.False(t, held)
			require.NoError(t, third.Unlock(ctx))
		}
		t.Logf("%d rounds returned the lock, %d gave it back", got, gaveBack)
	})
}

// holdRenewHook holds back the renew.lua calls a client sends until release
// is closed (the grant's claim, here).
type holdRenewHook struct {
	sha     string
	release chan struct{}
}

func (h holdRenewHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h holdRenewHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if s, isScript := wire.ScriptCall(cmd); isScript {
			if s == h.sha {
				select {
				case <-h.release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return next(ctx, cmd)
	}
}
func (h holdRenewHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The validity of a hold taken from a grant message is conservative: until
// the claim is confirmed it is no later than the start of the waiter's Lock
// call (its request's first send comes after it) + the granted TTL, whenever
// the message arrived; the confirmed claim then moves it on.
func TestScalableGrantValidityIsConservative(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		opt := fair.WithEngine(fair.Scalable)
		grace := time.Second // a grant of 2 s
		holder := newMutex(t, newClient(t, rdb, fairlock.WithHeadGrace(grace)), name, opt)
		require.NoError(t, holder.Lock(ctx))
		waiterRDB := b.Client(t)
		hook := holdRenewHook{wire.Default().Script(wire.FileRenew).Hash(), make(chan struct{})}
		waiterRDB.AddHook(hook)
		waiter := newMutex(t, newClient(t, waiterRDB, fairlock.WithHeadGrace(grace)), name, opt)
		start := time.Now()
		res := make(chan error, 1)
		go func() { res <- waiter.Lock(ctx) }()
		engineCases[1].waitQueued(t, rdb, name, 1)
		time.Sleep(200 * time.Millisecond) // the message comes well after the request started
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-res)
		v := waiter.ValidUntil()
		assert.False(t, v.After(start.Add(2*grace)), "validity %v after the request's start + the granted TTL", v.Sub(start))
		assert.True(t, v.After(time.Now()))
		close(hook.release) // the claim goes through
		require.Eventually(t, func() bool { return waiter.ValidUntil().After(start.Add(2 * grace)) },
			10*time.Second, 5*time.Millisecond, "the confirmed claim moves the validity to the full lease")
		require.NoError(t, waiter.Unlock(ctx))
	})
}

// Issue 23: after a handoff the new head and the waiter behind it are
// woken with the reply their attempt would get (the lock is held by the
// grantee): they re-arm their timers and report their new places without
// running a script.
func TestScalableHandoffWakesTheNextWithoutAScript(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		opt := fair.WithEngine(fair.Scalable)
		grace := 30 * time.Second // no waiter's timer runs out during the test
		holder := newMutex(t, newClient(t, rdb, fairlock.WithHeadGrace(grace)), name, opt)
		require.NoError(t, holder.Lock(ctx))

		sha := wire.ScalableDefault().Script(wire.FileFairTryLockWait).Hash()
		const n = 3
		ms := make([]*fair.Mutex, n)
		tries := make([]*atomic.Int64, n)
		recs := make([]*positions, n)
		results := make([]chan error, n)
		for i := range n {
			wrdb := b.Client(t)
			tries[i], recs[i], results[i] = new(atomic.Int64), &positions{}, make(chan error, 1)
			wrdb.AddHook(countHook{n: tries[i], sha: sha})
			ms[i] = newMutex(t, newClient(t, wrdb, fairlock.WithHeadGrace(grace)), name, opt)
			go func() {
				_, err := ms[i].Acquire(ctx, fair.AcquireOptions{Wait: fair.Forever, Position: recs[i].add})
				results[i] <- err
			}()
			engineCases[1].waitQueued(t, rdb, name, i+1)
			// the join, and the re-check after subscribing: then it sleeps
			recs[i].next(t, 1, "the re-check after subscribing")
		}
		before := []int64{tries[1].Load(), tries[2].Load()}
		t0 := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-results[0], "the head takes the grant")
		assert.Equal(t, 0, recs[1].since(t, t0, "the new head's note").Ahead)
		assert.Equal(t, 1, recs[2].since(t, t0, "the new second's note").Ahead)
		assert.Equal(t, before, []int64{tries[1].Load(), tries[2].Load()},
			"the new head and second ran no acquisition script after the handoff")

		// the rest of the queue drains in order
		require.NoError(t, ms[0].Unlock(ctx))
		require.NoError(t, <-results[1])
		require.NoError(t, ms[1].Unlock(ctx))
		require.NoError(t, <-results[2])
		require.NoError(t, ms[2].Unlock(ctx))
		for i := range n {
			checkMonotone(t, ms[i].Owner(), recs[i].all())
		}
	})
}

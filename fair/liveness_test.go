package fair_test

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
)

// Liveness: every live waiter gets the lock within the bound stated in
// docs/design.md ("Liveness bound"). These tests run the fair.Mutex API on
// both engines, on a real redis-server and on miniredis (whose clock is made
// to run with realClock, so leases and head graces end as on a server).

// realClock: see redistest.RealClock.
func realClock(t testing.TB, b *redistest.Backend) { t.Helper(); redistest.RealClock(t, b) }

// busyLoops keeps n goroutines spinning until the end of t, so that timing
// bounds are checked on a loaded machine.
func busyLoops(t testing.TB, n int) {
	t.Helper()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for !stop.Load() {
				for i := range 10000 {
					x += i
				}
				runtime.Gosched()
			}
			_ = x
		}()
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
}

// Case 1 of the liveness issue: eight handles start 100 ms apart, each
// TryLockFor(ctx, 10 s, 1 s), and nobody unlocks: every lease runs out and
// the next waiter must take over about a second after the previous one. All
// eight must get the lock, in the order they started, on both engines, with
// the head grace on (default) and off (Redisson's rule).
func TestLeaseExpiryChainAllAcquireInOrder(t *testing.T) {
	redistest.Long(t)
	busyLoops(t, 2)
	graces := []struct {
		name  string
		grace time.Duration
	}{{"grace-default", 0}, {"grace-off", -1}}
	for _, e := range engineCases {
		t.Run(e.name, func(t *testing.T) {
			for _, g := range graces {
				t.Run(g.name, func(t *testing.T) {
					redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
						t.Parallel()
						leaseExpiryChain(t, b, e, g.grace)
					})
				})
			}
		})
	}
}

func leaseExpiryChain(t *testing.T, b *redistest.Backend, e engineCase, grace time.Duration) {
	realClock(t, b)
	ctx := testCtx(t)
	name := redistest.Prefix(t) + "lock"
	var opts []fairlock.Option
	if grace != 0 {
		opts = append(opts, fairlock.WithHeadGrace(grace))
	}
	clients := []*fairlock.Client{newClient(t, b.Client(t), opts...), newClient(t, b.Client(t), opts...)}
	const n = 8
	start := time.Now()
	var mu sync.Mutex
	var order []int
	var at []time.Duration
	var wg sync.WaitGroup
	rdb := b.Client(t)
	for i := range n {
		m := newMutex(t, clients[i%2], name, e.opt)
		next := time.Now().Add(100 * time.Millisecond)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The chain takes about 8 leases; the wait leaves room for a
			// loaded machine (2 busy loops beside parallel subtests: one
			// run granted the last handle at 9.76 s of a 10 s wait).
			ok, err := m.TryLockFor(ctx, 25*time.Second, time.Second)
			if err != nil || !ok {
				t.Errorf("handle %d (started at %v): TryLockFor = %v, %v after %v", i, 100*time.Duration(i)*time.Millisecond, ok, err, time.Since(start))
				return
			}
			mu.Lock()
			order = append(order, i)
			at = append(at, time.Since(start).Round(time.Millisecond))
			mu.Unlock()
		}()
		// The start order is the order of arrival in Redis: wait until this
		// handle holds the lock or is queued before starting the next.
		require.Eventually(t, func() bool {
			q, _ := e.queue(t, rdb, name)
			return slices.Contains(q, m.Owner()) || rdb.HExists(ctx, name, m.Owner()).Val()
		}, 5*time.Second, time.Millisecond, "handle %d neither queued nor holding", i)
		time.Sleep(time.Until(next))
	}
	wg.Wait()
	t.Logf("grant order %v at %v", order, at)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, order, "every handle acquires, in start order")
}

// Case 2: a dead waiter that becomes the head behind a live holder must not
// stall the waiter behind it for the lease of a hold that waiter saw from
// further back. Queue [A D W] behind a holder with a 20 s lease (D dead, W
// polled from third place); the holder unlocks, A takes the lock and
// unlocks at once: W must get the lock within about one head grace (1 s),
// not when the first holder's lease would have ended. (The lease was 3 s
// with a 2.5 s bound, which a loaded machine missed: 2.53 s once; 20 s
// against a 10 s bound keeps the two outcomes far apart.)
func TestDeadHeadAfterHandoffDoesNotStallFollower(t *testing.T) {
	redistest.Long(t)
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		realClock(t, b)
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		const grace = time.Second
		c := newClient(t, b.Client(t), fairlock.WithHeadGrace(grace))
		holder := newMutex(t, c, name, e.opt)
		require.NoError(t, holder.LockWithLease(ctx, 20*time.Second))
		a, w := newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt)
		aGot := make(chan error, 1)
		go func() { aGot <- a.Lock(ctx) }()
		e.waitQueued(t, rdb, name, 1)
		e.dead(t, rdb, name, "dead-client:1", 5*time.Minute)
		wGot := make(chan error, 1)
		go func() { wGot <- w.Lock(ctx) }()
		e.waitQueued(t, rdb, name, 3)
		time.Sleep(100 * time.Millisecond) // W has polled from third place: it sleeps the holder's PTTL

		released := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-aGot)
		require.NoError(t, a.Unlock(ctx)) // the dead waiter is now the head of a free lock
		select {
		case err := <-wGot:
			require.NoError(t, err)
			took := time.Since(released)
			t.Logf("W acquired %v after the release (grace %v, first lease 20 s)", took, grace)
			assert.Less(t, took, 10*time.Second, "W waited about the first holder's whole lease")
			require.NoError(t, w.Unlock(ctx))
		case <-time.After(40 * time.Second):
			t.Fatal("W never acquired")
		}
	})
}

// Case 5: the unlocker's clock lags by 6 s. The woken head must take the
// lock; the queue [W1 W2] must not be reordered.
func TestUnlockerClockLagDoesNotReorderQueue(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		realClock(t, b)
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		var clock core.SkewedClock
		clock.Set(-6 * time.Second)
		lagging := newClient(t, b.Client(t), core.WithWallClock(clock.UnixMilli))
		c := newClient(t, b.Client(t))
		holder := newMutex(t, lagging, name, e.opt)
		require.NoError(t, holder.Lock(ctx))
		w1, w2 := newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt)
		got := make(chan string, 2)
		for i, w := range []*fair.Mutex{w1, w2} {
			go func() {
				if err := w.Lock(ctx); err != nil {
					got <- "error: " + err.Error()
					return
				}
				got <- w.Owner()
			}()
			e.waitQueued(t, rdb, name, i+1)
		}
		require.NoError(t, holder.Unlock(ctx))
		select {
		case first := <-got:
			require.Equal(t, w1.Owner(), first, "the head W1 must be granted first")
		case <-time.After(20 * time.Second):
			t.Fatal("nobody acquired")
		}
		order, _ := e.queue(t, rdb, name)
		assert.Equal(t, []string{w2.Owner()}, order, "W2 stays queued, alone")
		require.NoError(t, w1.Unlock(ctx))
		select {
		case second := <-got:
			require.Equal(t, w2.Owner(), second)
		case <-time.After(20 * time.Second):
			t.Fatal("W2 never acquired")
		}
		require.NoError(t, w2.Unlock(ctx))
	})
}

// Case 7: mixing the two fair engines on one name must never leave a lock its
// holder cannot release; the release wakes the other engine's waiter.
func TestHolderReleasesWhateverTheOtherEngineQueued(t *testing.T) {
	for _, holderEngine := range engineCases {
		other := engineCases[0]
		if other.name == holderEngine.name {
			other = engineCases[1]
		}
		t.Run("holder-"+holderEngine.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				realClock(t, b)
				ctx := testCtx(t)
				rdb := b.Client(t)
				name := redistest.Prefix(t) + "lock"
				c := newClient(t, b.Client(t))
				for _, force := range []bool{false, true} {
					holder := newMutex(t, c, name, holderEngine.opt)
					require.NoError(t, holder.LockWithLease(ctx, time.Minute))
					waiter := newMutex(t, c, name, other.opt)
					res := make(chan error, 1)
					go func() { res <- waiter.Lock(ctx) }()
					other.waitQueued(t, rdb, name, 1)
					released := time.Now()
					if force {
						ok, err := holder.ForceUnlock(ctx)
						require.NoError(t, err, "ForceUnlock by the holder")
						assert.True(t, ok)
					} else {
						require.NoError(t, holder.Unlock(ctx), "Unlock by the holder")
					}
					select {
					case err := <-res:
						require.NoError(t, err)
						assert.Less(t, time.Since(released), 5*time.Second, "the other engine's waiter is woken")
					case <-time.After(20 * time.Second):
						t.Fatal("the other engine's waiter never acquired")
					}
					require.NoError(t, waiter.Unlock(ctx))
				}
			})
		})
	}
}

// Case 7, reentrant and fair handles on one name: a fair release wakes a
// reentrant waiter (which listens on the lock's plain channel) at once, not
// when the fair holder's lease would have ended.
func TestFairReleaseWakesReentrantWaiter(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		realClock(t, b)
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		for _, force := range []bool{false, true} {
			holder := newMutex(t, c, name, e.opt)
			require.NoError(t, holder.LockWithLease(ctx, time.Minute))
			r, err := reentrant.New(c, name)
			require.NoError(t, err)
			res := make(chan error, 1)
			go func() { res <- r.Lock(ctx) }()
			require.Eventually(t, func() bool { return core.Of(c).WaitChannels() == 1 }, 10*time.Second, time.Millisecond)
			released := time.Now()
			if force {
				_, err = holder.ForceUnlock(ctx)
			} else {
				err = holder.Unlock(ctx)
			}
			require.NoError(t, err)
			select {
			case err := <-res:
				require.NoError(t, err)
				assert.Less(t, time.Since(released), 5*time.Second)
			case <-time.After(20 * time.Second):
				t.Fatal("the reentrant waiter was not woken by the fair release")
			}
			require.NoError(t, r.Unlock(ctx))
		}
	})
}

package fair_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/lockstate"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// set is the engine's script set.
func (e engineCase) set() wire.FairSet {
	if e.name == lockstate.Scalable {
		return wire.ScalableDefault().Fair()
	}
	return wire.Default().Fair()
}

// The script's position reply, waiter by waiter, against the arrival order:
// joins one by one, a poll, a give-up in the middle and at the tail, a join
// after them, a take, and a prune of a dead head. The Redisson engine is
// exact throughout; the scalable engine counts the gap a give-up in the
// middle left (an upper bound) until the head passes it, and is exact
// otherwise.
func TestPositionReplyFollowsArrivalOrder(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := context.Background()
		rdb := b.Client(t)
		k := wire.KeysFor(redistest.Prefix(t) + "lock")
		set := e.set()
		now := time.Now().UnixMilli()
		arg := func(owner string, slot, at, grace int64) wire.Args {
			return wire.Args{Owner: owner, LeaseMs: 30_000, WaitMs: slot, NowMs: at, GraceMs: grace}
		}
		const hour = 3_600_000
		poll := func(owner string, grace int64) wire.Ahead {
			t.Helper()
			ok, _, _, ahead, err := set.TryLockWaitAhead(ctx, rdb, k, arg(owner, hour, now, grace))
			require.NoError(t, err)
			require.False(t, ok, "%s must not get the lock", owner)
			return ahead
		}
		require.NoError(t, rdb.HSet(ctx, k.Name, "holder:1", 1).Err())
		require.NoError(t, rdb.PExpire(ctx, k.Name, time.Minute).Err())

		// the first waiter is dead: it joined an hour ago with a 1 ms slot,
		// so its deadline has passed (Redisson's rule prunes it at the head)
		ok, _, _, ahead, err := set.TryLockWaitAhead(ctx, rdb, k, arg("dead:1", 1, now-hour, 5000))
		require.NoError(t, err)
		require.False(t, ok)
		assert.Equal(t, wire.Ahead{Ahead: 0, Joined: true}, ahead)
		owners := []string{"w:1", "w:2", "w:3", "w:4", "w:5"}
		for i, o := range owners {
			assert.Equal(t, wire.Ahead{Ahead: int64(i + 1), Joined: true}, poll(o, 5000), "%s joins behind %d", o, i+1)
		}
		for i, o := range owners {
			assert.Equal(t, wire.Ahead{Ahead: int64(i + 1)}, poll(o, 5000), "%s polls again", o)
		}

		// w:2 gives up from the middle, w:5 from the tail
		require.NoError(t, set.AcquireFailed(ctx, rdb, k, arg("w:2", hour, now, 5000)))
		require.NoError(t, set.AcquireFailed(ctx, rdb, k, arg("w:5", hour, now, 5000)))
		gap := int64(0)
		if e.name == lockstate.Scalable {
			gap = 1 // w:2's gap counts until the head passes it
		}
		assert.Equal(t, int64(1), poll("w:1", 5000).Ahead)
		assert.Equal(t, 2+gap, poll("w:3", 5000).Ahead)
		assert.Equal(t, 3+gap, poll("w:4", 5000).Ahead)
		// a join after a give-up at the tail leaves no gap there
		assert.Equal(t, wire.Ahead{Ahead: 4 + gap, Joined: true}, poll("w:6", 5000))

		// a poll with the grace off prunes the dead head (its deadline
		// passed): everyone moves up one
		assert.Equal(t, 2+gap, poll("w:4", 0).Ahead)
		q, _ := e.queue(t, rdb, k.Name)
		assert.Equal(t, []string{"w:1", "w:3", "w:4", "w:6"}, q, "the dead head was pruned")
		assert.Equal(t, int64(0), poll("w:1", 5000).Ahead)
		assert.Equal(t, 1+gap, poll("w:3", 5000).Ahead)

		// the lock is free: w:1 takes it; the head passes w:2's gap
		require.NoError(t, rdb.Del(ctx, k.Name).Err())
		ok, _, _, _, err = set.TryLockWaitAhead(ctx, rdb, k, arg("w:1", hour, now, 5000))
		require.NoError(t, err)
		require.True(t, ok)
		for i, o := range []string{"w:3", "w:4", "w:6"} {
			assert.Equal(t, int64(i), poll(o, 5000).Ahead, "%s after the take", o)
		}

		// without the flag the reply is the plain sleep, as before
		ok, ttl, err := set.TryLockWait(ctx, rdb, k, arg("w:6", hour, now, 5000))
		require.NoError(t, err)
		assert.False(t, ok)
		assert.Positive(t, ttl)
	})
}

// positions records the reports of one waiter.
type positions struct {
	mu sync.Mutex
	r  []fairlock.Position
}

func (p *positions) add(x fairlock.Position) {
	p.mu.Lock()
	p.r = append(p.r, x)
	p.mu.Unlock()
}

func (p *positions) all() []fairlock.Position {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]fairlock.Position(nil), p.r...)
}

// next waits for a report after the first n and returns it.
func (p *positions) next(t testing.TB, n int, what string) fairlock.Position {
	t.Helper()
	require.Eventually(t, func() bool { return len(p.all()) > n }, 20*time.Second, time.Millisecond, "no report: %s", what)
	return p.all()[n]
}

// since waits for a report read by an attempt sent after t0 and returns
// the first such.
func (p *positions) since(t testing.TB, t0 time.Time, what string) fairlock.Position {
	t.Helper()
	var got fairlock.Position
	require.Eventually(t, func() bool {
		for _, x := range p.all() {
			if x.At.After(t0) {
				got = x
				return true
			}
		}
		return false
	}, 20*time.Second, time.Millisecond, "no report: %s", what)
	return got
}

// checkMonotone: a waiter's reported position never goes up unless it
// joined again, and only the first report says Joined.
func checkMonotone(t testing.TB, who string, r []fairlock.Position) {
	t.Helper()
	for i := range r {
		if i == 0 {
			assert.True(t, r[0].Joined, "%s: the first report is the join", who)
			continue
		}
		assert.False(t, r[i].Joined, "%s: report %d says joined again", who, i)
		assert.LessOrEqual(t, r[i].Ahead, r[i-1].Ahead, "%s: position went up at report %d: %v", who, i, r)
	}
}

// poke wakes a waiter (its own channel), so that it attempts and reports.
func poke(t testing.TB, rdb redis.UniversalClient, m *fair.Mutex) {
	t.Helper()
	require.NoError(t, rdb.Publish(context.Background(), wire.KeysFor(m.Name()).WaiterChannel(m.Owner()), wire.UnlockMessage).Err())
}

// Through the API: waiters queue one by one with a position callback; each
// one's first report is its arrival rank; after a give-up in the middle and
// after handoffs the reports follow (exact on the Redisson engine, an upper
// bound on the scalable one until the head passes the gap); the ETA appears
// once the queue has moved; no report ever goes up; State lists the queue.
func TestPositionCallbackFollowsArrivalOrder(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		holder := newMutex(t, c, name, e.opt)
		require.NoError(t, holder.Lock(ctx))

		const n = 6
		ms := make([]*fair.Mutex, n)
		recs := make([]*positions, n)
		cancels := make([]context.CancelFunc, n)
		results := make([]chan error, n)
		for i := range n {
			ms[i], recs[i], results[i] = newMutex(t, c, name, e.opt), &positions{}, make(chan error, 1)
			wctx, cancel := context.WithCancel(ctx)
			cancels[i] = cancel
			t.Cleanup(cancel)
			go func() {
				ok, err := ms[i].Acquire(wctx, fair.AcquireOptions{Wait: fair.Forever, Position: recs[i].add})
				if err == nil && !ok {
					err = errors.New("not acquired")
				}
				results[i] <- err
			}()
			first := recs[i].next(t, 0, "join")
			assert.Equal(t, i, first.Ahead, "waiter %d joins behind %d", i, i)
			assert.True(t, first.Joined)
			assert.Zero(t, first.ETA, "no estimate before the queue moved")
		}
		st, err := holder.State(ctx, 3)
		require.NoError(t, err)
		assert.True(t, st.Locked)
		assert.Equal(t, holder.Owner(), st.Owner)
		assert.Equal(t, 1, st.HoldCount)
		assert.Positive(t, st.Lease)
		assert.Positive(t, st.Token)
		assert.Equal(t, n, st.QueueLen)
		assert.Equal(t, []string{ms[0].Owner(), ms[1].Owner(), ms[2].Owner()}, st.Waiters)

		// waiter 2 gives up from the middle
		cancels[2]()
		require.ErrorIs(t, <-results[2], context.Canceled)
		e.waitQueued(t, rdb, name, n-1)
		gap := 0
		if e.name == lockstate.Scalable {
			gap = 1
		}
		for i := 3; i < n; i++ {
			t0 := time.Now()
			poke(t, rdb, ms[i])
			assert.Equal(t, i-1+gap, recs[i].since(t, t0, "after the give-up").Ahead, "waiter %d after the give-up", i)
		}

		// two handoffs: waiter 0 takes the lock, then waiter 1, which keeps
		// it; the head passes the gap
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-results[0])
		require.NoError(t, ms[0].Unlock(ctx))
		require.NoError(t, <-results[1])
		e.waitQueued(t, rdb, name, n-3)
		for i := 3; i < n; i++ {
			t0 := time.Now()
			poke(t, rdb, ms[i])
			p := recs[i].since(t, t0, "after the handoffs")
			assert.Equal(t, i-3, p.Ahead, "waiter %d after the handoffs", i)
			assert.Positive(t, p.ETA, "waiter %d has seen the queue move", i)
		}
		st, err = holder.State(ctx, 10)
		require.NoError(t, err)
		assert.Equal(t, ms[1].Owner(), st.Owner)
		assert.Equal(t, n-3, st.QueueLen)
		assert.Equal(t, []string{ms[3].Owner(), ms[4].Owner(), ms[5].Owner()}, st.Waiters)
		require.NoError(t, ms[1].Unlock(ctx))

		for i := 3; i < n; i++ {
			require.NoError(t, <-results[i])
			require.NoError(t, ms[i].Unlock(ctx))
		}
		for i := range n {
			checkMonotone(t, ms[i].Owner(), recs[i].all())
		}
	})
}

// A dead head is pruned by its followers' graces; the waiters behind it
// move up and none of them reports a higher position on the way.
func TestPositionAfterPrune(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		realClock(t, b) // the grace runs on the server's clock
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, b.Client(t), fairlock.WithHeadGrace(300*time.Millisecond))
		name := redistest.Prefix(t) + "lock"
		holder := newMutex(t, c, name, e.opt)
		require.NoError(t, holder.Lock(ctx))
		e.dead(t, rdb, name, "dead-client:1", time.Minute)
		ms := []*fair.Mutex{newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt)}
		recs := []*positions{{}, {}}
		results := []chan error{make(chan error, 1), make(chan error, 1)}
		for i, m := range ms {
			go func() {
				ok, err := m.Acquire(ctx, fair.AcquireOptions{Wait: fair.Forever, Position: recs[i].add})
				if err == nil && !ok {
					err = errors.New("not acquired")
				}
				results[i] <- err
			}()
			assert.Equal(t, i+1, recs[i].next(t, 0, "join").Ahead, "waiter %d behind the dead one", i)
		}
		require.NoError(t, holder.Unlock(ctx)) // the dead head's graces run out; it is pruned
		require.NoError(t, <-results[0])
		// waiter 1 is the head now; it is woken by the take
		require.Eventually(t, func() bool {
			r := recs[1].all()
			return r[len(r)-1].Ahead == 0
		}, 20*time.Second, time.Millisecond, "waiter 1 never reported being the head: %v", recs[1].all())
		require.NoError(t, ms[0].Unlock(ctx))
		require.NoError(t, <-results[1])
		require.NoError(t, ms[1].Unlock(ctx))
		for i := range ms {
			checkMonotone(t, ms[i].Owner(), recs[i].all())
		}
	})
}

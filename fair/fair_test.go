package fair_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/lockstate"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

func newClient(t testing.TB, rdb redis.UniversalClient, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newMutex(t testing.TB, c *fairlock.Client, name string, opts ...fair.Option) *fair.Mutex {
	t.Helper()
	m, err := fair.New(c, name, opts...)
	require.NoError(t, err)
	return m
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// engineCase is one fair-lock engine, with what a test needs to look at its
// queue. Tests of behaviour that both engines share run on both.
type engineCase struct {
	name string
	opt  fair.Option
	// dead queues an owner that will never come back (a crashed client).
	dead func(t testing.TB, rdb redis.UniversalClient, name, owner string, slot time.Duration)
}

var engineCases = []engineCase{
	{lockstate.Redisson, fair.WithEngine(fair.Redisson), enqueueDead},
	{lockstate.Scalable, fair.WithEngine(fair.Scalable), enqueueDeadScalable},
}

// eachEngine runs f for each engine on miniredis and on redis-server.
func eachEngine(t *testing.T, f func(t *testing.T, b *redistest.Backend, e engineCase)) {
	for _, e := range engineCases {
		t.Run(e.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) { f(t, b, e) })
		})
	}
}

// waitQueued waits until the queue of name is n long.
func (e engineCase) waitQueued(t testing.TB, rdb redis.UniversalClient, name string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		q, _ := e.queue(t, rdb, name)
		return len(q) == n
	}, 10*time.Second, time.Millisecond, "%s queue of %s never reached %d", e.name, name, n)
}

// queue reads e's queue of name: the waiters, head first, and their
// absolute deadlines (every score of the timeout zset, or the scalable
// queue's head deadline plus the deltas). Keys of the other engine, or of
// the wrong type, or a scalable queue whose deadlines cannot be read, fail
// the test.
func (e engineCase) queue(t testing.TB, rdb redis.UniversalClient, name string) ([]string, map[string]int64) {
	t.Helper()
	s, err := lockstate.Read(context.Background(), rdb, name)
	require.NoError(t, err)
	require.Contains(t, []string{"", e.name}, s.Engine, "%s: the queue keys are the %s engine's", e.name, s.Engine)
	require.False(t, s.Has("wrong-type"), "%v", s.Problems)
	if e.name == lockstate.Scalable {
		require.False(t, s.Has("scalable-no-head") || s.Has("no-deadline"), "%v", s.Problems)
	}
	return s.Owners(), s.Deadlines()
}

func TestFIFOAcrossClients(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		// 31 passes through the lock, each waiter queued in turn: bounded
		// by 90 s rather than testCtx's 30 s, which a loaded machine can
		// use up.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		clients := []*fairlock.Client{newClient(t, b.Client(t)), newClient(t, b.Client(t)), newClient(t, b.Client(t))}
		holder := newMutex(t, clients[0], name, e.opt)
		require.NoError(t, holder.Lock(ctx))

		const n = 30
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			m := newMutex(t, clients[i%3], name, e.opt)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := m.Lock(ctx); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				errs <- m.Unlock(ctx)
			}()
			e.waitQueued(t, rdb, name, i+1) // the next one starts after this one is queued
		}
		require.NoError(t, holder.Unlock(ctx))
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, order, "grant order must equal arrival order")
		keys, _ := rdb.Keys(ctx, "*"+name+"*").Result()
		for _, k := range keys { // unlock latches expire by themselves
			assert.True(t, strings.HasPrefix(k, "redisson_unlock_latch:") || strings.HasPrefix(k, "fairlock_acquire_latch:") ||
				strings.HasPrefix(k, "redisson_lock_token:"), "left behind: %s", k) // the token counter is kept for ever
		}
	})
}

func TestCanceledWaiterShiftsFollowersAndLeavesNoTrace(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		c := newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		holder := newMutex(t, c, name, e.opt)
		require.NoError(t, holder.Lock(ctx))
		slot := time.Minute
		var ms []*fair.Mutex
		var cancels []context.CancelFunc
		var results []chan error
		for i := 0; i < 3; i++ {
			m := newMutex(t, c, name, e.opt, fair.WithWaitSlot(slot))
			wctx, cancel := context.WithCancel(ctx)
			res := make(chan error, 1)
			go func() { res <- m.Lock(wctx) }()
			e.waitQueued(t, rdb, name, i+1)
			ms, cancels, results = append(ms, m), append(cancels, cancel), append(results, res)
		}
		_, before := e.queue(t, rdb, name)
		require.Len(t, before, 3)

		cancels[1]() // the middle waiter gives up
		err := <-results[1]
		assert.True(t, errors.Is(err, fair.ErrCanceled) && errors.Is(err, context.Canceled), "%v", err)
		// The call returns when its ctx ends; leaving the queue goes on in
		// the background.
		e.waitQueued(t, rdb, name, 2)

		order, after := e.queue(t, rdb, name)
		assert.Equal(t, []string{ms[0].Owner(), ms[2].Owner()}, order)
		require.Len(t, after, 2)
		assert.Equal(t, before[ms[0].Owner()], after[ms[0].Owner()], "the waiter ahead keeps its deadline")
		assert.Equal(t, before[ms[2].Owner()]-slot.Milliseconds(), after[ms[2].Owner()], "the follower moves up one slot")
		assert.Equal(t, 2, core.Of(c).WaitChannels(), "the canceled waiter's subscription is gone")

		require.NoError(t, holder.Unlock(ctx))
		for _, i := range []int{0, 2} {
			require.NoError(t, <-results[i])
			require.NoError(t, ms[i].Unlock(ctx))
		}
		cancels[0]()
		cancels[2]()
		keys, _ := rdb.Keys(ctx, "*"+name+"*").Result()
		for _, k := range keys { // unlock latches expire by themselves
			assert.True(t, strings.HasPrefix(k, "redisson_unlock_latch:") || strings.HasPrefix(k, "fairlock_acquire_latch:") ||
				strings.HasPrefix(k, "redisson_lock_token:"), "left behind: %s", k) // the token counter is kept for ever
		}
	})
}

// enqueueDead leaves in the queue what a client that crashed while waiting
// leaves: an entry with a deadline one slot out, and nobody to come back.
// A free lock is held for the moment of the call, so the entry queues.
func enqueueDead(t testing.TB, rdb redis.UniversalClient, name, owner string, slot time.Duration) {
	t.Helper()
	ctx := context.Background()
	k := wire.KeysFor(name)
	free := rdb.Exists(ctx, k.Name).Val() == 0
	if free {
		require.NoError(t, rdb.HSet(ctx, k.Name, "placeholder:0", 1).Err())
	}
	ok, _, err := wire.Default().FairTryLockWait(ctx, rdb, k, wire.Args{
		Owner: owner, LeaseMs: 30000, WaitMs: slot.Milliseconds(), NowMs: time.Now().UnixMilli(),
	})
	require.NoError(t, err)
	require.False(t, ok)
	if free {
		require.NoError(t, rdb.Del(ctx, k.Name).Err())
	}
}

func TestDeadWaiterIsPruned(t *testing.T) {
	redistest.Long(t)
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t), fairlock.WithHeadGrace(-1)) // Redisson's rules only
		// The dead waiter must queue before the holder's lease ends, and
		// the live one behind it before its slot ends: a second each, so
		// that a loaded machine keeps that order.
		lease, slot := time.Second, time.Second
		holder := newMutex(t, c, name, e.opt)
		require.NoError(t, holder.LockWithLease(ctx, lease)) // and its holder dies too
		e.dead(t, rdb, name, "dead-client:1", slot)
		live := newMutex(t, c, name, e.opt)
		liveRes := make(chan error, 1)
		go func() { liveRes <- live.Lock(ctx) }()
		e.waitQueued(t, rdb, name, 2)
		if b.Mini != nil {
			b.Mini.FastForward(lease)
		}
		require.NoError(t, <-liveRes, "the live waiter must get the lock once the dead one is pruned")
		order, deadlines := e.queue(t, rdb, name)
		assert.Empty(t, order)
		assert.Empty(t, deadlines)
		require.NoError(t, live.Unlock(ctx))
	})
}

// A dead head behind a free lock must not stall its followers for its whole
// slot (5 minutes here): the head grace prunes it.
func TestDeadHeadDoesNotStallForItsSlot(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		realClock(t, b) // the grace runs on the server's clock
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t), fairlock.WithHeadGrace(200*time.Millisecond))
		holder := newMutex(t, c, name, e.opt)
		require.NoError(t, holder.LockWithLease(ctx, time.Minute))
		e.dead(t, rdb, name, "dead-client:1", 5*time.Minute)
		live := newMutex(t, c, name, e.opt)
		liveRes := make(chan error, 1)
		go func() { liveRes <- live.Lock(ctx) }()
		e.waitQueued(t, rdb, name, 2)
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-liveRes, "the follower must get the lock within the head grace, not the 5-minute slot")
		require.NoError(t, live.Unlock(ctx))
	})
}

// H2: a waiter queued behind another while the lock is free must not poll
// Redis in a loop (Redisson's script replies 0 and its client retries at once).
func TestNoBusyPollingBehindFreeLock(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		waiterRDB := b.Client(t)
		var evals atomic.Int64
		waiterRDB.AddHook(countHook{n: &evals})
		c := newClient(t, waiterRDB, fairlock.WithHeadGrace(time.Minute))
		e.dead(t, rdb, name, "slow-head:1", 5*time.Minute) // the lock is free, this head is not coming
		m := newMutex(t, c, name, e.opt)
		wctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() { res <- m.Lock(wctx) }()
		e.waitQueued(t, rdb, name, 2)
		time.Sleep(300 * time.Millisecond) // a window in which a polling client would call thousands of times
		cancel()
		err := <-res
		assert.True(t, errors.Is(err, context.Canceled), "%v", err)
		e.waitQueued(t, rdb, name, 1) // the give-up runs in the background
		// enqueue, one re-check after subscribing, and the give-up (two
		// scripts: abandon, since a grant may be in flight, then leaving
		// the queue)
		assert.LessOrEqual(t, evals.Load(), int64(5), "script calls while waiting behind a free lock")
		order, _ := e.queue(t, rdb, name)
		assert.Equal(t, []string{"slow-head:1"}, order)
	})
}

// countHook counts the script calls a client has run (wire.ScriptCall: EVAL,
// EVALSHA or FCALL; not those the server did not run, which are sent again):
// all, or with sha set only that script's.
type countHook struct {
	n   *atomic.Int64
	sha string
}

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if s, isScript := wire.ScriptCall(cmd); isScript && !wire.NotRun(err) && (h.sha == "" || s == h.sha) {
			h.n.Add(1)
		}
		return err
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// H1: a head with no deadline (someone deleted the timeout zset) must not
// block the lock for ever.
func TestHeadWithoutDeadlineDoesNotBlock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		enqueueDead(t, rdb, name, "ghost:1", 5*time.Minute)
		require.NoError(t, rdb.Del(ctx, wire.KeysFor(name).Timeouts).Err())
		m := newMutex(t, c, name)
		ok, err := m.TryLock(ctx)
		require.NoError(t, err)
		assert.True(t, ok, "a head without a deadline is stale")
		require.NoError(t, m.Unlock(ctx))
	})
}

func TestTryLockFailsWhileSomeoneIsQueued(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		e.dead(t, rdb, name, "queued:1", 5*time.Minute)
		m := newMutex(t, c, name, e.opt)
		ok, err := m.TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "the lock is free but someone is queued: the queue goes first")
		order, _ := e.queue(t, rdb, name)
		assert.Equal(t, []string{"queued:1"}, order, "TryLock never queues")
		locked, err := m.IsLocked(ctx)
		require.NoError(t, err)
		assert.False(t, locked)
	})
}

func TestReentrancy(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		name := redistest.Prefix(t) + "lock"
		m, other := newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt)
		require.NoError(t, m.Lock(ctx))
		ok, err := m.TryLock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = m.TryLockFor(ctx, time.Second, 0)
		require.NoError(t, err)
		assert.True(t, ok)
		n, err := m.HoldCount(ctx)
		require.NoError(t, err)
		assert.Equal(t, 3, n)
		ok, err = other.TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok)
		for i := 0; i < 3; i++ {
			require.NoError(t, m.Unlock(ctx))
		}
		err = m.Unlock(ctx)
		assert.True(t, errors.Is(err, fair.ErrNotHeld), "H4: unlocking a free fair lock is an error: %v", err)
	})
}

// recordMessages subscribes to every channel of the lock and records what
// is published. The function it returns publishes a marker on a channel of
// the lock that nobody else listens to and waits (up to 10 s) until the
// marker is recorded: Redis delivers one subscriber's messages in publish
// order, so by then everything published before the call is recorded, and
// nothing still on its way can be missed. It returns the record, markers
// left out.
func recordMessages(t testing.TB, rdb *redis.Client, name string) func() []string {
	t.Helper()
	channel := wire.KeysFor(name).Channel
	ps := rdb.PSubscribe(context.Background(), channel+"*")
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(context.Background()) // the confirmation
	require.NoError(t, err)
	var mu sync.Mutex
	var got []string
	go func() {
		for msg := range ps.Channel() {
			mu.Lock()
			got = append(got, msg.Channel+"="+msg.Payload)
			mu.Unlock()
		}
	}()
	markers := map[string]bool{}
	return func() []string {
		t.Helper()
		marker := channel + ":test-marker:" + strconv.Itoa(len(markers)+1)
		markers[marker+"=mark"] = true
		require.NoError(t, rdb.Publish(context.Background(), marker, "mark").Err())
		var out []string
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			out = out[:0]
			for _, m := range got {
				if m == marker+"=mark" {
					return true
				}
				if !markers[m] {
					out = append(out, m)
				}
			}
			return false
		}, 10*time.Second, time.Millisecond, "the marker published on %s never came back", marker)
		return out
	}
}

// A release wakes the head and the waiter behind it (the head to take the
// lock, the second to prune the head if it is dead), and the lock's plain
// channel (reentrant waiters of the same name) unless it grants the lock
// directly (issue 33: the lock is held again); a take wakes the new head and
// the new second. Nobody further back is ever woken. A waiter woken while
// the lock is held (after a take), or the second when the lock is freed,
// gets a note, the reply its attempt would get, and a release grants the
// free lock to the head directly (a grant message), on both engines: this
// library's clients' ids are version-8 UUIDs (issue 33; Java's, version 4,
// get Redisson's "0" and take the lock themselves: the property tests).
func TestWakeUpsReachOnlyTheFrontOfTheQueue(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		messages := recordMessages(t, b.Client(t), name)
		c := newClient(t, b.Client(t))
		holder := newMutex(t, c, name, e.opt)
		require.NoError(t, holder.Lock(ctx))
		var ms []*fair.Mutex
		res := make(chan error, 3)
		for i := 0; i < 3; i++ {
			m := newMutex(t, c, name, e.opt)
			ms = append(ms, m)
			go func() {
				err := m.Lock(ctx)
				res <- err
			}()
			e.waitQueued(t, rdb, name, i+1)
		}
		k := wire.KeysFor(name)
		plain, w0, w1, w2 := k.Channel+"=0", k.WaiterChannel(ms[0].Owner())+"=0",
			k.WaiterChannel(ms[1].Owner())+"=0", k.WaiterChannel(ms[2].Owner())+"=0"
		require.NoError(t, holder.Unlock(ctx))
		require.NoError(t, <-res) // the head got it
		held, err := ms[0].IsHeld(ctx)
		require.NoError(t, err)
		assert.True(t, held)
		grant := func(w string) string { return strings.TrimSuffix(w, "=0") + "=g" }
		// a wake-up that carries its reply, with the waiter's place (its
		// sleep, a PTTL, left out)
		note := func(w string, ahead int) string { return strings.TrimSuffix(w, "=0") + "=s:" + strconv.Itoa(ahead) }
		// The release grants the lock to the head (its grant message, and
		// nothing on the plain channel: the lock is held again) and wakes
		// the new first two once (they moved up), with the reply their
		// attempt would get, since the lock is held; nobody runs a script.
		want := []string{grant(w0), note(w1, 0), note(w2, 1)}
		raw := messages
		messages = func() []string {
			out := raw()
			for i, m := range out {
				ch, p, _ := strings.Cut(m, "=")
				if strings.HasPrefix(p, "g:") {
					out[i] = ch + "=g"
				}
				if n, ok := wire.ParseNote(p); ok {
					out[i] = ch + "=s:" + strconv.FormatInt(n.Ahead, 10)
				}
			}
			return out
		}
		require.Eventually(t, func() bool { return len(messages()) >= len(want) }, 10*time.Second, time.Millisecond)
		assert.Equal(t, want, messages())
		require.NoError(t, ms[0].Unlock(ctx))
		require.NoError(t, <-res)
		require.NoError(t, ms[1].Unlock(ctx))
		require.NoError(t, <-res)
		require.NoError(t, ms[2].Unlock(ctx))
		want = append(want,
			grant(w1), note(w2, 0), // m0 releases, granting m1: m2 is the new head
			grant(w2), // m1 releases, granting m2
			plain)     // m2 releases: nobody is queued
		require.Eventually(t, func() bool { return len(messages()) >= len(want) }, 10*time.Second, time.Millisecond)
		assert.Equal(t, want, messages())
	})
}

func TestForceUnlockWakesTheHead(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		holder, waiter, admin := newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt)
		require.NoError(t, holder.LockWithLease(ctx, time.Minute))
		res := make(chan error, 1)
		go func() { res <- waiter.Lock(ctx) }()
		e.waitQueued(t, rdb, name, 1)
		ok, err := admin.ForceUnlock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		require.NoError(t, <-res, "the head must be woken (its lease poll is a minute away)")
		require.NoError(t, waiter.Unlock(ctx))
	})
}

func TestWaitRunsOutLeavesQueue(t *testing.T) {
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		holder, waiter := newMutex(t, c, name, e.opt), newMutex(t, c, name, e.opt)
		require.NoError(t, holder.Lock(ctx))
		ok, err := waiter.TryLockFor(ctx, 100*time.Millisecond, 0)
		require.NoError(t, err)
		assert.False(t, ok)
		k := wire.KeysFor(name)
		assert.Zero(t, rdb.Exists(ctx, k.Queue, k.Timeouts, k.ScalableQueue()).Val(), "the waiter left the queue")
		require.NoError(t, holder.Unlock(ctx))
	})
}

// cancelAfterHook lets a script run on the server and then reports the
// caller's context as cancelled: a waiter cancelled while being granted.
type cancelAfterHook struct {
	armed  *atomic.Bool
	cancel context.CancelFunc
}

func (h cancelAfterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cancelAfterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// The script ran (not a reply the library sends it again after,
		// wire.NotRun): the caller sees a cancellation instead.
		if _, isScript := wire.ScriptCall(cmd); isScript && err == nil && h.armed.CompareAndSwap(true, false) {
			h.cancel()
			return ctx.Err()
		}
		return err
	}
}
func (h cancelAfterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// slowAbandonHook holds back each abandon.lua call by d: the give-back of
// an abandoned acquisition then runs after whatever the caller does next.
type slowAbandonHook struct{ d time.Duration }

func (h slowAbandonHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowAbandonHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	abandon := wire.Default().Script(wire.FileAbandon)
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && (args[1] == abandon.Hash() || strings.Contains(fmt.Sprint(args[1]), "abandon.lua")) {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}
func (h slowAbandonHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestCanceledWhileGrantedReleases(t *testing.T) {
	redistest.Long(t)
	eachEngine(t, func(t *testing.T, b *redistest.Backend, e engineCase) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		wctx, cancel := context.WithCancel(ctx)
		armed := &atomic.Bool{}
		waiterRDB := b.Client(t)
		waiterRDB.AddHook(cancelAfterHook{armed: armed, cancel: cancel})
		waiterRDB.AddHook(slowAbandonHook{200 * time.Millisecond})
		c := newClient(t, waiterRDB)
		m := newMutex(t, c, name, e.opt)
		armed.Store(true)
		err := m.Lock(wctx) // the script takes the lock, the caller sees a cancellation
		assert.True(t, errors.Is(err, context.Canceled), "%v", err)
		// The caller was told it does not hold the lock: its Unlock must
		// say so, not release the hold the give-back is about to return.
		require.True(t, rdb.HExists(ctx, name, m.Owner()).Val(), "the script took the lock (the case this test is about)")
		assert.ErrorIs(t, m.Unlock(ctx), fair.ErrNotHeld)
		k := wire.KeysFor(name)
		// The call returned when its ctx ended; the hold the script took is
		// given back in the background, at once.
		assert.Eventually(t, func() bool {
			return rdb.Exists(ctx, k.Name, k.Queue, k.Timeouts, k.ScalableQueue()).Val() == 0
		}, 10*time.Second, time.Millisecond, "never a lock held by nobody")
	})
}

func TestBadInput(t *testing.T) {
	b := redistest.Mini(t)
	c := newClient(t, b.Client(t))
	ctx := testCtx(t)
	_, err := fair.New(c, "x", fair.WithWaitSlot(0))
	assert.True(t, errors.Is(err, fair.ErrInvalidValue), "%v", err)
	_, err = fair.New(c, "x", fair.WithWaitSlot(-time.Second))
	assert.True(t, errors.Is(err, fair.ErrInvalidValue), "%v", err)
	_, err = fair.New(c, "")
	assert.True(t, errors.Is(err, fair.ErrInvalidName), "%v", err)
	_, err = fair.New(c, "a{b")
	assert.True(t, errors.Is(err, fair.ErrInvalidName), "%v", err)
	m := newMutex(t, c, "x")
	_, err = m.Acquire(ctx, fair.AcquireOptions{Slot: -time.Second})
	assert.True(t, errors.Is(err, fair.ErrInvalidValue), "%v", err)
	_, err = m.TryLockFor(ctx, -time.Second, 0)
	assert.True(t, errors.Is(err, fair.ErrInvalidValue), "%v", err)
	assert.True(t, errors.Is(m.LockWithLease(ctx, -time.Second), fair.ErrInvalidValue))
	_, err = m.Acquire(ctx, fair.AcquireOptions{Wait: fair.Forever, Lease: -time.Second})
	assert.True(t, errors.Is(err, fair.ErrInvalidValue), "%v", err)
	assert.Empty(t, b.Mini.Keys())
}

// The Redisson-compatible engine refuses to acquire a lock whose queue the
// scalable engine keeps, before writing anything (the scalable engine
// refuses the reverse: see scalable_test.go).
func TestRedissonEngineRefusesScalableQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "lock"
		c := newClient(t, b.Client(t))
		holder := newMutex(t, c, name, fair.WithEngine(fair.Scalable))
		require.NoError(t, holder.LockWithLease(ctx, time.Minute))
		waiter := newMutex(t, c, name, fair.WithEngine(fair.Scalable))
		wctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() { res <- waiter.Lock(wctx) }()
		k := wire.KeysFor(name)
		require.Eventually(t, func() bool { return rdb.Exists(ctx, k.ScalableQueue()).Val() == 1 }, 10*time.Second, time.Millisecond)

		before, err := rdb.Keys(ctx, "*"+name+"*").Result()
		require.NoError(t, err)
		other := newMutex(t, c, name) // the default, Redisson-compatible engine
		_, err = other.TryLock(ctx)
		assert.True(t, errors.Is(err, fair.ErrMixedEngines), "%v", err)
		_, err = other.TryLockFor(ctx, 10*time.Millisecond, 0)
		assert.True(t, errors.Is(err, fair.ErrMixedEngines), "%v", err)
		// Releasing is never refused (a holder must always be able to
		// release): this handle holds nothing, so nothing changes.
		assert.True(t, errors.Is(other.Unlock(ctx), fair.ErrNotHeld))
		after, err := rdb.Keys(ctx, "*"+name+"*").Result()
		require.NoError(t, err)
		assert.ElementsMatch(t, before, after, "nothing written")
		assert.Zero(t, rdb.Exists(ctx, k.Queue, k.Timeouts).Val())

		cancel()
		<-res
		require.NoError(t, holder.Unlock(ctx))
	})
}

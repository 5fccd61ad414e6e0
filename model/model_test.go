package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const t0 int64 = 1_700_000_000_000 // a client clock reading, Unix ms

// The verified numbers of the reference, §5.4: a holder with a 30 s lease,
// waiters joining with a 5 s slot.
func TestFairVerifiedNumbers(t *testing.T) {
	l := New("seats")
	ok, _ := l.FairTryLockWait(0, t0, "h", 30000, 5000, 0)
	require.True(t, ok)

	// 1. Successive joins are told 30000, 35000, 40000, 45000.
	for i, w := range []string{"w1", "w2", "w3", "w4"} {
		ok, ttl := l.FairTryLockWait(0, t0, w, 30000, 5000, 0)
		require.False(t, ok)
		assert.Equal(t, int64(30000+5000*i), ttl, w)
	}
	assert.Equal(t, []string{"w1", "w2", "w3", "w4"}, l.Queue)
	assert.Equal(t, map[string]int64{"w1": t0 + 35000, "w2": t0 + 40000, "w3": t0 + 45000, "w4": t0 + 50000}, l.Deadlines)

	// 2. The second waiter gives up: those behind it move up by its slot, and
	// the others' retries are told the lease, 30000.
	l.FairAcquireFailed(0, "w2", 5000)
	assert.Equal(t, map[string]int64{"w1": t0 + 35000, "w3": t0 + 40000, "w4": t0 + 45000}, l.Deadlines)
	for _, w := range []string{"w1", "w3", "w4"} {
		ok, ttl := l.FairTryLockWait(0, t0, w, 30000, 5000, 0)
		require.False(t, ok)
		assert.Equal(t, int64(30000), ttl, w)
	}
	assert.Empty(t, l.Published, "nobody is woken while the lock is held")

	// 3. The holder unlocks, which wakes the head only; the head acquires and
	// the remaining deadlines drop by its slot.
	assert.Equal(t, Released, l.FairUnlock(1000, t0+1000, "h", 30000, "r1", 20000, 0))
	assert.Equal(t, []Message{{"redisson_lock__channel:{seats}:w1", "0"}}, l.Published)
	ok, _ = l.FairTryLockWait(1000, t0+1000, "w1", 30000, 5000, 0)
	require.True(t, ok)
	assert.Equal(t, []string{"w3", "w4"}, l.Queue)
	assert.Equal(t, map[string]int64{"w3": t0 + 35000, "w4": t0 + 40000}, l.Deadlines)
	require.NoError(t, l.CheckInvariants())
}

// The waiter right behind the head re-checks at most every grace while the
// lock is held (not in Redisson); the others at the lease.
func TestFairSecondInLinePollsAtGrace(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 30000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 30000, 5000, 2000)
	l.FairTryLockWait(0, t0, "w2", 30000, 5000, 2000)
	l.FairTryLockWait(0, t0, "w3", 30000, 5000, 2000)
	for w, want := range map[string]int64{"w1": 30000, "w2": 2000, "w3": 30000} {
		_, ttl := l.FairTryLockWait(0, t0, w, 30000, 5000, 2000)
		assert.Equal(t, want, ttl, w)
	}
	// A lease shorter than the grace: the lease.
	l.Renew(0, "h", 1500)
	_, ttl := l.FairTryLockWait(0, t0, "w2", 30000, 5000, 2000)
	assert.Equal(t, int64(1500), ttl)
}

func TestFairPruneDeadHeadsOnly(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0) // deadline t0+15000
	l.FairTryLockWait(0, t0, "w2", 10000, 1000, 0) // t0+16000
	l.FairTryLockWait(0, t0, "w3", 10000, 5000, 0) // t0+21000
	// At t0+16000 the first two are dead; nobody else's deadline moves.
	ok := l.FairTryLock(0, t0+16000, "x", 10000, 5000)
	assert.False(t, ok)
	assert.Equal(t, []string{"w3"}, l.Queue)
	assert.Equal(t, map[string]int64{"w3": t0 + 21000}, l.Deadlines)
	// A deadline exactly at now is dead.
	l.FairTryLock(0, t0+21000, "x", 10000, 5000)
	assert.Empty(t, l.Queue)
}

// H1: a head with no deadline (keys edited by hand) is pruned, not obeyed.
func TestFairHeadWithoutDeadlineIsPruned(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w2", 10000, 5000, 0)
	delete(l.Deadlines, "w1")
	require.Error(t, l.CheckInvariants())
	l.ForceUnlock(0) // the reentrant script does not touch the queue
	ok, _ := l.FairTryLockWait(0, t0, "w2", 10000, 5000, 0)
	assert.True(t, ok)
	assert.Empty(t, l.Queue)
	require.NoError(t, l.CheckInvariants())
}

// H2 and the head grace: a queued waiter polling a free lock gives the head
// its grace and waits until the head's deadline, never 0.
func TestFairQueuedWaiterOnFreeLock(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0) // t0+15000
	l.FairTryLockWait(0, t0, "w2", 10000, 5000, 0) // t0+20000
	l.Advance(10000)                               // the lease ends; no message
	require.False(t, l.Locked())

	_, ttl := l.FairTryLockWait(10000, t0+10000, "w2", 10000, 5000, 0)
	assert.Equal(t, int64(5000), ttl, "without grace: until the head's deadline")
	_, ttl = l.FairTryLockWait(10000, t0+10000, "w2", 10000, 5000, 1000)
	assert.Equal(t, int64(1000), ttl, "with grace: the head's deadline is lowered first")
	assert.Equal(t, t0+11000, l.Deadlines["w1"])
	_, ttl = l.FairTryLockWait(10000, t0+10999, "w2", 10000, 5000, 1000)
	assert.Equal(t, int64(1), ttl, "at least 1, never Redisson's busy-poll 0")
	assert.Empty(t, l.Published)
}

// H4: unlocking a lock that is gone replies NotHeld, unlatched, and still
// hands over to the head.
func TestFairUnlockOfVanishedLock(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0) // t0+15000
	l.Advance(10000)
	assert.Equal(t, NotHeld, l.FairUnlock(10000, t0+10000, "h", 10000, "r", 20000, 3000))
	assert.Empty(t, l.Latches)
	assert.Equal(t, t0+13000, l.Deadlines["w1"])
	assert.Equal(t, []Message{{"redisson_lock__channel:{x}:w1", "0"}}, l.Published)
}

func TestFairAcquireFailed(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0) // t0+15000
	l.FairTryLockWait(0, t0, "w2", 10000, 3000, 0) // t0+18000
	l.FairTryLockWait(0, t0, "w3", 10000, 4000, 0) // t0+22000

	l.FairAcquireFailed(0, "w2", 3000)
	assert.Equal(t, map[string]int64{"w1": t0 + 15000, "w3": t0 + 19000}, l.Deadlines)
	assert.Empty(t, l.Published, "the lock is held: no message")
	l.FairAcquireFailed(0, "w2", 3000) // idempotent
	l.FairAcquireFailed(0, "nobody", 3000)
	assert.Equal(t, map[string]int64{"w1": t0 + 15000, "w3": t0 + 19000}, l.Deadlines)

	// The head leaves while the lock is free: the new head is woken.
	l.ForceUnlock(0)
	l.FairAcquireFailed(0, "w1", 5000)
	assert.Equal(t, map[string]int64{"w3": t0 + 14000}, l.Deadlines)
	assert.Equal(t, []Message{
		{"redisson_lock__channel:{x}", "0"},    // the reentrant forceUnlock above,
		{"redisson_lock__channel:{x}:w1", "0"}, // which also wakes the fair head
		{"redisson_lock__channel:{x}:w3", "0"},
	}, l.Published)
}

// A free lock with a live waiter queued is the waiter's: a newcomer fails
// (without queueing) or queues behind.
func TestFairFreeLockBelongsToTheHead(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0)
	assert.True(t, l.FairForceUnlock(0, t0, 0))
	assert.False(t, l.FairTryLock(0, t0, "n", 10000, 5000))
	ok, ttl := l.FairTryLockWait(0, t0, "n", 10000, 5000, 0)
	assert.False(t, ok)
	assert.Equal(t, int64(15000), ttl)
	assert.Equal(t, []string{"w1", "n"}, l.Queue)
	assert.True(t, l.FairTryLock(0, t0, "w1", 10000, 5000))
	assert.Equal(t, map[string]int64{"n": t0 + 15000}, l.Deadlines)
}

func TestReentrant(t *testing.T) {
	l := New("{tag}:x")
	ok, _ := l.Acquire(0, "a", 10000)
	require.True(t, ok)
	ok, ttl := l.Acquire(3000, "b", 10000)
	assert.False(t, ok)
	assert.Equal(t, int64(7000), ttl)
	ok, _ = l.Acquire(3000, "a", 5000) // re-entry resets the lease
	require.True(t, ok)
	assert.Equal(t, int64(5000), l.PTTL(3000))

	assert.Equal(t, NotHeld, l.Unlock(3000, "b", 10000, "r0", 20000))
	assert.Equal(t, StillHeld, l.Unlock(3000, "a", 10000, "r1", 20000))
	assert.Equal(t, int64(10000), l.PTTL(3000))
	assert.Equal(t, StillHeld, l.Unlock(3000, "a", 10000, "r1", 20000), "a retry returns the latched reply")
	assert.Equal(t, int64(1), l.Holds["a"])
	assert.Equal(t, Released, l.Unlock(3000, "a", 10000, "r2", 20000))
	assert.Equal(t, []Message{{"redisson_lock__channel:{tag}:x", "0"}}, l.Published)
	assert.Equal(t, Released, l.Unlock(22999, "a", 10000, "r2", 20000))
	assert.Equal(t, NotHeld, l.Unlock(23000, "a", 10000, "r2", 20000), "the latch has expired")

	assert.False(t, l.Renew(0, "a", 100))
	l.Acquire(30000, "a", 100)
	assert.True(t, l.Renew(30050, "a", 100))
	assert.False(t, l.Renew(30150, "a", 100), "the lease ended at 30150")
	assert.False(t, l.ForceUnlock(30150))
}

func TestHistoryCatchesViolations(t *testing.T) {
	l := New("x")
	var h History
	join := func(owner string) {
		before := l.Clone()
		ok, _ := l.FairTryLockWait(0, t0, owner, 10000, 5000, 0)
		require.NoError(t, h.Observe(Step{Op: OpFairTryLockWait, Owner: owner, Now: t0, WaitMs: 5000, Acquired: ok, Before: before, After: l.Clone()}))
	}
	join("h")
	join("w1")
	join("w2")

	// w2 jumps the live head w1.
	before := l.Clone()
	after := l.Clone()
	clear(after.Holds)
	after.Holds["w2"] = 1
	after.Queue = []string{"w1"}
	delete(after.Deadlines, "w2")
	err := h.Observe(Step{Op: OpFairTryLockWait, Owner: "w2", Now: t0, Acquired: true, Before: before, After: after,
		Published: []Message{{"redisson_lock__channel:{x}:w2", "0"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "past live waiter w1")
	assert.Contains(t, err.Error(), "out of enqueue order")
	assert.Contains(t, err.Error(), "notified redisson_lock__channel:{x}:w2, but the head is w1")

	bad := l.Clone()
	bad.Queue = []string{"w2", "w1"}
	assert.ErrorContains(t, new(History).Observe(Step{Op: OpTime, Before: l, After: bad}), "is not removals and an append")

	bad = l.Clone()
	bad.Deadlines["w1"] = t0 + 99999
	assert.ErrorContains(t, new(History).Observe(Step{Op: OpTime, Before: l, After: bad}), "deadlines out of order")

	bad.Holds["other"] = 0
	assert.Error(t, bad.CheckInvariants())
}

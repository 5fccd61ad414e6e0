package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const t0 int64 = 1_700_000_000_000 // a client clock reading, Unix ms

// The verified numbers of the reference, §5.4: a holder with a 30 s lease,
// waiters joining with a 5 s slot. The deadlines are Redisson's; the replies
// are ours (Redisson tells a new waiter the tail's time left: 30000, 35000,
// 40000, 45000; here every waiter is told to sleep until the lease ends).
func TestFairVerifiedNumbers(t *testing.T) {
	l := New("seats")
	ok, _ := l.FairTryLockWait(0, t0, "h", 30000, 5000, 0)
	require.True(t, ok)

	// 1. Successive joins: deadlines one slot apart.
	for _, w := range []string{"w1", "w2", "w3", "w4"} {
		ok, ttl := l.FairTryLockWait(0, t0, w, 30000, 5000, 0)
		require.False(t, ok)
		assert.Equal(t, int64(30000), ttl, w)
	}
	assert.Equal(t, []string{"w1", "w2", "w3", "w4"}, l.Queue)
	assert.Equal(t, map[string]int64{"w1": t0 + 35000, "w2": t0 + 40000, "w3": t0 + 45000, "w4": t0 + 50000}, l.Deadlines)
	assert.Empty(t, l.Published)

	// 2. The second waiter gives up: those behind it move up by its slot,
	// and the others' retries are told the lease, 30000. w3, now behind the
	// head, is woken.
	l.FairAcquireFailed(0, "w2", 5000, 0)
	assert.Equal(t, map[string]int64{"w1": t0 + 35000, "w3": t0 + 40000, "w4": t0 + 45000}, l.Deadlines)
	for _, w := range []string{"w1", "w3", "w4"} {
		ok, ttl := l.FairTryLockWait(0, t0, w, 30000, 5000, 0)
		require.False(t, ok)
		assert.Equal(t, int64(30000), ttl, w)
	}
	assert.Equal(t, []Message{{"redisson_lock__channel:{seats}:w3", "0"}}, l.Published)

	// 3. The holder unlocks, which wakes the lock channel, the head and the
	// waiter behind it; the head acquires, the remaining deadlines drop by
	// its slot, and the new head and second are woken.
	l.Published = nil
	assert.Equal(t, Released, l.FairUnlock(1000, t0+1000, "h", 30000, "r1", 20000, 0))
	assert.Equal(t, []Message{{"redisson_lock__channel:{seats}", "0"},
		{"redisson_lock__channel:{seats}:w1", "0"}, {"redisson_lock__channel:{seats}:w3", "0"}}, l.Published)
	ok, _ = l.FairTryLockWait(1000, t0+1000, "w1", 30000, 5000, 0)
	require.True(t, ok)
	assert.Equal(t, []string{"w3", "w4"}, l.Queue)
	assert.Equal(t, map[string]int64{"w3": t0 + 35000, "w4": t0 + 40000}, l.Deadlines)
	assert.Equal(t, []Message{{"redisson_lock__channel:{seats}:w3", "0"}, {"redisson_lock__channel:{seats}:w4", "0"}}, l.Published[3:])
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
	ok := l.FairTryLock(0, t0+16000, "x", 10000, 5000, 0)
	assert.False(t, ok)
	assert.Equal(t, []string{"w3"}, l.Queue)
	assert.Equal(t, map[string]int64{"w3": t0 + 21000}, l.Deadlines)
	// A deadline exactly at now is dead.
	l.FairTryLock(0, t0+21000, "x", 10000, 5000, 0)
	assert.Empty(t, l.Queue)
}

// Not in Redisson: a caller is alive by definition and is never pruned by
// its own call. A head whose deadline passed takes a free lock (Redisson
// prunes it and queues it again at the tail); a waiter further back whose
// deadline passed stays in its place.
func TestFairNeverPrunesTheCaller(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0) // t0+15000
	l.FairTryLockWait(0, t0, "w2", 10000, 5000, 0) // t0+20000
	l.FairTryLockWait(0, t0, "w3", 10000, 5000, 0) // t0+25000

	// w2's clock runs 30 s ahead: every deadline has passed for it. It
	// prunes w1 but not itself, and stays queued with its deadline.
	ok, _ := l.FairTryLockWait(0, t0+30000, "w2", 10000, 5000, 0)
	assert.False(t, ok)
	assert.Equal(t, []string{"w2", "w3"}, l.Queue)
	assert.Equal(t, t0+20000, l.Deadlines["w2"])

	// The lock becomes free; w2, the head, takes it although its deadline
	// has passed by its own clock.
	l.ForceUnlock(0)
	ok, _ = l.FairTryLockWait(0, t0+30000, "w2", 10000, 5000, 0)
	assert.True(t, ok)
	assert.Equal(t, []string{"w3"}, l.Queue)
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

// H2 and the head grace: a queued waiter polling a free lock starts the
// head's grace (on the server's clock, in its own key: the deadlines never
// move) and sleeps until the head's deadline or the end of its grace, never
// 0.
func TestFairQueuedWaiterOnFreeLock(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0) // t0+15000
	l.FairTryLockWait(0, t0, "w2", 10000, 5000, 0) // t0+20000
	l.Advance(10000)                               // the lease ends; no message
	require.False(t, l.Locked())

	_, ttl := l.FairTryLockWait(10000, t0+10000, "w2", 10000, 5000, 0)
	assert.Equal(t, int64(5000), ttl, "without grace: until the head's deadline")
	assert.Empty(t, l.Published)
	_, ttl = l.FairTryLockWait(10000, t0+10000, "w2", 10000, 5000, 1000)
	assert.Equal(t, int64(1000), ttl, "with grace: until the grace ends")
	assert.Equal(t, map[string]int64{"w1": t0 + 15000, "w2": t0 + 20000}, l.Deadlines, "the deadlines never move")
	owner, left, ok := l.Grace(10000)
	assert.True(t, ok)
	assert.Equal(t, "w1", owner)
	assert.Equal(t, int64(1000), left)
	assert.Equal(t, []Message{{"redisson_lock__channel:{x}:w1", "0"}}, l.Published, "the head is told its grace started")
	_, ttl = l.FairTryLockWait(10999, t0+10000, "w2", 10000, 5000, 1000)
	assert.Equal(t, int64(1), ttl, "at least 1, never Redisson's busy-poll 0")

	// The grace runs out: w2 does not prune w1 yet (the grace may have run
	// out while w1 could not reach Redis: issue 19) but starts w1's second
	// grace and wakes it.
	l.Published = nil
	ok, ttl = l.FairTryLockWait(11000, t0, "w2", 10000, 5000, 1000)
	assert.False(t, ok)
	assert.Equal(t, int64(1000), ttl, "until the second grace ends")
	assert.Equal(t, []string{"w1", "w2"}, l.Queue)
	assert.True(t, l.GraceSecond)
	assert.Equal(t, []Message{{"redisson_lock__channel:{x}:w1", "0"}}, l.Published, "the head is told its second grace started")
	ok, _ = l.FairTryLockWait(11999, t0, "w2", 10000, 5000, 1000)
	assert.False(t, ok, "w1 keeps its place during its second grace")

	// The second grace runs out: w2 prunes w1 and takes the lock, whatever
	// its client clock says.
	ok, _ = l.FairTryLockWait(12000, t0, "w2", 10000, 5000, 1000)
	assert.True(t, ok)
	assert.Empty(t, l.Queue)
	assert.Empty(t, l.GraceOwner, "the grace goes with its head")
}

// Issue 19, case 4, at the script level: the head's grace runs out while no
// script can run (CLIENT PAUSE WRITE); when writes resume, the follower's
// held-back attempt runs first. It must not prune the head, whose own
// held-back attempt, next, takes the lock.
func TestFairGraceRunOutDuringPauseKeepsTheHead(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 60000, 90000, 5000)
	l.FairTryLockWait(0, t0, "a", 60000, 90000, 5000)
	l.FairTryLockWait(0, t0, "b", 60000, 90000, 5000)
	l.FairForceUnlock(100, t0+100, 5000) // a's grace until 5100
	ok, _ := l.FairTryLockWait(8100, t0+8100, "b", 60000, 90000, 5000)
	assert.False(t, ok, "b took the lock past the head a")
	ok, _ = l.FairTryLockWait(8100, t0+8100, "a", 60000, 90000, 5000)
	assert.True(t, ok)
	assert.Equal(t, []string{"b"}, l.Queue)
}

// Case 1 of the liveness issue, at the script level: 101 holds with a short
// lease, 102 and 103 are queued. After the lease ends 103 polls first and is
// told to sleep until the head's grace ends; 102 then takes the lock: 103 is
// woken (it must learn the new lease, not sleep the grace out).
func TestFairTakeWakesTheNewHead(t *testing.T) {
	for _, grace := range []int64{0, 5000} {
		l := New("x")
		l.FairTryLockWait(0, t0, "101", 300, 10000, grace)
		l.FairTryLockWait(100, t0+100, "102", 1000, 10000, grace)
		l.FairTryLockWait(200, t0+200, "103", 1000, 10000, grace)
		l.Published = nil
		_, ttl := l.FairTryLockWait(300, t0+300, "103", 1000, 10000, grace)
		assert.LessOrEqual(t, ttl, max(grace, 10000))
		ok, _ := l.FairTryLockWait(300, t0+300, "102", 1000, 10000, grace)
		require.True(t, ok)
		assert.Contains(t, l.Published, Message{"redisson_lock__channel:{x}:103", "0"}, "grace %d", grace)
		_, ttl = l.FairTryLockWait(300, t0+300, "103", 1000, 10000, grace)
		assert.Equal(t, int64(1000), ttl, "the new hold's lease")
	}
}

// H4: unlocking a lock that is gone replies NotHeld, unlatched, and still
// wakes as a release does, after starting the head's grace.
func TestFairUnlockOfVanishedLock(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0) // t0+15000
	l.Advance(10000)
	assert.Equal(t, NotHeld, l.FairUnlock(10000, t0+10000, "h", 10000, "r", 20000, 3000))
	assert.Empty(t, l.Latches)
	assert.Equal(t, t0+15000, l.Deadlines["w1"])
	owner, left, _ := l.Grace(10000)
	assert.Equal(t, "w1", owner)
	assert.Equal(t, int64(3000), left)
	assert.Equal(t, []Message{{"redisson_lock__channel:{x}", "0"}, {"redisson_lock__channel:{x}:w1", "0"}}, l.Published)
}

func TestFairAcquireFailed(t *testing.T) {
	l := New("x")
	l.FairTryLockWait(0, t0, "h", 10000, 5000, 0)
	l.FairTryLockWait(0, t0, "w1", 10000, 5000, 0) // t0+15000
	l.FairTryLockWait(0, t0, "w2", 10000, 3000, 0) // t0+18000
	l.FairTryLockWait(0, t0, "w3", 10000, 4000, 0) // t0+22000

	l.FairAcquireFailed(0, "w2", 3000, 0)
	assert.Equal(t, map[string]int64{"w1": t0 + 15000, "w3": t0 + 19000}, l.Deadlines)
	assert.Equal(t, []Message{{"redisson_lock__channel:{x}:w3", "0"}}, l.Published, "w3 moved behind the head")
	l.FairAcquireFailed(0, "w2", 3000, 0) // idempotent
	l.FairAcquireFailed(0, "nobody", 3000, 0)
	assert.Equal(t, map[string]int64{"w1": t0 + 15000, "w3": t0 + 19000}, l.Deadlines)
	assert.Len(t, l.Published, 1)

	// The head leaves while the lock is free: the new head is woken.
	l.ForceUnlock(0)
	l.FairAcquireFailed(0, "w1", 5000, 0)
	assert.Equal(t, map[string]int64{"w3": t0 + 14000}, l.Deadlines)
	assert.Equal(t, []Message{
		{"redisson_lock__channel:{x}:w3", "0"},
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
	assert.False(t, l.FairTryLock(0, t0, "n", 10000, 5000, 0))
	ok, ttl := l.FairTryLockWait(0, t0, "n", 10000, 5000, 0)
	assert.False(t, ok)
	assert.Equal(t, int64(15000), ttl)
	assert.Equal(t, []string{"w1", "n"}, l.Queue)
	assert.True(t, l.FairTryLock(0, t0, "w1", 10000, 5000, 0))
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
		ok, ttl := l.FairTryLockWait(0, t0, owner, 10000, 5000, 0)
		require.NoError(t, h.Observe(Step{Op: OpFairTryLockWait, Owner: owner, Now: t0, WaitMs: 5000, Acquired: ok, Reply: ttl,
			Before: before, After: l.Clone(), Published: l.Published[len(before.Published):]}))
	}
	join("h")
	join("w1")
	join("w2")

	// w2 jumps the live head w1, and wakes itself.
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
	assert.Contains(t, err.Error(), "woke the caller w2")

	bad := l.Clone()
	bad.Queue = []string{"w2", "w1"}
	assert.ErrorContains(t, new(History).Observe(Step{Op: OpTime, Before: l, After: bad}), "is not removals and an append")

	bad = l.Clone()
	bad.Deadlines["w1"] = t0 + 99999
	assert.ErrorContains(t, new(History).Observe(Step{Op: OpTime, Before: l, After: bad}), "deadlines out of order")
	assert.ErrorContains(t, new(History).Observe(Step{Op: OpTime, Before: l, After: bad}), "the deadline of w1 moved by")

	bad.Holds["other"] = 0
	assert.Error(t, bad.CheckInvariants())
}

// The liveness checks of History catch case 1 of the liveness issue: a take
// that does not wake the new head, which then sleeps past the lease of the
// new hold.
func TestHistoryCatchesAnOversleepingHead(t *testing.T) {
	l := New("x")
	var h History
	server := int64(0)
	step := func(op Op, owner string, f func() (bool, int64)) error {
		before := l.Clone()
		ok, ttl := f()
		return h.Observe(Step{Op: op, Owner: owner, Server: server, Now: t0 + server, WaitMs: 10000, GraceMs: 5000,
			Acquired: ok, Reply: ttl, Before: before, After: l.Clone(), Published: l.Published[len(before.Published):]})
	}
	tryWait := func(owner string, lease int64) func() (bool, int64) {
		return func() (bool, int64) { return l.FairTryLockWait(server, t0+server, owner, lease, 10000, 5000) }
	}
	require.NoError(t, step(OpFairTryLockWait, "101", tryWait("101", 300)))
	require.NoError(t, step(OpFairTryLockWait, "102", tryWait("102", 1000)))
	require.NoError(t, step(OpFairTryLockWait, "103", tryWait("103", 1000)))
	server = 300 // the lease ends
	l.Advance(server)
	require.NoError(t, step(OpFairTryLockWait, "103", tryWait("103", 1000)))
	// 102 takes the lock, and (the bug) nobody is told.
	before := l.Clone()
	ok, _ := l.FairTryLockWait(server, t0+server, "102", 1000, 10000, 5000)
	require.True(t, ok)
	err := h.Observe(Step{Op: OpFairTryLockWait, Owner: "102", Server: server, Now: t0 + server, WaitMs: 10000, GraceMs: 5000,
		Acquired: true, Before: before, After: l.Clone()})
	require.ErrorContains(t, err, "103 became the head and was not woken")
	// 103 sleeps on past the new lease.
	server = 1300
	before = l.Clone()
	l.Advance(server)
	err = h.Observe(Step{Op: OpTime, Server: server, Before: before, After: l.Clone()})
	require.ErrorContains(t, err, "103 sleeps until 5300, but it is the head of a free lock at 1300")
}

// CheckSleepMessage is the promise a wake-up that carries its reply keeps
// (issue 23); each wrong message below breaks one part of it.
func TestCheckSleepMessage(t *testing.T) {
	l := New("lk")
	l.Handoff = true
	const server = int64(1_000)
	l.Holds["h:1"] = 1
	l.LeaseEnd = server + 8_000
	l.Queue = []string{"a:1", "b:1", "c:1"}
	l.Seqs = map[string]int64{"a:1": 4, "b:1": 5, "c:1": 7} // one gap between b and c
	const grace = 2_000
	require.NoError(t, CheckSleepMessage(l, server, "a:1", SleepMessage(8_000, 0), grace, 0))
	require.NoError(t, CheckSleepMessage(l, server, "b:1", SleepMessage(2_000, 1), grace, 0))
	require.NoError(t, CheckSleepMessage(l, server, "b:1", SleepMessage(8_000, 1), 0, 0), "no grace: the PTTL bounds it")
	for _, c := range []struct {
		owner, payload, want string
		grace                int64
	}{
		{"b:1", SleepMessage(8_000, 1), "beyond the grace", grace},
		{"a:1", SleepMessage(8_001, 0), "past the lock's expiry", grace},
		{"a:1", SleepMessage(-1, 0), "negative sleep", grace},
		{"c:1", SleepMessage(1_000, 3), "not at the front", grace},
		{"a:1", SleepMessage(1_000, 1), "place in the queue says 0", grace},
		{"a:1", "s:1000", "malformed", grace},
	} {
		assert.ErrorContains(t, CheckSleepMessage(l, server, c.owner, c.payload, c.grace, 0), c.want, c.payload)
	}
	free := l.Clone()
	clear(free.Holds)
	assert.ErrorContains(t, CheckSleepMessage(free, server, "a:1", SleepMessage(1, 0), grace, 0), "while the lock is free")
	forever := l.Clone()
	forever.LeaseEnd = NoExpiry
	require.NoError(t, CheckSleepMessage(forever, server, "a:1", SleepMessage(NoExpiry, 0), grace, 0))
	assert.ErrorContains(t, CheckSleepMessage(forever, server, "b:1", SleepMessage(NoExpiry, 1), grace, 0), "beyond the grace")
	// The Redisson engine: notes only to this library's clients (version-8
	// UUIDs), and the place is the exact one (LPOS), not the join sequence's.
	const goA, goC = "0000000a-0000-8000-8000-00000000000a:1", "0000000c-0000-8abc-8000-00000000000c:9"
	r := New("lk")
	r.Holds["h:1"] = 1
	r.LeaseEnd = server + 8_000
	r.Queue = []string{goA, "java:1", goC}
	r.Seqs = map[string]int64{goA: 4, "java:1": 5, goC: 7}
	require.NoError(t, CheckSleepMessage(r, server, goA, SleepMessage(8_000, 0), grace, 0))
	r.Queue = []string{"java:1", goC}
	require.NoError(t, CheckSleepMessage(r, server, goC, SleepMessage(2_000, 1), grace, 0))
	assert.ErrorContains(t, CheckSleepMessage(r, server, goC, SleepMessage(2_000, 2), grace, 0), "place in the queue says 1")
	assert.ErrorContains(t, CheckSleepMessage(r, server, "java:1", SleepMessage(8_000, 0), grace, 0), "a Java client reads only")
}

// TakesNotes tells this library's owner ids (version-8 UUID client ids)
// from Redisson's (version 4) and from anything else.
func TestTakesNotes(t *testing.T) {
	for owner, want := range map[string]bool{
		"0b9a8c7d-1e2f-8a3b-8c5d-6e7f8a9b0c1d:1": true,
		"0B9A8C7D-1E2F-8A3B-8C5D-6E7F8A9B0C1D:7": true,
		"0b9a8c7d-1e2f-4a3b-8c5d-6e7f8a9b0c1d:1": false, // Redisson's UUID.randomUUID
		"0b9a8c7d-1e2f-8a3b":                     false,
		"0b9a8c7d-1e2g-8a3b-8c5d-6e7f8a9b0c1d:1": false,
		"0b9a8c7d11e2f-8a3b-8c5d-6e7f8a9b0c1d:1": false,
		"cA:1":                                   false,
		"":                                       false,
	} {
		assert.Equal(t, want, TakesNotes(owner), owner)
	}
}

// A note to the waiter behind the head of a free lock whose grace runs
// (issue 33): until the grace ends, never later; to nobody else.
func TestCheckSleepMessageFreeLock(t *testing.T) {
	const server, grace = int64(1_000), int64(2_000)
	l := New("lk")
	l.Handoff = true
	l.Queue = []string{"a:1", "b:1", "c:1"}
	l.Seqs = map[string]int64{"a:1": 1, "b:1": 2, "c:1": 3}
	l.GraceOwner, l.GraceEnd = "a:1", server+1_500+GraceMargin
	require.NoError(t, CheckSleepMessage(l, server, "b:1", SleepMessage(1_500, 1), grace, 0))
	require.NoError(t, CheckSleepMessage(l, server, "b:1", SleepMessage(900, 1), grace, 0))
	assert.ErrorContains(t, CheckSleepMessage(l, server, "b:1", SleepMessage(1_501, 1), grace, 0), "past the head's grace")
	assert.ErrorContains(t, CheckSleepMessage(l, server, "a:1", SleepMessage(1_500, 0), grace, 0), "while the lock is free")
	assert.ErrorContains(t, CheckSleepMessage(l, server, "b:1", SleepMessage(1_500, 1), 0, 0), "while the lock is free")
	nograce := l.Clone()
	nograce.GraceOwner, nograce.GraceEnd = "", 0
	assert.ErrorContains(t, CheckSleepMessage(nograce, server, "b:1", SleepMessage(1_500, 1), grace, 0), "while the lock is free")
}

// A release's direct grant on the Redisson engine (issue 33): to a head of
// this library's clients only (a Java client reads only "0" on its
// channel), which then holds the lock and has left the queue, and the
// deadlines behind it drop by its slot as after its own take. History
// states it from the outside; the model's release does it.
func TestHistoryDirectGrantOnTheRedissonEngine(t *testing.T) {
	const goA = "0000000a-0000-8000-8000-00000000000a:1"
	const grace = 5_000
	for _, tc := range []struct {
		name, head string
		granted    bool
	}{
		{"this library's head is granted the lock", goA, true},
		{"a Java head takes it itself", "java:1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New("x")
			var h History
			step := func(s Step, before *Lock) {
				t.Helper()
				s.Before, s.After, s.Published = before, l.Clone(), l.Published[len(before.Published):]
				require.NoError(t, h.Observe(s))
			}
			before := l.Clone()
			ok, _, _, err := l.FairTryLockWaitRequest(0, t0, "holder:1", 30_000, 5_000, grace, "", 0)
			require.NoError(t, err)
			require.True(t, ok)
			step(Step{Op: OpFairTryLockWait, Owner: "holder:1", Now: t0, WaitMs: 5_000, GraceMs: grace, Acquired: true}, before)
			for _, w := range []string{tc.head, "java:2"} {
				before = l.Clone()
				ok, ttl, _, err := l.FairTryLockWaitRequest(0, t0, w, 30_000, 7_000, grace, "acq-"+w, 10_000)
				require.NoError(t, err)
				require.False(t, ok)
				step(Step{Op: OpFairTryLockWait, Owner: w, Now: t0, WaitMs: 7_000, GraceMs: grace, Reply: ttl}, before)
			}
			d := l.Deadlines["java:2"]
			before = l.Clone()
			require.Equal(t, Released, l.FairUnlock(10, t0+10, "holder:1", 30_000, "u1", 10_000, grace))
			release := Step{Op: OpFairUnlock, Owner: "holder:1", Server: 10, Now: t0 + 10, GraceMs: grace}
			step(release, before)
			grant := GrantMessage(l.Token, min(30_000, 2*grace), "acq-"+tc.head)
			if !tc.granted {
				assert.Equal(t, []string{tc.head, "java:2"}, l.Queue)
				assert.NotContains(t, l.Published, Message{l.names.WaiterChannel(tc.head), grant})
				return
			}
			assert.Equal(t, map[string]int64{tc.head: 1}, l.Holds)
			assert.Equal(t, []string{"java:2"}, l.Queue)
			assert.Equal(t, d-7_000, l.Deadlines["java:2"], "the grantee's slot, as after its own take")
			assert.Contains(t, l.Published, Message{l.names.WaiterChannel(tc.head), grant})

			// The same step granting a Java head (its owner id in the
			// grantee's place), or without the deadline shift, or with the
			// grantee still queued, is caught.
			rename := func(o string) string {
				if o == tc.head {
					return "java:1"
				}
				return o
			}
			after := l.Clone()
			for _, bad := range []struct {
				java bool
				edit func(a *Lock)
				want string
			}{
				{true, func(*Lock) {}, "a Java client reads only"},
				{false, func(a *Lock) { a.Deadlines["java:2"] = d }, "the deadline of java:2 moved by 0"},
				{false, func(a *Lock) { a.Queue = []string{tc.head, "java:2"} }, "still is"},
			} {
				b, a := before.Clone(), after.Clone()
				pub := slices.Clone(after.Published[len(before.Published):])
				head := tc.head
				if bad.java {
					head = "java:1"
					b.Queue[0] = head
					b.Deadlines = map[string]int64{head: before.Deadlines[tc.head], "java:2": d}
					a.Holds = map[string]int64{head: 1}
					for i, m := range pub {
						pub[i].Channel = l.names.WaiterChannel(rename(strings.TrimPrefix(m.Channel, l.names.Channel+":")))
					}
				}
				bad.edit(a)
				fresh := History{tickets: map[string]int64{head: 0, "java:2": 1}, slots: map[string]int64{head: 7_000, "java:2": 7_000},
					next: 2, alarms: map[string]alarm{}}
				s := release
				s.Before, s.After, s.Published = b, a, pub
				assert.ErrorContains(t, fresh.Observe(s), bad.want)
			}
		})
	}
}

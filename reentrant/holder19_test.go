package reentrant_test

// Holder-knows cases of issue 19: what the holder believes must never
// outlast what Redis keeps, and what it gave up must not come back. Each
// test states the promise against Redis's own state (the key's TTL, who
// else can take the lock), not against the library's bookkeeping.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
)

// believedWithinTTL checks the promise "the holder's stated validity never
// outlasts the key in Redis": ValidUntil is read first, the key's PTTL
// after, so the key lives at least until now + PTTL.
func believedWithinTTL(t *testing.T, rdb redis.UniversalClient, m *reentrant.Mutex, name, when string) {
	t.Helper()
	v := m.ValidUntil()
	pttl, err := rdb.PTTL(context.Background(), name).Result()
	require.NoError(t, err)
	keyEnd := time.Now().Add(pttl)
	assert.False(t, v.After(keyEnd), "%s: the holder believes its hold valid %v past the key's expiry (PTTL %v)",
		when, v.Sub(keyEnd).Round(time.Millisecond), pttl)
}

// (a) A renewal whose reply comes after the hold's validity ended keeps the
// owner's field in Redis although the holder was told the hold is lost.
// The handle's next Lock must then start a new hold, not re-enter the stale
// field: after its one Unlock nobody holds the lock.
func TestLockAfterALateRenewalDoesNotReenterTheStaleField(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := testCtx(t)
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: -1}) // replies are waited for, however late
	t.Cleanup(func() { _ = rdb.Close() })
	lease := 3 * time.Second
	name := redistest.Prefix(t) + "lock"
	m := newMutex(t, newClient(t, rdb, fairlock.WithLease(lease)), name)
	direct := b.Client(t)
	require.NoError(t, m.Lock(ctx))

	undo := p.StallReplies() // renewals still run in Redis; their replies are held back
	select {
	case <-m.Done():
	case <-time.After(lease + 5*time.Second):
		undo()
		t.Fatal("the holder was never told: its renewals were not confirmed")
	}
	require.ErrorIs(t, m.Err(), fairlock.ErrLost)
	undo()

	require.NoError(t, m.Lock(ctx))
	n, err := direct.HGet(ctx, name, m.Owner()).Int()
	require.NoError(t, err)
	assert.Equal(t, 1, n, "hold count in Redis after the first Lock since the loss")
	require.NoError(t, m.Unlock(ctx))
	exists, err := direct.Exists(ctx, name).Result()
	require.NoError(t, err)
	assert.Zero(t, exists, "the lock is still held after its only holder's Unlock (count %v)", direct.HGet(ctx, name, m.Owner()).Val())
}

// (b) Re-entering a watchdog-kept hold with a longer explicit lease: the
// watchdog's next renewal sets the watchdog lease again, so the holder must
// not believe in the longer one.
func TestReentryWithLongerLeaseClaimsNoMoreThanTheKey(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := testCtx(t)
	lease := 2 * time.Second
	name := redistest.Prefix(t) + "lock"
	direct := b.Client(t)
	m := newMutex(t, newClient(t, b.Client(t), fairlock.WithLease(lease)), name)
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, m.LockWithLease(ctx, 20*time.Second))
	believedWithinTTL(t, direct, m, name, "right after the re-entry")
	time.Sleep(lease) // at least one renewal ran
	believedWithinTTL(t, direct, m, name, "after a renewal")
	require.NoError(t, m.Unlock(ctx))
	require.NoError(t, m.Unlock(ctx))
}

// (b) A re-entry with a shorter lease whose reply never comes back (its ctx
// ended while Redis was stalled) still ran in Redis once the stall ended,
// and its give-back left the key with the shorter TTL: the holder must not
// go on believing in the longer lease.
func TestFailedReentryWithShorterLeaseCutsTheHoldersValidity(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	name := redistest.Prefix(t) + "lock"
	direct := b.Client(t)
	m := newMutex(t, newClient(t, rdb), name)
	require.NoError(t, m.LockWithLease(ctx, 30*time.Second))

	undo := p.Stall()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := m.LockWithLease(short, 3*time.Second)
	cancel()
	require.Error(t, err, "the re-entry cannot have been confirmed through a stall")
	undo()
	// Two things were stalled on two connections: the re-entry, and then
	// the give-back that voids its request (abandon.lua) and, when the
	// re-entry had run, unlocks once. Released together, either can reach
	// Redis first: the re-entry then runs and is given back (count 1, the
	// key cut to the shorter lease), or it finds its request void and does
	// nothing (count 1, the key as it was). Either way the holder must not
	// believe in more than the key.
	var state string
	require.Eventually(t, func() bool {
		keys, _ := direct.Keys(ctx, "fairlock_acquire_latch:{"+name+"}:*").Result()
		state = ""
		for _, k := range keys { // the first Lock's latch says "held"
			if v := direct.Get(ctx, k).Val(); strings.HasPrefix(v, "void") {
				state = v
			}
		}
		n, _ := direct.HGet(ctx, name, m.Owner()).Int()
		return n == 1 && (state == "void" || state == "void:held")
	}, 10*time.Second, 10*time.Millisecond, "the give-back of the stalled re-entry never ran")
	t.Logf("latch %q, PTTL %v", state, direct.PTTL(ctx, name).Val())
	believedWithinTTL(t, direct, m, name, "after the failed re-entry")
	select {
	case <-m.Done():
	default:
		require.NoError(t, m.Unlock(ctx))
	}
}

// (e) A lease shorter than any round trip is refused at once, and one that
// runs out before every reply ends the call with an error instead of taking
// and giving back the lock for ever.
func TestTinyLeaseIsRefusedNotSpun(t *testing.T) {
	b := redistest.Real(t)
	name := redistest.Prefix(t) + "lock"
	m := newMutex(t, newClient(t, b.Client(t)), name)
	for _, lease := range []time.Duration{time.Millisecond, 3 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		err := m.LockWithLease(ctx, lease)
		cancel()
		took := time.Since(start)
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue, "lease %v", lease)
		assert.Less(t, took, 2*time.Second, "lease %v: the call took %v", lease, took)
	}
	assert.False(t, b.Client(t).Exists(context.Background(), name).Val() == 1, "nothing is left held")
}

// (e) After a restart without persistence the holder is told as soon as
// the client's connection comes back, not at the next renewal: with the
// default 30 s lease that renewal is up to 10 s away, during which another
// owner could take the lock while the first believes it holds it.
func TestHolderToldAtOnceAfterARestart(t *testing.T) {
	srv := redistest.StartT(t)
	ctx := testCtx(t)
	name := redistest.Prefix(t) + "lock"
	m := newMutex(t, newClient(t, srv.Backend().Client(t)), name) // the default 30 s lease: renewals every 10 s
	require.NoError(t, m.Lock(ctx))
	time.Sleep(500 * time.Millisecond) // the client's connections are open (and idle)
	require.NoError(t, srv.Restart())
	restarted := time.Now()
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("the holder was not told within 5 s of the restart (Err %v)", m.Err())
	}
	t.Logf("told %v after the restart", time.Since(restarted))
	assert.ErrorIs(t, m.Err(), fairlock.ErrLost)
}

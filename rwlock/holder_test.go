package rwlock_test

// The holder knows (issue 19): what a read-write lock's client believes
// about its holds matches what Redis does with them. Each test checks the
// belief (Done, Err, IsHeld) against what another owner can do.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/rwlock"
)

// state describes the lock's keys in Redis, for failure messages.
func state(ctx context.Context, rdb redis.UniversalClient, name string) string {
	h := rdb.HGetAll(ctx, name).Val()
	s := fmt.Sprintf("hash %v pttl %v", h, rdb.PTTL(ctx, name).Val())
	for f := range h {
		for k := 1; k <= 3; k++ {
			key := wire.KeysFor(name).RWTimeoutKey(f, int64(k))
			if p := rdb.PTTL(ctx, key).Val(); p != -2*time.Nanosecond && p != -2 {
				s += fmt.Sprintf("; %s pttl %v", key, p)
			}
		}
	}
	return s
}

// waitDone waits up to d for l's hold to end and returns Err.
func waitDone(t *testing.T, l *rwlock.Lock, d time.Duration, what string) error {
	t.Helper()
	select {
	case <-l.Done():
		return l.Err()
	case <-time.After(d):
		t.Fatalf("%s: Done not closed after %v", what, d)
		return nil
	}
}

// Case 5: a renewal that reaches Redis after the read hold's lease ran out
// there (R1's connection stalled; R1 was told its hold was lost and its
// rwlock_timeout key expired) must not bring the hold back. Once R2 unlocks,
// nobody believes they hold a read, and a writer gets in at once.
func TestLateRenewalDoesNotReviveALostReadHold(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := testCtx(t)
	direct := b.Client(t)
	name := redistest.Prefix(t) + "rw"
	lease := 2 * time.Second
	p := faultproxy.Start(t, b.Addr)
	slow := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = slow.Close() })
	r1 := newRW(t, newClient(t, slow, fairlock.WithLease(lease), fairlock.WithCleanupTimeout(200*time.Millisecond)), name)
	r2 := newRW(t, newClient(t, b.Client(t), fairlock.WithLease(lease)), name)
	w := newRW(t, newClient(t, b.Client(t), fairlock.WithLease(lease)), name)
	require.NoError(t, r1.ReadLock().Lock(ctx))
	require.NoError(t, r2.ReadLock().Lock(ctx))

	undo := p.Stall()
	stalled := true
	defer func() {
		if stalled {
			undo()
		}
	}()
	err := waitDone(t, r1.ReadLock(), 5*lease, "R1 under the stall")
	require.ErrorIs(t, err, rwlock.ErrLost, "R1's hold under the stall")
	key := wire.KeysFor(name).RWTimeoutKey(r1.ReadLock().Owner(), 1)
	require.Eventually(t, func() bool { return direct.Exists(ctx, key).Val() == 0 }, 5*lease, 20*time.Millisecond,
		"R1's rwlock_timeout key outlives its lease")
	undo() // the held-back renewals reach Redis now
	stalled = false
	time.Sleep(time.Second) // let them land (the proxy delivers at once)
	before := state(ctx, direct, name)
	require.NoError(t, r2.ReadLock().Unlock(ctx))
	ok, err := w.WriteLock().TryLock(ctx)
	require.NoError(t, err)
	assert.True(t, ok, "a writer is refused after the last live reader left: R1's late renewal brought its lost hold back\nbefore R2's unlock: %s\nafter: %s",
		before, state(ctx, direct, name))
	if ok {
		require.NoError(t, w.WriteLock().Unlock(ctx))
	}
}

// Holder-knows (a), the read-write case, no fault needed: R1's read hold
// with an explicit lease runs out while R2's read keeps the hash, so R1's
// field stays in Redis after R1 was told the hold was lost. R1's next Lock
// must start a new hold (Redis count 1, as the client counts), not re-enter
// the stale field: after its one Unlock R1 holds nothing, its Done is
// closed, and once R2 leaves a writer gets in.
//
// "at once": R1 locks again as soon as its Done closes, when its key may
// still live in Redis for the drift margin (the client ends a hold a little
// before Redis does): only the client can tell that field is stale, by
// giving it back before it acquires again (internal/core). "key expired":
// R1 locks again once its key is gone, and the scripts alone start a new
// hold (rw_read_acquire.lua).
func TestReadHoldAfterItsLeaseRanOutStartsAfresh(t *testing.T) {
	redistest.Long(t)
	for _, waitKey := range []bool{false, true} {
		t.Run(map[bool]string{false: "at once", true: "key expired"}[waitKey], func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			direct := b.Client(t)
			name := redistest.Prefix(t) + "rw"
			r1 := newRW(t, newClient(t, b.Client(t)), name)
			r2 := newRW(t, newClient(t, b.Client(t)), name)
			w := newRW(t, newClient(t, b.Client(t)), name)
			require.NoError(t, r1.ReadLock().LockWithLease(ctx, time.Second))
			require.NoError(t, r2.ReadLock().Lock(ctx)) // the watchdog keeps the hash
			err := waitDone(t, r1.ReadLock(), 10*time.Second, "R1's 1 s read hold")
			require.ErrorIs(t, err, rwlock.ErrLost)
			if waitKey {
				key := wire.KeysFor(name).RWTimeoutKey(r1.ReadLock().Owner(), 1)
				require.Eventually(t, func() bool { return direct.Exists(ctx, key).Val() == 0 }, 10*time.Second, 10*time.Millisecond)
				held, err := r1.ReadLock().IsHeld(ctx)
				require.NoError(t, err)
				assert.False(t, held, "R1's IsHeld after its hold was lost and its key expired: %s", state(ctx, direct, name))
			}

			require.NoError(t, r1.ReadLock().LockWithLease(ctx, 10*time.Second))
			n, err := r1.ReadLock().HoldCount(ctx)
			require.NoError(t, err)
			assert.Equal(t, 1, n, "R1's one Lock after its loss counts %d holds in Redis: it re-entered its stale field\n%s", n, state(ctx, direct, name))
			require.NoError(t, r1.ReadLock().Unlock(ctx))
			select {
			case <-r1.ReadLock().Done():
			default:
				t.Errorf("R1's Done is open after its one Unlock (Redis: %s)", state(ctx, direct, name))
			}
			held, err := r1.ReadLock().IsHeld(ctx)
			require.NoError(t, err)
			assert.False(t, held, "R1 still holds in Redis after its one Unlock: %s", state(ctx, direct, name))
			require.NoError(t, r2.ReadLock().Unlock(ctx))
			ok, err := w.WriteLock().TryLock(ctx)
			require.NoError(t, err)
			assert.True(t, ok, "a writer is refused once R1 and R2 have unlocked: %s", state(ctx, direct, name))
			if ok {
				require.NoError(t, w.WriteLock().Unlock(ctx))
			}
		})
	}
}

// A read unlock of a field whose keys have all expired (what a client sends
// to give back a hold it was told was lost) removes the field whole, with
// any count: one call, reply "not held", and the lock freed when nothing
// else holds it.
func TestReadUnlockGivesBackAStaleField(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	rdb := b.Client(t)
	name := redistest.Prefix(t) + "rw"
	k := wire.KeysFor(name)
	r1 := wire.Args{Owner: "u1:1", LeaseMs: 300, LatchMs: 10000}
	r2 := wire.Args{Owner: "u2:1", LeaseMs: 30000, LatchMs: 10000}
	for _, a := range []wire.Args{r1, r1, r2} {
		ok, _, err := wire.Default().ReadAcquire(ctx, rdb, k, a)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.Eventually(t, func() bool {
		return rdb.Exists(ctx, k.RWTimeoutKey("u1:1", 1), k.RWTimeoutKey("u1:1", 2)).Val() == 0
	}, 10*time.Second, 10*time.Millisecond)
	r1.RequestID = "give-back"
	res, err := wire.Default().ReadUnlock(ctx, rdb, k, r1)
	require.NoError(t, err)
	assert.Equal(t, wire.NotHeld, res, "the reply to the give-back of a stale field")
	assert.False(t, rdb.HExists(ctx, name, "u1:1").Val(), "the stale field is still there: %s", state(ctx, rdb, name))
	r2.RequestID = "r2"
	res, err = wire.Default().ReadUnlock(ctx, rdb, k, r2)
	require.NoError(t, err)
	assert.Equal(t, wire.Released, res)
	assert.Zero(t, rdb.Exists(ctx, name).Val(), "the lock outlives its last live hold: %s", state(ctx, rdb, name))
}

// The writer's own read hold with an explicit lease runs out while the
// writer (watchdog) holds: the read half is told it was lost. The writer's
// last Unlock must then free the lock (Redisson switches it to read mode
// for the stale read field: every writer is refused for the rest of the
// writer's lease, and nobody believes they hold a read).
func TestWriteUnlockFreesTheLockWhenItsReadsRanOut(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	direct := b.Client(t)
	name := redistest.Prefix(t) + "rw"
	rw := newRW(t, newClient(t, b.Client(t)), name)
	other := newRW(t, newClient(t, b.Client(t)), name)
	require.NoError(t, rw.WriteLock().Lock(ctx))
	require.NoError(t, rw.ReadLock().LockWithLease(ctx, time.Second))
	err := waitDone(t, rw.ReadLock(), 10*time.Second, "the writer's 1 s read hold")
	require.ErrorIs(t, err, rwlock.ErrLost)
	key := wire.KeysFor(name).RWTimeoutKey(rw.ReadLock().Owner(), 1)
	require.Eventually(t, func() bool { return direct.Exists(ctx, key).Val() == 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, rw.WriteLock().Unlock(ctx))
	ok, err := other.WriteLock().TryLock(ctx)
	require.NoError(t, err)
	assert.True(t, ok, "another writer is refused after the writer's last unlock, its read hold long lost: %s", state(ctx, direct, name))
	if ok {
		require.NoError(t, other.WriteLock().Unlock(ctx))
	}
}

// Holder-knows (c), ForceUnlock through the half that does not match the
// lock's mode deletes nothing, so it must not end that half's hold on the
// client either; one through the matching half deletes the whole lock, the
// same owner's other half included, so both halves' holds end.
func TestForceUnlockEndsOnlyWhatItDeleted(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "rw"
		rw := newRW(t, newClient(t, b.Client(t)), name)
		require.NoError(t, rw.WriteLock().Lock(ctx))
		require.NoError(t, rw.ReadLock().Lock(ctx)) // the writer also reads
		ok, err := rw.ReadLock().ForceUnlock(ctx)
		require.NoError(t, err)
		require.False(t, ok, "the read half deleted a write-locked lock")
		held, err := rw.ReadLock().IsHeld(ctx)
		require.NoError(t, err)
		require.True(t, held)
		select {
		case <-rw.ReadLock().Done():
			t.Errorf("the read half's Done closed after a ForceUnlock that deleted nothing (Redis still counts its hold; Err %v)", rw.ReadLock().Err())
		default:
		}
		ok, err = rw.WriteLock().ForceUnlock(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		for _, l := range []*rwlock.Lock{rw.WriteLock(), rw.ReadLock()} {
			held, err := l.IsHeld(ctx)
			require.NoError(t, err)
			require.False(t, held)
			select {
			case <-l.Done():
				assert.NoError(t, l.Err(), "%s: deleted by its own owner's ForceUnlock", half(l, rw))
			default:
				t.Errorf("the %s half's Done is open after its owner's ForceUnlock deleted the lock", half(l, rw))
			}
		}
	})
}

// Holder-knows (c): the writer's explicit lease is covered by the same
// owner's watchdog read in Redis (they share the hash's TTL), so the write
// field outlives the lease for as long as the read is renewed, while the
// client reports the write hold lost when its lease runs out. The client's
// belief and Redis must agree: once the write half has reported the loss,
// the write field is given back (internal/core gives back a lost hold's
// stale field) and another owner's reader gets in beside the remaining read.
func TestExplicitWriteLeaseUnderOwnWatchdogRead(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	direct := b.Client(t)
	name := redistest.Prefix(t) + "rw"
	lease := 3 * time.Second
	rw := newRW(t, newClient(t, b.Client(t), fairlock.WithLease(lease)), name)
	other := newRW(t, newClient(t, b.Client(t), fairlock.WithLease(lease)), name)
	require.NoError(t, rw.WriteLock().LockWithLease(ctx, time.Second))
	require.NoError(t, rw.ReadLock().Lock(ctx)) // watchdog
	err := waitDone(t, rw.WriteLock(), 10*time.Second, "the 1 s write hold")
	require.ErrorIs(t, err, rwlock.ErrLost)
	var got bool
	deadline := time.Now().Add(2 * lease)
	for !got && time.Now().Before(deadline) {
		got, err = other.ReadLock().TryLock(ctx)
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
	}
	assert.True(t, got, "the write half reported its hold lost, yet its field keeps the lock write-locked: %s", state(ctx, direct, name))
	held, err := rw.WriteLock().IsHeld(ctx)
	require.NoError(t, err)
	assert.False(t, held, "the write half's field is in Redis after it reported the loss")
	assert.NoError(t, rw.ReadLock().Err(), "the read half is still held")
	if got {
		require.NoError(t, other.ReadLock().Unlock(ctx))
	}
	require.NoError(t, rw.ReadLock().Unlock(ctx))
}

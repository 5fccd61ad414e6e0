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
	"github.com/fairlock-go/fairlock/lua"
	"github.com/fairlock-go/fairlock/rwlock"
)

// state describes the lock's keys in Redis, for failure messages.
func state(ctx context.Context, rdb redis.UniversalClient, name string) string {
	h := rdb.HGetAll(ctx, name).Val()
	s := fmt.Sprintf("hash %v pttl %v", h, rdb.PTTL(ctx, name).Val())
	for f := range h {
		for k := 1; k <= 3; k++ {
			key := lua.KeysFor(name).RWTimeoutKey(f, int64(k))
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
	key := lua.KeysFor(name).RWTimeoutKey(r1.ReadLock().Owner(), 1)
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

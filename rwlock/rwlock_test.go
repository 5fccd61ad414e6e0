package rwlock_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/rwlock"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

func newClient(t testing.TB, rdb redis.UniversalClient, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newRW(t testing.TB, c *fairlock.Client, name string) *rwlock.RWMutex {
	t.Helper()
	rw, err := rwlock.New(c, name)
	require.NoError(t, err)
	return rw
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Readers share: two owners on two clients hold the read lock at the same
// time, and a writer is kept out until both have released.
func TestReadersShare(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "rw"
		r1 := newRW(t, newClient(t, b.Client(t)), name)
		r2 := newRW(t, newClient(t, b.Client(t)), name)
		w := newRW(t, newClient(t, b.Client(t)), name)
		require.NoError(t, r1.ReadLock().Lock(ctx))
		ok, err := r2.ReadLock().TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok, "a second reader is refused while a reader holds the lock")
		for _, r := range []*rwlock.RWMutex{r1, r2} {
			held, err := r.ReadLock().IsHeld(ctx)
			require.NoError(t, err)
			assert.True(t, held)
		}
		ok, err = w.WriteLock().TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "a writer got in with two readers")
		require.NoError(t, r1.ReadLock().Unlock(ctx))
		// r1's hold is over although the lock stays read-locked by r2.
		select {
		case <-r1.ReadLock().Done():
		default:
			t.Fatal("the first reader's hold did not end with its last unlock (another reader still holds the lock)")
		}
		assert.True(t, r1.ReadLock().ValidUntil().IsZero(), "ValidUntil after the last unlock")
		assert.NoError(t, r1.ReadLock().Err())
		ok, err = w.WriteLock().TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "a writer got in with a reader left")
		require.NoError(t, r2.ReadLock().Unlock(ctx))
		ok, err = w.WriteLock().TryLock(ctx)
		require.NoError(t, err)
		assert.True(t, ok, "the writer is refused a free lock")
		require.NoError(t, w.WriteLock().Unlock(ctx))
	})
}

// The writer excludes other owners' reads and writes, may read itself, and
// keeps its reads after its last write unlock; a reader cannot upgrade.
func TestWriterOwnReadsNoUpgrade(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "rw"
		c := newClient(t, b.Client(t))
		w, other := newRW(t, c, name), newRW(t, c, name)
		require.NoError(t, w.WriteLock().Lock(ctx))
		require.NoError(t, w.WriteLock().Lock(ctx)) // re-entry
		for _, l := range []*rwlock.Lock{other.ReadLock(), other.WriteLock()} {
			ok, err := l.TryLock(ctx)
			require.NoError(t, err)
			assert.False(t, ok, "%s got in beside a writer", l.Owner())
		}
		ok, err := w.ReadLock().TryLock(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the writer cannot read")
		require.NoError(t, w.WriteLock().Unlock(ctx))
		require.NoError(t, w.WriteLock().Unlock(ctx))
		locked, err := w.WriteLock().IsLocked(ctx)
		require.NoError(t, err)
		assert.False(t, locked, "write mode after the last write unlock")
		locked, err = w.ReadLock().IsLocked(ctx)
		require.NoError(t, err)
		assert.True(t, locked, "the writer's read is gone")
		// Now only a reader: another reader joins, nobody writes, not
		// even the reader itself (no upgrade).
		ok, err = other.ReadLock().TryLock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = w.WriteLock().TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "a reader upgraded to writer")
		require.NoError(t, other.ReadLock().Unlock(ctx))
		require.NoError(t, w.ReadLock().Unlock(ctx))
		locked, err = w.ReadLock().IsLocked(ctx)
		require.NoError(t, err)
		assert.False(t, locked)
		assert.NoError(t, w.ReadLock().Err())
		assert.ErrorIs(t, w.ReadLock().Unlock(ctx), rwlock.ErrNotHeld)
	})
}

// waitGot runs f in the background and returns a channel that yields its
// error.
func waitGot(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// A write unlock that leaves the writer's own reads wakes waiting readers
// at once: with a 30 s lease, a reader that is not woken sleeps until it
// polls again, tens of seconds later.
func TestWriteUnlockKeepingReadsWakesReaders(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "rw"
		w := newRW(t, newClient(t, b.Client(t)), name)
		r := newRW(t, newClient(t, b.Client(t)), name)
		require.NoError(t, w.WriteLock().Lock(ctx))
		require.NoError(t, w.ReadLock().Lock(ctx))
		got := waitGot(func() error { return r.ReadLock().Lock(ctx) })
		waitSubscribers(t, b, name, 1)
		select {
		case err := <-got:
			t.Fatalf("the reader got in beside the writer: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		require.NoError(t, w.WriteLock().Unlock(ctx))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(8 * time.Second):
			t.Fatal("the waiting reader was not woken by a write unlock that left the lock in read mode")
		}
		require.NoError(t, r.ReadLock().Unlock(ctx))
		require.NoError(t, w.ReadLock().Unlock(ctx))
	})
}

// The last reader's unlock wakes a waiting writer; an earlier reader's
// unlock does not let it in.
func TestLastReaderUnlockWakesWriter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "rw"
		r1 := newRW(t, newClient(t, b.Client(t)), name)
		r2 := newRW(t, newClient(t, b.Client(t)), name)
		w := newRW(t, newClient(t, b.Client(t)), name)
		require.NoError(t, r1.ReadLock().Lock(ctx))
		require.NoError(t, r2.ReadLock().Lock(ctx))
		got := waitGot(func() error { return w.WriteLock().Lock(ctx) })
		waitSubscribers(t, b, name, 1)
		require.NoError(t, r1.ReadLock().Unlock(ctx))
		select {
		case err := <-got:
			t.Fatalf("the writer got in beside a reader: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		require.NoError(t, r2.ReadLock().Unlock(ctx))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(8 * time.Second):
			t.Fatal("the waiting writer was not woken by the last reader's unlock")
		}
		require.NoError(t, w.WriteLock().Unlock(ctx))
	})
}

// waitSubscribers waits until the lock's channel has n subscribers.
func waitSubscribers(t *testing.T, b *redistest.Backend, name string, n int64) {
	t.Helper()
	rdb := b.Client(t)
	ch := wire.KeysFor(name).RWChannel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := rdb.PubSubNumSub(context.Background(), ch).Result()
		require.NoError(t, err)
		if m[ch] >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d subscribers, want %d", ch, m[ch], n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The watchdog renews a read hold's own timeout key, not only the lock's
// TTL: another reader's unlock recomputes the lock's TTL from every read
// hold's key, and a key left to expire would free the lock under a live
// reader. With a 3 s lease the reader holds for three leases; then another
// reader comes and goes, and a writer must still be kept out.
func TestWatchdogRenewsReadHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("holds for 10 s")
	}
	b := redistest.Real(t)
	ctx := testCtx(t)
	name := redistest.Prefix(t) + "rw"
	lease := 3 * time.Second
	r := newRW(t, newClient(t, b.Client(t), fairlock.WithLease(lease)), name)
	o := newRW(t, newClient(t, b.Client(t), fairlock.WithLease(lease)), name)
	w := newRW(t, newClient(t, b.Client(t), fairlock.WithLease(lease)), name)
	require.NoError(t, r.ReadLock().Lock(ctx))
	time.Sleep(3 * lease)
	require.NoError(t, r.ReadLock().Err())
	require.NoError(t, o.ReadLock().LockWithLease(ctx, lease))
	require.NoError(t, o.ReadLock().Unlock(ctx))
	ok, err := w.WriteLock().TryLock(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "a writer got in under a live, watchdog-kept reader")
	held, err := r.ReadLock().IsHeld(ctx)
	require.NoError(t, err)
	assert.True(t, held)
	assert.NoError(t, r.ReadLock().Err())
	require.NoError(t, r.ReadLock().Unlock(ctx))
}

// forceUnlock and isLocked of each half, as Redisson's (reference 7.5).
func TestForceUnlockAndIsLocked(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "rw"
		c := newClient(t, b.Client(t))
		a, other := newRW(t, c, name), newRW(t, c, name)
		require.NoError(t, a.ReadLock().Lock(ctx))
		ok, err := other.WriteLock().ForceUnlock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "the write half deleted a read-locked lock")
		ok, err = other.ReadLock().ForceUnlock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		require.NoError(t, a.WriteLock().Lock(ctx))
		rl, _ := other.ReadLock().IsLocked(ctx)
		wl, _ := other.WriteLock().IsLocked(ctx)
		assert.False(t, rl, "write mode with no reads: the read half is not locked")
		assert.True(t, wl)
		require.NoError(t, a.ReadLock().Lock(ctx))
		rl, _ = other.ReadLock().IsLocked(ctx)
		assert.True(t, rl, "a writer that reads: the read half is locked")
		ok, err = other.ReadLock().ForceUnlock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "the read half deleted a write-locked lock")
		ok, err = other.WriteLock().ForceUnlock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		rl, _ = other.ReadLock().IsLocked(ctx)
		wl, _ = other.WriteLock().IsLocked(ctx)
		assert.False(t, rl || wl)
	})
}

// A read or write unlock of a lock nobody holds replies "not held", and a
// retry with the same request id says the same (Redisson stores the latch
// "1" there, hazard H5: the retry would report a release).
func TestUnlockOfFreeLockRetry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		k := wire.KeysFor(redistest.Prefix(t) + "rw")
		a := wire.Args{Owner: "u:1", LeaseMs: 30000, RequestID: "req", LatchMs: 10000}
		for try := 0; try < 2; try++ {
			res, err := wire.Default().ReadUnlock(ctx, rdb, k, a)
			require.NoError(t, err)
			assert.Equal(t, wire.NotHeld, res, "read unlock of a free lock, try %d", try+1)
		}
		a.Owner, a.RequestID = wire.WriterOwner("u:1"), "req2"
		for try := 0; try < 2; try++ {
			res, err := wire.Default().WriteUnlock(ctx, rdb, k, a)
			require.NoError(t, err)
			assert.Equal(t, wire.NotHeld, res, "write unlock of a free lock, try %d", try+1)
		}
	})
}

// Keys, owners and channel are Redisson's.
func TestWireNames(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "rw"
		c := newClient(t, rdb)
		rw, err := rwlock.New(c, name, rwlock.WithThreadID(7))
		require.NoError(t, err)
		id := rw.ReadLock().Owner()
		assert.Regexp(t, `^[0-9a-f-]{36}:7$`, id)
		assert.Equal(t, id+":write", rw.WriteLock().Owner())
		assert.Equal(t, "redisson_rwlock:{"+name+"}", wire.KeysFor(name).RWChannel())
		require.NoError(t, rw.WriteLock().Lock(ctx))
		require.NoError(t, rw.ReadLock().Lock(ctx))
		require.NoError(t, rw.ReadLock().Lock(ctx))
		h, err := rdb.HGetAll(ctx, name).Result()
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"mode": "write", id + ":write": "1", id: "2"}, h)
		for k := 1; k <= 2; k++ {
			key := "{" + name + "}:" + id + ":rwlock_timeout:" + string(rune('0'+k))
			v, err := rdb.Get(ctx, key).Result()
			require.NoError(t, err, key)
			assert.Equal(t, "1", v)
		}
		require.NoError(t, rw.ReadLock().Unlock(ctx))
		require.NoError(t, rw.ReadLock().Unlock(ctx))
		require.NoError(t, rw.WriteLock().Unlock(ctx))
		n, err := rdb.Exists(ctx, name).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

// Close ends both halves' holds (Done closed, Err matching ErrClosed) and
// releases them in Redis; a wait ended by its ctx leaves nothing behind.
func TestCloseAndCanceledWait(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "rw"
		c, err := fairlock.NewClient(b.Client(t))
		require.NoError(t, err)
		rw := newRW(t, c, name)
		require.NoError(t, rw.WriteLock().Lock(ctx))
		require.NoError(t, rw.ReadLock().Lock(ctx))

		other := newRW(t, newClient(t, b.Client(t)), name)
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err = other.WriteLock().Lock(wctx)
		cancel()
		require.ErrorIs(t, err, rwlock.ErrCanceled)
		held, err := other.WriteLock().IsHeld(ctx)
		require.NoError(t, err)
		assert.False(t, held)

		require.NoError(t, c.Close())
		for _, l := range []*rwlock.Lock{rw.ReadLock(), rw.WriteLock()} {
			select {
			case <-l.Done():
			default:
				t.Fatalf("%s: Done not closed by Close", l.Owner())
			}
			assert.ErrorIs(t, l.Err(), rwlock.ErrClosed)
		}
		n, err := rdb.Exists(ctx, name).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "Close left the lock held")
		ok, err := other.WriteLock().TryLock(ctx)
		require.NoError(t, err)
		assert.True(t, ok)
		require.NoError(t, other.WriteLock().Unlock(ctx))
	})
}

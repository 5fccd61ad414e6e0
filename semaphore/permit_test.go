package semaphore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// Permits are holds: these tests state what a Permit promises. Every wait
// is generous (a loaded 2-core machine): they assert states, never that
// something happened within a tight time.

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitDone waits (generously) for p to end.
func waitDone(t *testing.T, p *semaphore.Permit) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the permit did not end")
	}
}

// serverMs is the Redis server's clock in Unix ms.
func serverMs(t *testing.T, b *redistest.Backend) int64 {
	t.Helper()
	tm, err := b.Client(t).Time(context.Background()).Result()
	require.NoError(t, err)
	return tm.UnixMilli()
}

func TestSemaphorePermitIsAHold(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		t.Run("Release", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 3)
			require.NoError(t, err)
			p, err := s.Acquire(ctx, 2, 0)
			require.NoError(t, err)
			require.Len(t, p.IDs(), 2)
			for _, id := range p.IDs() {
				require.Len(t, id, 32)
			}
			assert.False(t, closed(p.Done()))
			assert.NoError(t, p.Err())
			assert.True(t, p.ValidUntil().After(time.Now()))
			a, acq, _ := counts(t, s)
			assert.Equal(t, [2]int{1, 2}, [2]int{a, acq})
			require.NoError(t, p.Release(ctx))
			assert.True(t, closed(p.Done()))
			assert.NoError(t, p.Err())
			assert.True(t, p.ValidUntil().IsZero())
			a, acq, _ = counts(t, s)
			assert.Equal(t, [2]int{3, 0}, [2]int{a, acq})
			assert.ErrorIs(t, p.Release(ctx), fairlock.ErrNotHeld)
			a, _, _ = counts(t, s)
			assert.Equal(t, 3, a, "a second Release gives nothing back")
		})
		t.Run("ReleasedByIDEndsThePermit", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 2)
			require.NoError(t, err)
			p, err := s.Acquire(ctx, 2, 0)
			require.NoError(t, err)
			require.NoError(t, s.Release(ctx, p.IDs()[0]))
			// The Permit's release finds one permit gone: ErrNotHeld, and
			// the other comes back all the same.
			assert.ErrorIs(t, p.Release(ctx), fairlock.ErrNotHeld)
			assert.True(t, closed(p.Done()))
			assert.ErrorIs(t, p.Err(), fairlock.ErrLost)
			a, acq, _ := counts(t, s)
			assert.Equal(t, [2]int{2, 0}, [2]int{a, acq})
		})
		t.Run("ExplicitLeaseEndsThePermit", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 1)
			require.NoError(t, err)
			const lease = 300 * time.Millisecond
			p, err := s.Acquire(ctx, 1, lease)
			require.NoError(t, err)
			assert.False(t, p.ValidUntil().After(time.Now().Add(lease)))
			// (A lease moved by UpdateLease is followed instead:
			// TestExpirableUpdateLeaseIsKept, issue 30 item 6.)
			waitDone(t, p)
			assert.ErrorIs(t, p.Err(), fairlock.ErrLost)
			require.Eventually(t, func() bool { a, acq, _ := counts(t, s); return a == 1 && acq == 0 },
				20*time.Second, 50*time.Millisecond, "the permit came back")
		})
		t.Run("Tokens", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 3)
			require.NoError(t, err)
			last := int64(0)
			for i := range 5 {
				p, err := s.Acquire(ctx, 1+i%2, 0)
				require.NoError(t, err)
				assert.Greater(t, p.Token(), last, "acquisition %d", i)
				last = p.Token()
				require.NoError(t, p.Release(ctx))
			}
			// Another client, the same counter; concurrent grants get
			// distinct tokens, each larger than every earlier one.
			other, err := fairlock.NewClient(b.Client(t))
			require.NoError(t, err)
			t.Cleanup(func() { _ = other.Close() })
			s2, err := semaphore.NewExpirable(other, s.Name())
			require.NoError(t, err)
			require.NoError(t, s2.AddPermits(ctx, 4))
			var mu sync.Mutex
			seen := map[int64]bool{}
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem := s
					if i%2 == 1 {
						sem = s2
					}
					p, err := sem.Acquire(ctx, 1, 0)
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					assert.Greater(t, p.Token(), last)
					assert.False(t, seen[p.Token()], "token %d given twice", p.Token())
					seen[p.Token()] = true
					mu.Unlock()
					assert.NoError(t, p.Release(ctx))
				}()
			}
			wg.Wait()
			assert.Len(t, seen, 8)
			// Only our grants count: the counter is ours.
			tok, err := b.Client(t).Get(ctx, wire.SemKeysFor(s.Name()).Token).Int64()
			require.NoError(t, err)
			assert.Equal(t, last+8, tok)
		})
	})
}

// Close ends a Permit (Done closed, Err matching ErrClosed) and gives its
// permits back.
func TestSemaphoreCloseEndsPermits(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		s, c := newSem(t, b)
		_, err := s.TrySetPermits(ctx, 3)
		require.NoError(t, err)
		p, err := s.Acquire(ctx, 2, 0)
		require.NoError(t, err)
		q, err := s.Acquire(ctx, 1, time.Hour)
		require.NoError(t, err)
		require.NoError(t, c.Close())
		for _, h := range []*semaphore.Permit{p, q} {
			waitDone(t, h)
			assert.ErrorIs(t, h.Err(), fairlock.ErrClosed)
			assert.ErrorIs(t, h.Release(ctx), fairlock.ErrClosed)
		}
		watcher, err := semaphore.NewExpirable(clientOf(t, b), s.Name())
		require.NoError(t, err)
		a, acq, _ := counts(t, watcher)
		assert.Equal(t, [2]int{3, 0}, [2]int{a, acq}, "Close gave the permits back")
	})
}

func clientOf(t *testing.T, b *redistest.Backend, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(b.Client(t), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The watchdog keeps a permit taken without a lease past the client's
// lease, and a holder that stops renewing (its connection closed, no
// Close) loses its permits when the lease runs out on the server's clock:
// they come back to the pool.
func TestSemaphoreWatchdogAndCrash(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		const lease = 2 * time.Second
		rdb := b.Client(t)
		holder, err := fairlock.NewClient(rdb, fairlock.WithLease(lease))
		require.NoError(t, err)
		t.Cleanup(func() { _ = holder.Close() })
		name := redistest.Prefix(t) + "sem"
		s, err := semaphore.NewExpirable(holder, name)
		require.NoError(t, err)
		watcher, err := semaphore.NewExpirable(clientOf(t, b), name)
		require.NoError(t, err)
		_, err = s.TrySetPermits(ctx, 3)
		require.NoError(t, err)

		p, err := s.Acquire(ctx, 2, 0)
		require.NoError(t, err)
		time.Sleep(3 * lease)
		assert.False(t, closed(p.Done()), "the permit ended: %v", p.Err())
		require.NoError(t, p.Err())
		a, acq, _ := counts(t, watcher)
		assert.Equal(t, [2]int{1, 2}, [2]int{a, acq}, "the watchdog kept the permits past the lease")
		lt, err := watcher.LeaseTime(ctx, p.IDs()[0])
		require.NoError(t, err)
		assert.Greater(t, lt, time.Duration(0))
		assert.LessOrEqual(t, lt, lease, "renewed with the client's lease, not made non-expiring")

		// The holder crashes: its connection is gone, nothing renews.
		require.NoError(t, rdb.Close())
		k := wire.SemKeysFor(name)
		score, err := b.Client(t).ZScore(ctx, k.Timeouts, string(mustHex(t, p.IDs()[0]))).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, int64(score), serverMs(t, b)+lease.Milliseconds(), "the expiry is on the server's clock")
		waitDone(t, p)
		assert.ErrorIs(t, p.Err(), fairlock.ErrLost)
		require.Eventually(t, func() bool {
			a, acq, _ := counts(t, watcher)
			return a == 3 && acq == 0
		}, 30*time.Second, 100*time.Millisecond, "the crashed holder's permits came back")
		assert.GreaterOrEqual(t, serverMs(t, b), int64(score), "they came back once their expiry passed on the server's clock")
	})
}

func mustHex(t *testing.T, id string) []byte {
	t.Helper()
	raw := make([]byte, len(id)/2)
	for i := range raw {
		var v byte
		for _, ch := range id[2*i : 2*i+2] {
			v <<= 4
			switch {
			case ch >= '0' && ch <= '9':
				v |= byte(ch - '0')
			case ch >= 'a' && ch <= 'f':
				v |= byte(ch-'a') + 10
			default:
				t.Fatalf("id %q is not lower-case hex", id)
			}
		}
		raw[i] = v
	}
	return raw
}

var _ = errors.Is

package semaphore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// expireSem gives the semaphore's keys a TTL as Redisson's expire() does
// (the pool and the timeouts set; a key that does not exist is skipped).
func expireSem(t *testing.T, b *redistest.Backend, s *semaphore.Expirable, ttl time.Duration) {
	t.Helper()
	k := wire.SemKeysFor(s.Name())
	rdb := b.Client(t)
	for _, key := range []string{k.Pool, k.Timeouts} {
		require.NoError(t, rdb.PExpire(context.Background(), key, ttl).Err())
	}
}

// semKeys lists the keys whose name holds the semaphore's name.
func semKeys(t *testing.T, b *redistest.Backend, s *semaphore.Expirable) []string {
	t.Helper()
	keys, err := b.Client(t).Keys(context.Background(), "*"+s.Name()+"*").Result()
	require.NoError(t, err)
	return keys
}

// Issue 30 item 7: Redisson's RedissonPermitExpirableSemaphoreTest.
// testExpiration through the Go API: once the semaphore's keys expired, no
// key of it is left (fairlock_sem_token:{name}, which had no TTL, was).
func TestExpirableKeysAllExpire(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t) // keys expire on the server's clock
	ctx := context.Background()
	s, _ := newSem(t, b)
	ok, err := s.TrySetPermits(ctx, 1)
	require.NoError(t, err)
	require.True(t, ok)
	expireSem(t, b, s, 3*time.Second)
	p, err := s.TryAcquire(ctx, 1, time.Second, time.Second)
	require.NoError(t, err)
	require.NotNil(t, p)
	time.Sleep(4100 * time.Millisecond)
	assert.Empty(t, semKeys(t, b, s), "every key of the semaphore expired with it")
}

// Issue 30 item 5: a pool with a TTL (Redisson's expire()). The permit's
// record inherits the pool's TTL, so the permit's validity must not
// outlast it (it was valid 28 s after its keys expired, while another
// client took the same single permit), and AddPermits must keep the
// pool's TTL (it dropped it while the record kept its own: a held permit
// was lost for good).
func TestExpirableValidityFollowsTheKeysTTL(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := context.Background()
	rdb := b.Client(t)

	t.Run("AcquireWithinTheTTL", func(t *testing.T) {
		for _, lease := range []time.Duration{0, time.Minute} {
			s, _ := newSem(t, b)
			require.NoError(t, s.SetPermits(ctx, 1))
			expireSem(t, b, s, 5*time.Second)
			start := time.Now()
			p, err := s.Acquire(ctx, 1, lease)
			require.NoError(t, err)
			ttl, err := rdb.PTTL(ctx, wire.SemKeysFor(s.Name()).Timeouts).Result()
			require.NoError(t, err)
			require.Positive(t, ttl, "the record inherits the pool's TTL (Redisson's rule)")
			assert.True(t, p.ValidUntil().Before(start.Add(5*time.Second+time.Second)),
				"lease %v: valid until %v after the acquisition, beyond the keys' 5 s", lease, p.ValidUntil().Sub(start))
			require.NoError(t, p.Release(ctx))
		}
	})

	t.Run("RenewalWithinTheTTL", func(t *testing.T) {
		// The watchdog renews every 2 s (lease 6 s); the keys live 4 s: a
		// renewal must not promise the holder more than they have left.
		s, _ := newSem(t, b, fairlock.WithLease(6*time.Second))
		require.NoError(t, s.SetPermits(ctx, 1))
		expireSem(t, b, s, 4*time.Second)
		p, err := s.Acquire(ctx, 1, 0)
		require.NoError(t, err)
		ttl, err := rdb.PTTL(ctx, wire.SemKeysFor(s.Name()).Timeouts).Result()
		require.NoError(t, err)
		gone := time.Now().Add(ttl)
		for time.Now().Before(gone.Add(time.Second)) {
			if v := p.ValidUntil(); !v.IsZero() {
				require.False(t, v.After(gone.Add(500*time.Millisecond)),
					"valid %v after the keys expire", v.Sub(gone))
			}
			time.Sleep(20 * time.Millisecond)
		}
		select {
		case <-p.Done():
			assert.ErrorIs(t, p.Err(), fairlock.ErrLost)
		case <-time.After(10 * time.Second):
			t.Fatal("the permit outlived its keys")
		}
	})

	t.Run("AddPermitsKeepsThePoolsTTL", func(t *testing.T) {
		s, _ := newSem(t, b)
		require.NoError(t, s.SetPermits(ctx, 1))
		expireSem(t, b, s, time.Minute)
		p, err := s.Acquire(ctx, 1, 0)
		require.NoError(t, err)
		defer p.Release(ctx)
		require.NoError(t, s.AddPermits(ctx, 1))
		k := wire.SemKeysFor(s.Name())
		pool, err := rdb.PTTL(ctx, k.Pool).Result()
		require.NoError(t, err)
		assert.Positive(t, pool, "AddPermits dropped the pool's TTL while the record keeps its own")
		rec, err := rdb.PTTL(ctx, k.Timeouts).Result()
		require.NoError(t, err)
		assert.Positive(t, rec)
		a, acq, _ := counts(t, s)
		assert.Equal(t, [2]int{1, 1}, [2]int{a, acq})
	})
}

// Issue 30 item 6: a Go permit taken with an explicit lease, then
// UpdateLease(id, 0 or 60 s) (here or by a Java client): the permit is
// kept, as Redisson keeps it. The Go client gave it back when the lease it
// first sent ran out.
func TestExpirableUpdateLeaseIsKept(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		for _, update := range []time.Duration{0, time.Minute, 4 * time.Second} {
			name := "to " + update.String()
			if update == 0 {
				name = "to no lease"
			}
			t.Run(name, func(t *testing.T) {
				s, _ := newSem(t, b)
				require.NoError(t, s.SetPermits(ctx, 1))
				p, err := s.Acquire(ctx, 1, time.Second)
				require.NoError(t, err)
				ok, err := s.UpdateLease(ctx, p.IDs()[0], update)
				require.NoError(t, err)
				require.True(t, ok)
				time.Sleep(2500 * time.Millisecond) // the first lease ended 1.5 s ago
				assert.False(t, closed(p.Done()), "the Go hold ended: %v", p.Err())
				_, acq, _ := counts(t, s)
				assert.Equal(t, 1, acq, "the permit was given back")
				lt, err := s.LeaseTime(ctx, p.IDs()[0])
				require.NoError(t, err, "the permit is held")
				switch update {
				case 0:
					assert.Equal(t, time.Duration(-1), lt)
				case time.Minute:
					assert.Greater(t, lt, 50*time.Second)
				default:
					// The hold follows the new lease to its end, and no
					// further.
					select {
					case <-p.Done():
						assert.ErrorIs(t, p.Err(), fairlock.ErrLost)
					case <-time.After(15 * time.Second):
						t.Fatal("the hold outlived its updated lease")
					}
					return
				}
				other, err := semaphore.NewExpirable(otherClient(t, b), s.Name())
				require.NoError(t, err)
				q, err := other.TryAcquire(ctx, 1, 0, 0)
				require.NoError(t, err)
				assert.Nil(t, q, "another client took the permit")
				require.NoError(t, p.Release(ctx))
			})
		}
	})
}

func otherClient(t *testing.T, b *redistest.Backend) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(b.Client(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A lease shortened by this client's UpdateLease cuts its Permit's validity
// at once: the validity must not outlast what Redis keeps (issue 30 items
// 5 and 6).
func TestExpirableShorterUpdateLeaseCutsTheValidity(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		s, c := newSem(t, b)
		require.NoError(t, s.SetPermits(ctx, 1))
		p, err := s.Acquire(ctx, 1, time.Minute)
		require.NoError(t, err)
		// Another handle of the same client on the same semaphore.
		s2, err := semaphore.NewExpirable(c, s.Name())
		require.NoError(t, err)
		start := time.Now()
		ok, err := s2.UpdateLease(ctx, p.IDs()[0], 2*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		assert.False(t, p.ValidUntil().After(start.Add(2*time.Second)),
			"valid %v after the update, beyond the new 2 s lease", p.ValidUntil().Sub(start))
		waitDone(t, p)
		assert.ErrorIs(t, p.Err(), fairlock.ErrLost)
	})
}

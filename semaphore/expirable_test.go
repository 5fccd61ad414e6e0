package semaphore_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

func newSem(t *testing.T, b *redistest.Backend, opts ...fairlock.Option) (*semaphore.Expirable, *fairlock.Client) {
	t.Helper()
	c, err := fairlock.NewClient(b.Client(t), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s, err := semaphore.NewExpirable(c, redistest.Prefix(t)+"sem")
	require.NoError(t, err)
	return s, c
}

// acq and tryAcq are Acquire and TryAcquire returning the permits' ids
// (nil: none).
func acq(s *semaphore.Expirable, ctx context.Context, n int, lease time.Duration) ([]string, error) {
	return idsOf(s.Acquire(ctx, n, lease))
}

func tryAcq(s *semaphore.Expirable, ctx context.Context, n int, wait, lease time.Duration) ([]string, error) {
	return idsOf(s.TryAcquire(ctx, n, wait, lease))
}

func idsOf(p *semaphore.Permit, err error) ([]string, error) {
	if p == nil {
		return nil, err
	}
	return p.IDs(), err
}

func counts(t *testing.T, s *semaphore.Expirable) (avail, acquired, total int) {
	t.Helper()
	ctx := context.Background()
	var err error
	avail, err = s.AvailablePermits(ctx)
	require.NoError(t, err)
	acquired, err = s.AcquiredPermits(ctx)
	require.NoError(t, err)
	total, err = s.Permits(ctx)
	require.NoError(t, err)
	return
}

// Redisson's RedissonPermitExpirableSemaphoreTest scenarios, through the Go
// API, each named after its Java test. Sleeps are Redisson's or shorter;
// every bound that depends on the scheduler is generous.

func TestSemaphoreRedissonScenarios(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		t.Run("NotExistent", func(t *testing.T) {
			s, _ := newSem(t, b)
			a, acq, tot := counts(t, s)
			assert.Equal(t, [3]int{0, 0, 0}, [3]int{a, acq, tot})
		})
		t.Run("TrySetPermits", func(t *testing.T) {
			s, _ := newSem(t, b)
			ok, err := s.TrySetPermits(ctx, 10)
			require.NoError(t, err)
			assert.True(t, ok)
			ok, err = s.TrySetPermits(ctx, 15)
			require.NoError(t, err)
			assert.False(t, ok)
			a, _, _ := counts(t, s)
			assert.Equal(t, 10, a)
		})
		t.Run("SetPermits", func(t *testing.T) {
			s, _ := newSem(t, b)
			step := func(set int, want [3]int) {
				t.Helper()
				require.NoError(t, s.SetPermits(ctx, set))
				a, acq, tot := counts(t, s)
				assert.Equal(t, want, [3]int{tot, a, acq}, "after SetPermits(%d): total, available, acquired", set)
			}
			step(10, [3]int{10, 10, 0})
			ok, err := s.TrySetPermits(ctx, 15)
			require.NoError(t, err)
			assert.False(t, ok)
			step(15, [3]int{15, 15, 0})
			step(15, [3]int{15, 15, 0})
			step(5, [3]int{5, 5, 0})
			for range 3 {
				ids, err := tryAcq(s, ctx, 1, 200*time.Millisecond, time.Minute)
				require.NoError(t, err)
				require.Len(t, ids, 1)
			}
			a, acq, tot := counts(t, s)
			assert.Equal(t, [3]int{5, 2, 3}, [3]int{tot, a, acq})
			step(3, [3]int{3, 0, 3})
			step(2, [3]int{2, -1, 3})
		})
		t.Run("AddPermits", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 10)
			require.NoError(t, err)
			for _, st := range []struct{ add, want int }{{5, 15}, {-10, 5}, {-10, -5}} {
				require.NoError(t, s.AddPermits(ctx, st.add))
				a, _, _ := counts(t, s)
				assert.Equal(t, st.want, a)
			}
		})
		t.Run("AvailableAcquiredGetPermits", func(t *testing.T) {
			s, _ := newSem(t, b)
			ok, err := s.TrySetPermits(ctx, 2)
			require.NoError(t, err)
			require.True(t, ok)
			const lease = 400 * time.Millisecond
			for range 2 {
				ids, err := tryAcq(s, ctx, 1, 200*time.Millisecond, lease)
				require.NoError(t, err)
				require.Len(t, ids, 1)
				require.Len(t, ids[0], 32)
			}
			ids, err := tryAcq(s, ctx, 1, 50*time.Millisecond, lease)
			require.NoError(t, err)
			assert.Nil(t, ids)
			a, acq, tot := counts(t, s)
			assert.Equal(t, [3]int{0, 2, 2}, [3]int{a, acq, tot})
			time.Sleep(lease + 200*time.Millisecond)
			ids, err = tryAcq(s, ctx, 1, 200*time.Millisecond, lease)
			require.NoError(t, err)
			require.Len(t, ids, 1)
			time.Sleep(lease + 200*time.Millisecond)
			a, acq, tot = counts(t, s)
			assert.Equal(t, [3]int{2, 0, 2}, [3]int{a, acq, tot})
		})
		t.Run("UpdateLeaseTime", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 1)
			require.NoError(t, err)
			ok, err := s.UpdateLease(ctx, "1234", time.Second)
			require.NoError(t, err)
			assert.False(t, ok)
			ids, err := acq(s, ctx, 1, 0)
			require.NoError(t, err)
			ok, err = s.UpdateLease(ctx, ids[0], 300*time.Millisecond)
			require.NoError(t, err)
			assert.True(t, ok)
			time.Sleep(500 * time.Millisecond)
			ok, err = s.UpdateLease(ctx, ids[0], time.Second)
			require.NoError(t, err)
			assert.False(t, ok, "the permit expired")
			// The second permit is a Java client's (Redisson's script): by id,
			// UpdateLease extends a permit whoever holds it (a Permit of ours
			// follows it: TestExpirableUpdateLeaseIsKept).
			j := javaSem{rdb: b.Client(t), k: wire.SemKeysFor(s.Name())}
			var id2 []string
			require.Eventually(t, func() bool { id2, _ = j.tryAcquire(t, 1, 300*time.Millisecond); return id2 != nil }, 10*time.Second, 50*time.Millisecond)
			ok, err = s.UpdateLease(ctx, id2[0], 3*time.Second)
			require.NoError(t, err)
			assert.True(t, ok)
			time.Sleep(500 * time.Millisecond)
			a, _, _ := counts(t, s)
			assert.Equal(t, 0, a, "the new lease keeps the permit past its first one")
			require.Eventually(t, func() bool { a, _, _ := counts(t, s); return a == 1 }, 10*time.Second, 50*time.Millisecond)
			ok, err = s.UpdateLease(ctx, id2[0], time.Second)
			require.NoError(t, err)
			assert.False(t, ok)
		})
		t.Run("ExpireWakesAWaiter", func(t *testing.T) { // testExpire, testExpireTryAcquire
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 1)
			require.NoError(t, err)
			const lease = 500 * time.Millisecond
			first, err := tryAcq(s, ctx, 1, 100*time.Millisecond, lease)
			require.NoError(t, err)
			require.Len(t, first, 1)
			start := time.Now()
			second, err := acq(s, ctx, 1, 0)
			took := time.Since(start)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, took, lease-100*time.Millisecond, "got the permit before the lease ran out")
			assert.Less(t, took, 10*time.Second)
			require.NoError(t, s.Release(ctx, second[0]))
			ok, err := s.TryRelease(ctx, first[0])
			require.NoError(t, err)
			assert.False(t, ok)
		})
		t.Run("BlockingAcquire", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 1)
			require.NoError(t, err)
			id, err := acq(s, ctx, 1, 0)
			require.NoError(t, err)
			require.Len(t, id[0], 32)
			go func() {
				time.Sleep(200 * time.Millisecond)
				assert.NoError(t, s.Release(context.Background(), id[0]))
			}()
			_, err = acq(s, ctx, 1, 0)
			require.NoError(t, err)
			ids, err := tryAcq(s, ctx, 1, 0, 0)
			require.NoError(t, err)
			assert.Nil(t, ids)
			a, _, _ := counts(t, s)
			assert.Equal(t, 0, a)
		})
		t.Run("BlockingAcquireManyAndRelease", func(t *testing.T) { // testBlockingAcquireMany, testRelease
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 10)
			require.NoError(t, err)
			ids, err := acq(s, ctx, 6, 0)
			require.NoError(t, err)
			require.Len(t, ids, 6)
			a, _, _ := counts(t, s)
			assert.Equal(t, 4, a)
			require.NoError(t, s.Release(ctx, ids[:4]...))
			a, _, _ = counts(t, s)
			assert.Equal(t, 8, a)
			n, err := s.TryReleaseAll(ctx, ids[4:])
			require.NoError(t, err)
			assert.Equal(t, 2, n)
			a, _, _ = counts(t, s)
			assert.Equal(t, 10, a)
			assert.ErrorIs(t, s.Release(ctx, ids...), fairlock.ErrNotHeld)
		})
		t.Run("TryAcquireWaits", func(t *testing.T) { // testTryAcquire
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 1)
			require.NoError(t, err)
			id, err := tryAcq(s, ctx, 1, 0, 0)
			require.NoError(t, err)
			require.Len(t, id, 1)
			none, err := tryAcq(s, ctx, 1, 0, 0)
			require.NoError(t, err)
			assert.Nil(t, none)
			released := make(chan error, 1)
			go func() {
				time.Sleep(300 * time.Millisecond)
				released <- s.Release(context.Background(), id[0])
			}()
			start := time.Now()
			id2, err := tryAcq(s, ctx, 1, 10*time.Second, 0)
			require.NoError(t, err)
			require.Len(t, id2, 1)
			assert.Less(t, time.Since(start), 10*time.Second)
			// The release's reply may come after the waiter's grant: wait
			// for it before the client is closed.
			assert.NoError(t, <-released)
		})
		t.Run("TryAcquireMany", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 10)
			require.NoError(t, err)
			ids, err := tryAcq(s, ctx, 4, 0, 0)
			require.NoError(t, err)
			assert.Len(t, ids, 4)
			ids, err = tryAcq(s, ctx, 5, 0, 0)
			require.NoError(t, err)
			assert.Len(t, ids, 5)
			a, _, _ := counts(t, s)
			assert.Equal(t, 1, a)
		})
		t.Run("ReleaseWithoutPermits", func(t *testing.T) {
			s, _ := newSem(t, b)
			assert.ErrorIs(t, s.Release(ctx, "1234"), fairlock.ErrNotHeld)
		})
		t.Run("ReleaseExpired", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 1)
			require.NoError(t, err)
			id, err := tryAcq(s, ctx, 1, 100*time.Millisecond, 100*time.Millisecond)
			require.NoError(t, err)
			time.Sleep(250 * time.Millisecond)
			ok, err := s.TryRelease(ctx, id[0])
			require.NoError(t, err)
			assert.False(t, ok)
		})
		t.Run("TryReleaseManyExpired", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 10)
			require.NoError(t, err)
			timed, err := tryAcq(s, ctx, 3, 100*time.Millisecond, 100*time.Millisecond)
			require.NoError(t, err)
			forever, err := tryAcq(s, ctx, 3, 0, 0)
			require.NoError(t, err)
			a, _, _ := counts(t, s)
			assert.Equal(t, 4, a)
			time.Sleep(250 * time.Millisecond)
			n, err := s.TryReleaseAll(ctx, forever)
			require.NoError(t, err)
			assert.Equal(t, 3, n)
			a, _, _ = counts(t, s)
			assert.Equal(t, 10, a)
			n, err = s.TryReleaseAll(ctx, timed)
			require.NoError(t, err)
			assert.Equal(t, 0, n)
			a, _, _ = counts(t, s)
			assert.Equal(t, 10, a)
		})
		t.Run("ReleaseManyNotExistOrExpired", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 10)
			require.NoError(t, err)
			timed, err := acq(s, ctx, 2, 100*time.Millisecond)
			require.NoError(t, err)
			ids, err := tryAcq(s, ctx, 8, 0, 0)
			require.NoError(t, err)
			n, err := s.TryReleaseAll(ctx, ids[:2])
			require.NoError(t, err)
			assert.Equal(t, 2, n)
			a, _, _ := counts(t, s)
			assert.Equal(t, 2, a)
			time.Sleep(250 * time.Millisecond)
			assert.ErrorIs(t, s.Release(ctx, timed...), fairlock.ErrNotHeld)
			a, _, _ = counts(t, s)
			assert.Equal(t, 4, a, "the expired permits were reclaimed by the count")
			for _, bad := range [][]string{append(append([]string{}, ids[2:4]...), ids[:2]...), {"1234"}, append(append([]string{}, ids[4:6]...), "4567")} {
				assert.ErrorIs(t, s.Release(ctx, bad...), fairlock.ErrNotHeld)
				a, _, _ = counts(t, s)
				assert.Equal(t, 4, a, "a release with one bad id changes nothing")
			}
		})
		t.Run("LeaseTime", func(t *testing.T) {
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 1)
			require.NoError(t, err)
			_, err = s.LeaseTime(ctx, "1234")
			assert.ErrorIs(t, err, fairlock.ErrNotHeld)
			id, err := acq(s, ctx, 1, 0)
			require.NoError(t, err)
			lt, err := s.LeaseTime(ctx, id[0])
			require.NoError(t, err)
			// Not Redisson's -1: a permit without a lease is kept by the
			// watchdog, with the client's lease (30 s by default).
			assert.Greater(t, lt, 20*time.Second)
			assert.LessOrEqual(t, lt, 30*time.Second)
			require.NoError(t, s.Release(ctx, id[0]))
			id, err = acq(s, ctx, 1, 1100*time.Millisecond)
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond)
			lt, err = s.LeaseTime(ctx, id[0])
			require.NoError(t, err)
			assert.LessOrEqual(t, lt, 1000*time.Millisecond)
			assert.Greater(t, lt, time.Duration(0))
			require.Eventually(t, func() bool { a, _, _ := counts(t, s); return a == 1 }, 10*time.Second, 50*time.Millisecond)
		})
		t.Run("ConcurrencyMultiPermits", func(t *testing.T) { // and MultiPermits2
			for _, first := range []int{2, 1} {
				s, _ := newSem(t, b)
				_, err := s.TrySetPermits(ctx, 2)
				require.NoError(t, err)
				var ok atomic.Int32
				var wg sync.WaitGroup
				for _, n := range []int{first, 2} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ids, err := tryAcq(s, ctx, n, 10*time.Second, 0)
						if assert.NoError(t, err) && ids != nil {
							time.Sleep(200 * time.Millisecond)
							ok.Add(1)
							_, err := s.TryReleaseAll(ctx, ids)
							assert.NoError(t, err)
						}
					}()
					time.Sleep(50 * time.Millisecond)
				}
				wg.Wait()
				assert.Equal(t, int32(2), ok.Load())
			}
		})
		t.Run("ConcurrencyLoop", func(t *testing.T) { // testConcurrencyLoop_MultiInstance
			s, _ := newSem(t, b)
			_, err := s.TrySetPermits(ctx, 1)
			require.NoError(t, err)
			var inside, most, done atomic.Int32
			var wg sync.WaitGroup
			for range 6 {
				c, err := fairlock.NewClient(b.Client(t))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				other, err := semaphore.NewExpirable(c, s.Name())
				require.NoError(t, err)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						ids, err := acq(other, ctx, 1, 0)
						if !assert.NoError(t, err) {
							return
						}
						n := inside.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						time.Sleep(2 * time.Millisecond)
						inside.Add(-1)
						done.Add(1)
						assert.NoError(t, other.Release(ctx, ids...))
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, int32(60), done.Load())
			assert.Equal(t, int32(1), most.Load(), "two holders of a one-permit semaphore at once")
		})
	})
}

// Bad input changes nothing and names its error.
func TestSemaphoreBadInput(t *testing.T) {
	b := redistest.Mini(t)
	s, c := newSem(t, b)
	ctx := context.Background()
	_, err := s.TrySetPermits(ctx, 3)
	require.NoError(t, err)
	_, err = acq(s, ctx, 0, 0)
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	_, err = acq(s, ctx, -1, 0)
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	_, err = acq(s, ctx, 1, -time.Second)
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	_, err = tryAcq(s, ctx, 1, -time.Second, 0)
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	//lint:ignore SA1012 a nil context is the bad input under test
	_, err = acq(s, nil, 1, 0) //nolint:staticcheck
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	_, err = s.TrySetPermits(ctx, -1)
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	assert.ErrorIs(t, s.SetPermits(ctx, -1), fairlock.ErrInvalidValue)
	assert.ErrorIs(t, s.Release(ctx), fairlock.ErrInvalidValue)
	assert.ErrorIs(t, s.Release(ctx, "not hex"), fairlock.ErrInvalidValue)
	_, err = s.UpdateLease(ctx, "00", -time.Second)
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	_, err = semaphore.NewExpirable(c, "")
	assert.ErrorIs(t, err, fairlock.ErrInvalidName)
	_, err = semaphore.NewExpirable(c, "a{b")
	assert.ErrorIs(t, err, fairlock.ErrInvalidName)
	_, err = semaphore.NewExpirable(nil, "x")
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	var zero semaphore.Expirable
	_, err = zero.AvailablePermits(ctx)
	assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
	a, acq, tot := counts(t, s)
	assert.Equal(t, [3]int{3, 0, 3}, [3]int{a, acq, tot}, "bad input changed the semaphore")
}

// A wait ended by ctx or Close: the error names it, and nothing is held.
func TestSemaphoreWaitEnds(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		s, c := newSem(t, b)
		ctx := context.Background()
		_, err := s.TrySetPermits(ctx, 1)
		require.NoError(t, err)
		_, err = acq(s, ctx, 1, 0)
		require.NoError(t, err)

		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		ids, err := acq(s, tctx, 1, 0)
		assert.Nil(t, ids)
		assert.ErrorIs(t, err, fairlock.ErrCanceled)
		assert.ErrorIs(t, err, context.DeadlineExceeded)

		errc := make(chan error, 1)
		go func() { _, err := acq(s, ctx, 1, 0); errc <- err }()
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, c.Close())
		select {
		case err := <-errc:
			assert.ErrorIs(t, err, fairlock.ErrClosed)
		case <-time.After(20 * time.Second):
			t.Fatal("Acquire did not return after Close")
		}
		_, err = acq(s, ctx, 1, 0)
		assert.ErrorIs(t, err, fairlock.ErrClosed)
	})
}

var _ = errors.Is

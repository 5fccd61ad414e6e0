package multi_test

// Redisson's RedissonFasterMultiLockTest scenarios, through the Go API, on
// both backends. Redisson's FasterMultiLock (getMultiLock(group, fields))
// holds a group's fields in one hash with one script: all or nothing, but
// not fair. Our analogue is the multi-seat hold of one venue
// (multi.NewSeats over names sharing a hash tag): one script, all or
// nothing, and fair. The group is our venue (the hash tag), a field is a
// seat. Where the scenario is about MultiLock behaviour the seats do not
// have (reentrancy), the canonical-order MultiLock (multi.New) stands in.
//
// Differences that run through every scenario:
//
//   - A Redisson lock is held by a thread; a seat hold is held by the
//     SeatHold an acquisition returned (each acquisition a fresh owner). So
//     "held by the current thread" is "this SeatHold is live" (Done open,
//     Err nil), "another thread" is another Seats handle, and releasing
//     someone else's hold cannot be written at all (no SeatHold).
//   - Seats do not re-enter: a second acquisition of the same seats, even
//     from the same handle, is another request and waits behind the first.
//   - Thread interruption is a context's end.
//   - Waits and time bounds are generous (the tests must pass on a loaded
//     2-core machine); sizes are scaled down from Redisson's.
//
// Not carried over: testInCluster (internal/clustertest/seats_test.go runs
// the seats on a real cluster) and testForceUnLock's forceUnlock (the seats
// have none; its scenario below uses Client.Close, which gives a hold back).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/multi"
)

// venueKeys are the venue's keys that exist only while someone holds or
// waits for a seat (the token counter stays, as the fair lock's).
func (v *venue) busyKeys(ctx context.Context) []string {
	var out []string
	for _, k := range []string{v.k.Holds, v.k.Leases, v.k.Seat, v.k.Req, v.k.Queue, v.k.Grace} {
		if v.rdb.Exists(ctx, k).Val() == 1 {
			out = append(out, k)
		}
	}
	return out
}

// live: the hold has not ended.
func live(h *multi.SeatHold) bool {
	select {
	case <-h.Done():
		return false
	default:
		return h.Err() == nil && h.ValidUntil().After(time.Now())
	}
}

// free: another handle could take the seats at once.
func free(t *testing.T, v *venue, c *fairlock.Client, seats ...string) bool {
	t.Helper()
	q, err := v.seats(c, seats...).TryAcquire(context.Background(), 0, 0)
	require.NoError(t, err)
	if q == nil {
		return false
	}
	require.NoError(t, q.Release(context.Background()))
	return true
}

// testSimpleLock: lock(30 s) on two fields of a group records the hold in
// the group's hash; unlock deletes the hash. Ours: the venue records each
// seat's holder (fairlock_seats_seat:{venue}) and the hold's lease; Release
// removes every key of the venue but its token counter.
func TestRedissonFasterSimpleLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		h, err := v.seats(v.client(), "student:001", "student:002").Acquire(ctx, 30*time.Second)
		require.NoError(t, err)
		h1, h2 := v.holder("student:001"), v.holder("student:002")
		assert.NotEmpty(t, h1)
		assert.Equal(t, h1, h2, "both seats held by one owner")
		assert.Equal(t, "2", v.rdb.HGet(ctx, v.k.Holds, h1).Val(), "the holder holds 2 seats")
		require.NoError(t, h.Release(ctx))
		assert.Empty(t, v.busyKeys(ctx))
	})
}

// testReentrantLock and testReentrancy: two lock objects on the same
// fields, locked by one thread, re-enter (count 2), and another thread's
// tryLock fails until both unlocks. Ours differs: a seat hold does not
// re-enter (each acquisition is a fresh owner), so a second acquisition of
// the same seats, from another handle or the same one, is refused by a
// one-shot try and granted after the release. The re-entering analogue is
// the MultiLock: Lock twice, one Unlock keeps every member, the second
// releases them, and another MultiLock's TryLock fails until then.
func TestRedissonFasterReentrancy(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		t.Run("Seats", func(t *testing.T) {
			v := newVenue(t, b)
			c := v.client()
			s := v.seats(c, "test1", "test2")
			h, err := s.TryAcquire(ctx, 0, 0)
			require.NoError(t, err)
			require.NotNil(t, h)
			again, err := s.TryAcquire(ctx, 0, 0)
			require.NoError(t, err)
			assert.Nil(t, again, "the same handle does not re-enter")
			assert.False(t, free(t, v, v.client(), "test1", "test2"), "another owner is refused")
			require.NoError(t, h.Release(ctx))
			again, err = s.TryAcquire(ctx, 0, 0)
			require.NoError(t, err)
			require.NotNil(t, again, "granted once released")
			require.NoError(t, again.Release(ctx))
		})
		t.Run("MultiLock", func(t *testing.T) {
			v := newVenue(t, b)
			c := v.client()
			ns := []string{v.seat("test1"), v.seat("test2")}
			l := newMulti(t, handles(t, kinds[1], c, ns)...)
			other := newMulti(t, handles(t, kinds[1], v.client(), ns)...)
			ok, err := l.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = l.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok, "a MultiLock re-enters")
			require.NoError(t, l.Unlock(ctx))
			assert.Len(t, locked(t, ctx, c, ns), 2, "one Unlock of two keeps every member")
			ok, err = other.TryLock(ctx)
			require.NoError(t, err)
			assert.False(t, ok)
			require.NoError(t, l.Unlock(ctx))
			assert.Empty(t, locked(t, ctx, c, ns))
			ok, err = other.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, other.Unlock(ctx))
		})
	})
}

// testForceUnLock: forceUnlock deletes the group's hash. The seats have no
// force unlock (a holder's seats come back by its Release, its lease end,
// or its client's Close); here the holder's Client.Close gives them back
// and leaves the venue empty.
func TestRedissonFasterCloseGivesBack(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		c := v.client()
		h, err := v.seats(c, "student:001", "student:002").Acquire(ctx, 30*time.Second)
		require.NoError(t, err)
		require.NoError(t, c.Close())
		assert.ErrorIs(t, h.Err(), fairlock.ErrClosed)
		assert.Empty(t, v.busyKeys(ctx))
	})
}

// testRenewExpiration: lock() (watchdog); 17 s later each field's expiry
// has moved forward. Ours: a client whose watchdog lease is 1.5 s; after
// more than one renewal period the hold's lease end in the venue's lease
// zset has moved forward, and the hold is still live.
func TestRedissonFasterRenewExpiration(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		h, err := v.seats(v.client(fairlock.WithLease(1500*time.Millisecond)), "student:001", "student:002").Acquire(ctx, 0)
		require.NoError(t, err)
		owner := v.holder("student:001")
		end0 := v.rdb.ZScore(ctx, v.k.Leases, owner).Val()
		require.NotZero(t, end0)
		eventually(t, "the lease end moved forward", func() bool {
			return v.rdb.ZScore(ctx, v.k.Leases, owner).Val() > end0
		})
		time.Sleep(2 * time.Second) // past the first lease
		assert.True(t, live(h))
		assert.Equal(t, owner, v.holder("student:002"))
		require.NoError(t, h.Release(ctx))
	})
}

// testTryLock: tryLock() succeeds; another thread's tryLock fails. Ours:
// a one-shot TryAcquire is granted; another handle's is refused (nil, no
// error) and does not queue.
func TestRedissonFasterTryLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		h, err := v.seats(v.client(), "student:001", "student:002").TryAcquire(ctx, 0, 0)
		require.NoError(t, err)
		require.NotNil(t, h)
		q, err := v.seats(v.client(), "student:001", "student:002").TryAcquire(ctx, 0, 0)
		require.NoError(t, err)
		assert.Nil(t, q)
		assert.EqualValues(t, 1, v.requests(), "the refused try did not queue")
		require.NoError(t, h.Release(ctx))
	})
}

// testTryLockWait: a lock with a 2 s lease is held; another thread's
// tryLock(wait 3 s, lease 5 s) succeeds, after more than 2 s. Ours the
// same, with a 10 s wait (a loaded machine) and the clock started before
// the first acquisition (the lease runs from the grant, on the server).
func TestRedissonFasterTryLockWait(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		start := time.Now()
		_, err := v.seats(v.client(), "student:001", "student:002").Acquire(ctx, 2*time.Second)
		require.NoError(t, err)
		h, err := v.seats(v.client(), "student:001", "student:002").TryAcquire(ctx, 10*time.Second, 5*time.Second)
		require.NoError(t, err)
		require.NotNil(t, h)
		assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
		assert.True(t, h.ValidUntil().Before(time.Now().Add(5*time.Second)), "the 5 s lease applies")
		require.NoError(t, h.Release(ctx))
	})
}

// testIsHeldAndIsLockedByThread, testIsHeldByCurrentThread,
// testIsHeldByCurrentThreadOtherThread, testIsLocked,
// testIsLockedOtherThread and testUnlockFail: held by the locking thread
// only, locked for everyone, neither after unlock; unlocking another's
// lock fails. Ours: the hold is live (Done open, Err nil, ValidUntil
// ahead) and its seats are taken for every other handle (their one-shot
// tries are refused); after Release it is not live, the seats are free,
// and a second Release fails with ErrNotHeld. Another handle cannot
// release the hold: it has no SeatHold (a refused try returns nil).
func TestRedissonFasterIsHeld(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		other := v.client()
		assert.True(t, free(t, v, other, "test1", "test2"))
		h, err := v.seats(v.client(), "test1", "test2").Acquire(ctx, 0)
		require.NoError(t, err)
		assert.True(t, live(h))
		assert.False(t, free(t, v, other, "test1", "test2"), "locked for another handle")
		assert.False(t, free(t, v, other, "test2"), "each seat is locked")
		assert.True(t, free(t, v, other, "test3"), "another seat of the venue is not")
		require.NoError(t, h.Release(ctx))
		assert.False(t, live(h))
		assert.NoError(t, h.Err(), "a released hold was not lost")
		assert.True(t, h.ValidUntil().IsZero())
		assert.True(t, free(t, v, other, "test1", "test2"))
		assert.ErrorIs(t, h.Release(ctx), fairlock.ErrNotHeld)
	})
}

// testSubscriptionsPerConnection: 5000 lock/sleep(0-20 ms)/unlock tasks on
// 32 threads over 5 groups, on a client with one subscription per
// connection: no errors, and no pub/sub channel left at the end. Ours: 200
// tasks on 16 goroutines over 5 venues, one client (a fairlock client has
// one shared pub/sub connection for every waiter); also no two holds of
// one venue's seats at once.
func TestRedissonFasterSubscriptionsPerConnection(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		p := redistest.Prefix(t)
		var handles [5]*multi.Seats
		var holding [5]atomic.Int32
		for i := range handles {
			s, err := multi.NewSeats(c, fmt.Sprintf("{%slock-%d}:test1", p, i), fmt.Sprintf("{%slock-%d}:test2", p, i))
			require.NoError(t, err)
			handles[i] = s
		}
		tasks := make(chan int, 200)
		for range cap(tasks) {
			tasks <- rand.IntN(len(handles))
		}
		close(tasks)
		var ops, errs, overlaps atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for i := range tasks {
					h, err := handles[i].Acquire(ctx, 0)
					if err != nil {
						errs.Add(1)
						continue
					}
					if holding[i].Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
					holding[i].Add(-1)
					if err := h.Release(ctx); err != nil {
						errs.Add(1)
						continue
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Zero(t, errs.Load())
		assert.Zero(t, overlaps.Load())
		assert.EqualValues(t, 200, ops.Load())
		rdb := b.Client(t)
		eventually(t, "no pub/sub channel left", func() bool {
			return len(rdb.PubSubChannels(ctx, p+"*").Val()) == 0 && len(rdb.PubSubChannels(ctx, "*"+p+"*").Val()) == 0
		})
	})
}

// testSinglePubSub: twice, 4 threads try (wait 100 ms, watchdog) two
// groups, two threads per group, on a client with one subscription
// connection: none fails. Ours: one client (one pub/sub connection), a 5 s
// wait instead of 100 ms (a loaded machine: the point is that the waiter
// is woken through the shared connection, not the wait's length).
func TestRedissonFasterSinglePubSub(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b.Client(t))
		p := redistest.Prefix(t)
		var fails atomic.Int32
		for i := range 2 {
			var wg sync.WaitGroup
			for _, group := range []string{"Lock1_", "Lock1_", "Lock2_", "Lock2_"} {
				tag := fmt.Sprintf("%s%s%d", p, group, i)
				wg.Go(func() {
					s, err := multi.NewSeats(c, "{"+tag+"}:test1", "{"+tag+"}:test2")
					if err != nil {
						fails.Add(1)
						return
					}
					h, err := s.TryAcquire(ctx, 5*time.Second, 0)
					if err != nil || h == nil {
						fails.Add(1)
						return
					}
					if h.Release(ctx) != nil {
						fails.Add(1)
					}
				})
			}
			wg.Wait()
		}
		assert.Zero(t, fails.Load())
	})
}

// testLockIsNotRenewedAfterInterruptedTryLock: a thread's tryLock() is
// interrupted 5 ms after it was sent; 45 s later the lock is not held (no
// watchdog keeps a grant the caller never saw). Ours: a one-shot
// TryAcquire whose ctx ends at various instants while it runs (the
// interruption); the client's watchdog lease is 1 s, so a grant kept
// alive by mistake would still be there 3 s later. Each time, once the
// call returned, the venue ends up empty (a late copy's grant is given
// back by the abandon) and the seats are free.
func TestRedissonFasterInterruptedTryNotRenewed(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		c := v.client(fairlock.WithLease(time.Second))
		s := v.seats(c, "test1", "test2")
		for i := range 8 {
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			var h *multi.SeatHold
			go func() {
				defer close(done)
				h, _ = s.TryAcquire(cctx, 0, 0)
			}()
			time.Sleep(time.Duration(i) * 500 * time.Microsecond)
			cancel()
			<-done
			if h != nil { // granted before the ctx ended: the caller has it
				require.NoError(t, h.Release(ctx))
			}
		}
		time.Sleep(3 * time.Second)
		eventually(t, "nothing held or queued", func() bool { return len(v.busyKeys(ctx)) == 0 })
		assert.True(t, free(t, v, v.client(), "test1", "test2"))
	})
}

// testRedisFailed: with Redis stopped, tryLock(5 s, 10 s) throws a
// RedisException. Ours: TryAcquire (wait 1 s, lease 10 s) returns an error (no hold, and not the
// "wait ran out" nil, nil), within its wait. On a server of the test's own.
func TestRedissonFasterRedisFailed(t *testing.T) {
	redistest.Long(t)
	for _, real := range []bool{false, true} {
		t.Run(map[bool]string{false: "miniredis", true: "redis-server"}[real], func(t *testing.T) {
			ctx := testCtx(t)
			var addr string
			var stop func()
			if real {
				redistest.Real(t) // skips when there is no redis-server
				srv := redistest.StartT(t)
				addr, stop = srv.Addr, srv.Stop
			} else {
				m := miniredis.RunT(t)
				addr, stop = m.Addr(), m.Close
			}
			// maintenance notifications off: go-redis's circuit breaker for
			// them would outlive the client once dials fail (not ours)
			c := newClient(t, redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}}))
			s, err := multi.NewSeats(c, "{batchLock}:test1", "{batchLock}:test2")
			require.NoError(t, err)
			stop()
			start := time.Now()
			h, err := s.TryAcquire(ctx, time.Second, 10*time.Second)
			assert.Error(t, err)
			assert.Nil(t, h)
			assert.Less(t, time.Since(start), 30*time.Second)
		})
	}
}

// testLockUnInterruptibly: thread-2's lock(3 s) waits behind thread-1's
// and, being uninterruptible, is not ended by an interrupt: it goes on
// waiting. Ours differs: Acquire is interrupted by its ctx (it returns
// ErrCanceled and leaves every queue); a wait that must not be
// interrupted passes a context that cannot end, and then goes on waiting
// until the holder's 3 s lease runs out.
func TestRedissonFasterLockUninterruptibly(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		h, err := v.seats(v.client(), "test1", "test2").Acquire(ctx, 3*time.Second)
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		interrupted := v.enqueue(cctx, v.seats(v.client(), "test1", "test2"))
		still := v.enqueue(context.WithoutCancel(ctx), v.seats(v.client(), "test1", "test2"))
		cancel() // the interrupt
		select {
		case r := <-interrupted:
			assert.ErrorIs(t, r.err, fairlock.ErrCanceled)
			assert.Nil(t, r.h)
		case <-time.After(30 * time.Second):
			t.Fatal("the interrupted wait did not return")
		}
		assert.True(t, pending(still), "the wait that cannot end goes on")
		q := got(t, still) // at the holder's lease end
		assert.ErrorIs(t, h.Err(), fairlock.ErrLost)
		require.NoError(t, q.Release(ctx))
		eventually(t, "the interrupted request left every queue", func() bool { return len(v.busyKeys(ctx)) == 0 })
	})
}

// testExpire: lock(2 s); another thread's lock() gets it within about 2 s
// (before 2020 ms); then the first unlock throws
// IllegalMonitorStateException. Ours the same, with a loose upper bound (a
// loaded machine: the waiter's sleep is bounded by the holder's lease end,
// so it is granted then, not at a poll much later), and the first
// Release's error matches ErrNotHeld; its hold reports ErrLost.
func TestRedissonFasterExpire(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		start := time.Now()
		h, err := v.seats(v.client(), "test1", "test2").Acquire(ctx, 2*time.Second)
		require.NoError(t, err)
		q, err := v.seats(v.client(), "test1", "test2").Acquire(ctx, 0)
		require.NoError(t, err)
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, 2*time.Second)
		assert.Less(t, took, 6*time.Second)
		require.NoError(t, q.Release(ctx))
		assert.ErrorIs(t, h.Release(ctx), fairlock.ErrNotHeld)
		assert.ErrorIs(t, h.Err(), fairlock.ErrLost)
	})
}

// testAutoExpire: a client locks (watchdog) and shuts down without
// unlocking; the lock ends within the watchdog timeout. Ours differs where
// a client closes cleanly: Close gives its holds back at once
// (TestRedissonFasterCloseGivesBack). A client that dies without Close is
// modelled by closing its go-redis client under it: the watchdog's
// renewals fail, and the seats come back by themselves at the end of the
// 1.5 s lease; another client's Acquire gets them.
func TestRedissonFasterAutoExpire(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		v := newVenue(t, b)
		rdb := b.Client(t)
		c, err := fairlock.NewClient(rdb, fairlock.WithLease(1500*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		h, err := v.seats(c, "test1", "test2").Acquire(ctx, 0)
		require.NoError(t, err)
		require.NoError(t, rdb.Close()) // the process dies
		q, err := v.seats(v.client(), "test1", "test2").TryAcquire(ctx, 20*time.Second, 0)
		require.NoError(t, err)
		require.NotNil(t, q, "the seats came back at the lease end")
		require.NoError(t, q.Release(ctx))
		select {
		case <-h.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the dead client's hold did not end")
		}
	})
}

// testConcurrency_SingleInstance, testConcurrency_MultiInstance and
// testConcurrencyLoop_MultiInstance: many threads of one client, many
// clients, and clients looping lock/sleep 10 ms/unlock on the same two
// fields: every lock happens. Ours, scaled down: 15 goroutines of one
// client once each; 8 clients once each; 4 clients looping 10 times with a
// 10 ms hold; and no two holds of the seats ever overlap.
func TestRedissonFasterConcurrency(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		for _, sc := range []struct {
			name              string
			clients, loops, n int // n goroutines, spread over the clients
			hold              time.Duration
		}{
			{"SingleInstance", 1, 1, 15, 0},
			{"MultiInstance", 8, 1, 8, 0},
			{"LoopMultiInstance", 4, 10, 4, 10 * time.Millisecond},
		} {
			t.Run(sc.name, func(t *testing.T) {
				v := newVenue(t, b)
				cs := make([]*fairlock.Client, sc.clients)
				for i := range cs {
					cs[i] = v.client()
				}
				var count, holding, overlaps, errs atomic.Int32
				var wg sync.WaitGroup
				for g := range sc.n {
					s := v.seats(cs[g%sc.clients], "test1", "test2")
					wg.Go(func() {
						for range sc.loops {
							h, err := s.Acquire(ctx, 0)
							if err != nil {
								errs.Add(1)
								return
							}
							if holding.Add(1) != 1 {
								overlaps.Add(1)
							}
							time.Sleep(sc.hold)
							count.Add(1)
							holding.Add(-1)
							if h.Release(ctx) != nil {
								errs.Add(1)
							}
						}
					})
				}
				wg.Wait()
				assert.Zero(t, errs.Load())
				assert.Zero(t, overlaps.Load())
				assert.EqualValues(t, sc.n*sc.loops, count.Load())
				assert.Empty(t, v.busyKeys(ctx))
			})
		}
	})
}

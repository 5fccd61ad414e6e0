package multi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/multi"
)

// The fair multi-seat hold through its Go API, on both backends: order
// with overlapping sets, all or nothing, no deadlock with opposite orders,
// ctx end leaving every queue, Close giving back, a crashed holder's seats
// coming back at its lease end, refusals. Waits are generous (a loaded
// 2-core machine): the tests assert order and state, never a tight time.

type venue struct {
	t   *testing.T
	b   *redistest.Backend
	rdb *redis.Client
	tag string
	k   wire.SeatsKeys
}

func newVenue(t *testing.T, b *redistest.Backend) *venue {
	tag := redistest.Prefix(t) + "v"
	return &venue{t: t, b: b, rdb: b.Client(t), tag: tag, k: wire.SeatsKeysFor(tag)}
}

func (v *venue) seat(n string) string { return "{" + v.tag + "}:" + n }

func (v *venue) client(opts ...fairlock.Option) *fairlock.Client {
	c, err := fairlock.NewClient(v.b.Client(v.t), opts...)
	require.NoError(v.t, err)
	v.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (v *venue) seats(c *fairlock.Client, names ...string) *multi.Seats {
	var full []string
	for _, n := range names {
		full = append(full, v.seat(n))
	}
	s, err := multi.NewSeats(c, full...)
	require.NoError(v.t, err)
	return s
}

// requests is how many owners are queued or hold seats in the venue.
func (v *venue) requests() int64 { return v.rdb.HLen(context.Background(), v.k.Req).Val() }

func (v *venue) holder(seat string) string {
	return v.rdb.HGet(context.Background(), v.k.Seat, v.seat(seat)).Val()
}

type result struct {
	h   *multi.SeatHold
	err error
}

// enqueue starts an Acquire and returns once it is queued (the venue has
// one more request).
func (v *venue) enqueue(ctx context.Context, s *multi.Seats) <-chan result {
	v.t.Helper()
	n := v.requests()
	ch := make(chan result, 1)
	go func() {
		h, err := s.Acquire(ctx, 0)
		ch <- result{h, err}
	}()
	eventually(v.t, "the request is queued", func() bool { return v.requests() > n })
	return ch
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func got(t *testing.T, ch <-chan result) *multi.SeatHold {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		require.NotNil(t, r.h)
		return r.h
	case <-time.After(30 * time.Second):
		t.Fatal("not granted")
		return nil
	}
}

// pending: still waiting after a while (generous enough that a grant due
// now would have come).
func pending(ch <-chan result) bool {
	select {
	case <-ch:
		return false
	case <-time.After(300 * time.Millisecond):
		return true
	}
}

func TestSeatsOrderWithOverlappingSets(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		v := newVenue(t, b)
		c := v.client()
		door, err := v.seats(c, "A", "B", "C").Acquire(ctx, 0)
		require.NoError(t, err)
		w1 := v.enqueue(ctx, v.seats(v.client(), "B", "A")) // A B
		w2 := v.enqueue(ctx, v.seats(v.client(), "C", "B")) // B C: behind w1 on B
		w3 := v.enqueue(ctx, v.seats(v.client(), "A"))      // behind w1 on A
		w4 := v.enqueue(ctx, v.seats(v.client(), "C"))      // behind w2 on C
		require.NoError(t, door.Release(ctx))

		h1 := got(t, w1)
		assert.Greater(t, h1.Token(), door.Token())
		assert.True(t, pending(w2) && pending(w3) && pending(w4), "only w1 heads all its queues")
		assert.Equal(t, "", v.holder("C"), "all or nothing: w2 does not take C while B is held")
		require.NoError(t, h1.Release(ctx))

		h2, h3 := got(t, w2), got(t, w3) // w1's seats: B to w2 (C free), A to w3
		assert.True(t, pending(w4), "w4 is behind w2 on C")
		assert.Greater(t, h2.Token(), h1.Token())
		assert.Greater(t, h3.Token(), h1.Token())
		require.NoError(t, h2.Release(ctx))
		h4 := got(t, w4)
		assert.Greater(t, h4.Token(), h2.Token())
		require.NoError(t, h3.Release(ctx))
		require.NoError(t, h4.Release(ctx))
		assert.Zero(t, v.requests())
	})
}

// Owners list the same seats in opposite (random) orders and overlapping
// sets; all of them finish their rounds, and no seat is ever held twice.
func TestSeatsOppositeOrdersDoNotDeadlock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		v := newVenue(t, b)
		sets := [][]string{{"A", "B"}, {"B", "A"}, {"C", "B", "A"}, {"A", "C"}, {"C", "B"}, {"B"}}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var inUse [3]atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, len(sets))
		for i, set := range sets {
			c := v.client()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for round := 0; round < 4; round++ {
					order := append([]string(nil), set...)
					rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
					h, err := v.seats(c, order...).Acquire(ctx, 0)
					if err != nil {
						errs <- fmt.Errorf("owner %d round %d: %w", i, round, err)
						return
					}
					for _, s := range set {
						if inUse[s[0]-'A'].Add(1) != 1 {
							errs <- fmt.Errorf("seat %s held twice", s)
						}
					}
					time.Sleep(time.Millisecond)
					for _, s := range set {
						inUse[s[0]-'A'].Add(-1)
					}
					if err := h.Release(context.Background()); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		assert.Zero(t, v.requests())
	})
}

func TestSeatsAreHolds(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		t.Run("CtxEndLeavesAllQueues", func(t *testing.T) {
			v := newVenue(t, b)
			c := v.client()
			h, err := v.seats(c, "A").Acquire(ctx, 0)
			require.NoError(t, err)
			wctx, cancel := context.WithCancel(ctx)
			w := v.enqueue(wctx, v.seats(c, "A", "B", "C"))
			cancel()
			select {
			case r := <-w:
				assert.ErrorIs(t, r.err, fairlock.ErrCanceled)
				assert.ErrorIs(t, r.err, context.Canceled)
				assert.Nil(t, r.h)
			case <-time.After(30 * time.Second):
				t.Fatal("the canceled wait did not return")
			}
			eventually(t, "the canceled waiter left every queue", func() bool {
				return v.rdb.Exists(ctx, v.k.Queue).Val() == 0 && v.requests() == 1
			})
			// B and C were never taken; a try on them succeeds at once.
			q, err := v.seats(c, "B", "C").TryAcquire(ctx, 0, 0)
			require.NoError(t, err)
			require.NotNil(t, q)
			require.NoError(t, q.Release(ctx))
			require.NoError(t, h.Release(ctx))
		})
		t.Run("TryDoesNotBarge", func(t *testing.T) {
			v := newVenue(t, b)
			c := v.client()
			h, err := v.seats(c, "A").Acquire(ctx, 0)
			require.NoError(t, err)
			w := v.enqueue(ctx, v.seats(v.client(), "A", "B"))
			q, err := v.seats(c, "B").TryAcquire(ctx, 0, 0) // B is free, but queued for
			require.NoError(t, err)
			assert.Nil(t, q)
			q, err = v.seats(c, "B").TryAcquire(ctx, 200*time.Millisecond, 0)
			require.NoError(t, err)
			assert.Nil(t, q, "a timed try queues behind the waiter")
			require.NoError(t, h.Release(ctx))
			require.NoError(t, got(t, w).Release(ctx))
		})
		t.Run("CloseGivesBack", func(t *testing.T) {
			v := newVenue(t, b)
			c := v.client()
			h, err := v.seats(c, "A", "B").Acquire(ctx, 0)
			require.NoError(t, err)
			w := v.enqueue(ctx, v.seats(v.client(), "B", "C"))
			require.NoError(t, c.Close())
			select {
			case <-h.Done():
			default:
				t.Fatal("Close did not end the hold")
			}
			assert.ErrorIs(t, h.Err(), fairlock.ErrClosed)
			q := got(t, w)
			assert.Equal(t, "", v.holder("A"), "Close gave A back too")
			require.NoError(t, q.Release(ctx))
		})
		t.Run("CrashedHolderSeatsReturnAtLeaseEnd", func(t *testing.T) {
			v := newVenue(t, b)
			// the "crashed" holder: an explicit lease nobody renews or releases
			h, err := v.seats(v.client(), "A", "B").Acquire(ctx, 300*time.Millisecond)
			require.NoError(t, err)
			w := v.enqueue(ctx, v.seats(v.client(), "B"))
			q := got(t, w) // its sleep was bounded by the lease end; its next call reclaims
			select {
			case <-h.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the crashed hold did not end")
			}
			assert.ErrorIs(t, h.Err(), fairlock.ErrLost)
			assert.False(t, h.ValidUntil().After(time.Now()))
			assert.Equal(t, "", v.holder("A"), "A came back with B")
			require.NoError(t, q.Release(ctx))
		})
		t.Run("WatchdogKeepsTheSeatsPastTheLease", func(t *testing.T) {
			v := newVenue(t, b)
			c := v.client(fairlock.WithLease(1500 * time.Millisecond))
			h, err := v.seats(c, "A", "B").Acquire(ctx, 0)
			require.NoError(t, err)
			time.Sleep(3500 * time.Millisecond) // more than two leases
			require.NoError(t, h.Err(), "the watchdog kept the hold")
			assert.True(t, h.ValidUntil().After(time.Now()))
			q, err := v.seats(c, "B").TryAcquire(ctx, 0, 0)
			require.NoError(t, err)
			assert.Nil(t, q)
			require.NoError(t, h.Release(ctx))
			assert.ErrorIs(t, h.Release(ctx), fairlock.ErrNotHeld)
		})
	})
}

func TestSeatsRefusals(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		v := newVenue(t, b)
		c := v.client()
		// Names of different venues are not refused: they fall back.
		for _, set := range [][]string{{"{a}:1", "{b}:1"}, {"a", "b"}} {
			s, err := multi.NewSeats(c, set...)
			require.NoError(t, err)
			assert.Equal(t, multi.AcrossVenues, s.Mode())
		}
		s, err := multi.NewSeats(c, v.seat("B"), v.seat("A"))
		require.NoError(t, err)
		assert.Equal(t, multi.OneVenue, s.Mode())
		assert.Equal(t, []string{v.seat("A"), v.seat("B")}, s.Names())
		s, err = multi.NewSeats(c, "a")
		require.NoError(t, err)
		assert.Equal(t, multi.OneVenue, s.Mode(), "a name without a tag is its own venue")
		assert.Zero(t, (&multi.Seats{}).Mode())
		// two tags in one slot: one slot, but two venues
		other := ""
		for i := 0; other == ""; i++ {
			if tag := fmt.Sprintf("x%d", i); core.Slot("{"+tag+"}") == core.Slot(v.seat("A")) {
				other = "{" + tag + "}:A"
			}
		}
		s, err = multi.NewSeats(c, v.seat("A"), other)
		require.NoError(t, err)
		assert.Equal(t, multi.AcrossVenues, s.Mode())
		_, err = multi.NewSeats(c, v.seat("A"), v.seat("A"))
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
		_, err = multi.NewSeats(c, "{a}:1", "{b}:1", "{a}:1")
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
		_, err = multi.NewSeats(c)
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
		_, err = multi.NewSeats(c, "a{b")
		assert.ErrorIs(t, err, fairlock.ErrInvalidName)
		_, err = multi.NewSeats(nil, "a")
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
		_, err = (&multi.Seats{}).Acquire(ctx, 0)
		assert.ErrorIs(t, err, fairlock.ErrInvalidValue)

		// A seat whose name is a held lock is refused, nothing written.
		m, err := fair.New(c, v.seat("L"))
		require.NoError(t, err)
		require.NoError(t, m.Lock(ctx))
		_, err = v.seats(c, "K", "L").TryAcquire(ctx, time.Second, 0)
		assert.ErrorIs(t, err, multi.ErrSeatsMixed)
		assert.Zero(t, v.requests())
		require.NoError(t, m.Unlock(ctx))
	})
}

package multi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/multi"
)

// The AcrossVenues fallback through the Go API, on both backends: no
// deadlock with opposite orders, all or nothing, per-seat order among the
// requests naming a seat (by arrival in that seat's queue), a seat being
// the same seat in either mode, and the hold's calls.

// plaza is three venues: A and D share tag 1, B has tag 2, C has no tag
// (its own venue).
type plaza struct {
	*venue
	A, B, C, D string
}

func newPlaza(t *testing.T, b *redistest.Backend) *plaza {
	v := newVenue(t, b)
	return &plaza{venue: v, A: "{" + v.tag + "1}:A", D: "{" + v.tag + "1}:D", B: "{" + v.tag + "2}:B", C: v.tag + "C"}
}

func (p *plaza) of(c *fairlock.Client, names ...string) *multi.Seats {
	p.t.Helper()
	s, err := multi.NewSeats(c, names...)
	require.NoError(p.t, err)
	return s
}

// queued is how many owners are queued or hold seats in the venue of seat.
func (p *plaza) queued(seat string) int64 {
	return p.rdb.HLen(context.Background(), wire.SeatsKeysFor(wire.Venue(seat)).Req).Val()
}

// holderOf is the owner holding seat in its venue ("" when free).
func (p *plaza) holderOf(seat string) string {
	return p.rdb.HGet(context.Background(), wire.SeatsKeysFor(wire.Venue(seat)).Seat, seat).Val()
}

// start runs Acquire in the background and returns once the venue of
// seat has one more request (the request waits there).
func (p *plaza) start(ctx context.Context, s *multi.Seats, seat string) <-chan result {
	p.t.Helper()
	n := p.queued(seat)
	ch := make(chan result, 1)
	go func() {
		h, err := s.Acquire(ctx, 0)
		ch <- result{h, err}
	}()
	eventually(p.t, "the request waits in the venue of "+seat, func() bool { return p.queued(seat) > n })
	return ch
}

func (p *plaza) empty() bool {
	for _, s := range []string{p.A, p.B, p.C} {
		if p.queued(s) != 0 {
			return false
		}
	}
	return true
}

// canonicalKey orders venues as the fallback takes them: slot, then the
// venue's holds key.
func canonicalKey(seat string) string {
	k := wire.SeatsKeysFor(wire.Venue(seat)).Holds
	return fmt.Sprintf("%05d %s", core.Slot(k), k)
}

// modeOf is the mode NewSeats picks for names.
func modeOf(names []string) multi.SeatsMode {
	for _, n := range names {
		if wire.Venue(n) != wire.Venue(names[0]) {
			return multi.AcrossVenues
		}
	}
	return multi.OneVenue
}

func TestSeatsAcrossOppositeOrdersDoNotDeadlock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		p := newPlaza(t, b)
		all := []string{p.A, p.B, p.C, p.D}
		sets := [][]string{{p.A, p.B}, {p.B, p.A}, {p.C, p.B, p.A}, {p.A, p.C}, {p.C, p.B}, {p.D, p.C, p.A}, {p.B, p.D}}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		inUse := map[string]*atomic.Int32{}
		for _, n := range all {
			inUse[n] = new(atomic.Int32)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4*len(sets))
		for i, set := range sets {
			c := p.client()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for round := 0; round < 4; round++ {
					order := append([]string(nil), set...)
					rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
					s := p.of(c, order...)
					if want := modeOf(set); s.Mode() != want {
						errs <- fmt.Errorf("owner %d: mode %v", i, s.Mode())
					}
					h, err := s.Acquire(ctx, 0)
					if err != nil {
						errs <- fmt.Errorf("owner %d round %d (deadlock?): %w", i, round, err)
						return
					}
					for _, n := range set {
						if inUse[n].Add(1) != 1 {
							errs <- fmt.Errorf("seat %s held twice", n)
						}
					}
					time.Sleep(time.Millisecond)
					for _, n := range set {
						inUse[n].Add(-1)
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
		assert.True(t, p.empty())
	})
}

// All or nothing, and one seat whichever mode names it: a OneVenue hold on
// B (alone) blocks an AcrossVenues request for A and B, which takes
// nothing it keeps.
func TestSeatsAcrossAllOrNothing(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		p := newPlaza(t, b)
		c := p.client()
		blocker, err := p.of(c, p.B).Acquire(ctx, 0)
		require.NoError(t, err)
		across := p.of(p.client(), p.B, p.A)

		h, err := across.TryAcquire(ctx, 0, 0)
		require.NoError(t, err)
		assert.Nil(t, h)
		h, err = across.TryAcquire(ctx, 300*time.Millisecond, 0)
		require.NoError(t, err)
		assert.Nil(t, h)
		h, err = across.TryAcquire(ctx, 300*time.Millisecond, 5*time.Second)
		require.NoError(t, err)
		assert.Nil(t, h)
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		h, err = across.Acquire(dctx, 0)
		cancel()
		assert.ErrorIs(t, err, fairlock.ErrCanceled)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Nil(t, h)
		eventually(t, "A given back, B's queue left", func() bool { return p.queued(p.A) == 0 && p.queued(p.B) == 1 })
		assert.Equal(t, "", p.holderOf(p.A))

		// A is free for anyone at once; B is still the blocker's.
		a, err := p.of(c, p.A).TryAcquire(ctx, 0, 0)
		require.NoError(t, err)
		require.NotNil(t, a)
		require.NoError(t, a.Release(ctx))

		// The other way round: an AcrossVenues hold blocks a OneVenue
		// request for one of its seats.
		require.NoError(t, blocker.Release(ctx))
		h, err = across.TryAcquire(ctx, 0, 0)
		require.NoError(t, err)
		require.NotNil(t, h)
		q, err := p.of(c, p.A).TryAcquire(ctx, 200*time.Millisecond, 0)
		require.NoError(t, err)
		assert.Nil(t, q)
		require.NoError(t, h.Release(ctx))
		assert.True(t, p.empty())
	})
}

// Per-seat order is by arrival in that seat's queue. Requests queue on A
// (the first venue in the canonical order) in arrival order and are
// granted A in that order; a request that holds A joins B's queue only
// then, so a request for B alone that arrived meanwhile goes first on B
// (the weaker guarantee: one total order per venue, not across venues).
func TestSeatsAcrossOrderPerSeat(t *testing.T) {
	redistest.Long(t)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		p := newPlaza(t, b)
		door, err := p.of(p.client(), p.A, p.B).Acquire(ctx, 0)
		require.NoError(t, err)
		first, second := p.A, p.B // in the canonical order of their venues
		if canonicalKey(p.B) < canonicalKey(p.A) {
			first, second = p.B, p.A
		}
		w1 := p.start(ctx, p.of(p.client(), second, first), first) // waits on first
		w2 := p.start(ctx, p.of(p.client(), first), first)         // behind w1 on first
		w3 := p.start(ctx, p.of(p.client(), first, second), first) // behind w2
		require.NoError(t, door.Release(ctx))

		h1 := got(t, w1)
		assert.True(t, pending(w2) && pending(w3), "w2 and w3 are behind w1 on %s", first)
		require.NoError(t, h1.Release(ctx))
		h2 := got(t, w2)
		assert.True(t, pending(w3), "w3 is behind w2")

		// w3 waits on first; another request for second alone takes it now
		// (w3 does not wait there yet), and w3, once it holds first, waits
		// for second behind it while holding first.
		x, err := p.of(p.client(), second).TryAcquire(ctx, 0, 0)
		require.NoError(t, err)
		require.NotNil(t, x, "second is free and nobody waits for it")
		require.NoError(t, h2.Release(ctx))
		eventually(t, "w3 holds "+first+" while it waits for "+second, func() bool { return p.holderOf(first) != "" })
		assert.True(t, pending(w3))
		late := p.start(ctx, p.of(p.client(), second), second) // behind w3 on second
		require.NoError(t, x.Release(ctx))
		h3 := got(t, w3)
		assert.True(t, pending(late), "late arrived on second after w3")
		for i, n := range h3.Names() {
			tok := h3.Tokens()[i]
			if n == first {
				assert.Greater(t, tok, h2.Tokens()[0])
			} else {
				assert.Greater(t, tok, x.Token())
			}
		}
		require.NoError(t, h3.Release(ctx))
		require.NoError(t, got(t, late).Release(ctx))
		assert.True(t, p.empty())
	})
}

func TestSeatsAcrossHold(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		t.Run("Calls", func(t *testing.T) {
			p := newPlaza(t, b)
			h, err := p.of(p.client(), p.C, p.A, p.B, p.D).Acquire(ctx, 0)
			require.NoError(t, err)
			assert.Equal(t, slices.Sorted(slices.Values([]string{p.A, p.B, p.C, p.D})), h.Names())
			toks := map[string]int64{}
			require.Len(t, h.Tokens(), 4)
			for i, n := range h.Names() {
				toks[n] = h.Tokens()[i]
				assert.Positive(t, toks[n])
			}
			assert.Equal(t, toks[p.A], toks[p.D], "A and D: one venue, one grant")
			assert.Zero(t, h.Token(), "no one token across venues")
			assert.True(t, h.ValidUntil().After(time.Now()))
			require.NoError(t, h.Err())
			require.NoError(t, h.Release(ctx))
			<-h.Done()
			require.NoError(t, h.Err())
			assert.True(t, h.ValidUntil().IsZero())
			assert.ErrorIs(t, h.Release(ctx), fairlock.ErrNotHeld)
			assert.True(t, p.empty())
		})
		t.Run("LostVenueGivesBackTheOthers", func(t *testing.T) {
			p := newPlaza(t, b)
			h, err := p.of(p.client(), p.A, p.B).Acquire(ctx, 400*time.Millisecond) // nobody renews it
			require.NoError(t, err)
			select {
			case <-h.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the hold did not end")
			}
			assert.ErrorIs(t, h.Err(), fairlock.ErrLost)
			q, err := p.of(p.client(), p.B, p.A).TryAcquire(ctx, 30*time.Second, 0)
			require.NoError(t, err)
			require.NotNil(t, q)
			assert.ErrorIs(t, h.Release(ctx), fairlock.ErrNotHeld)
			require.NoError(t, q.Release(ctx))
			eventually(t, "nothing left", p.empty)
		})
		t.Run("CloseGivesBack", func(t *testing.T) {
			p := newPlaza(t, b)
			c := p.client()
			h, err := p.of(c, p.A, p.C).Acquire(ctx, 0)
			require.NoError(t, err)
			w := p.start(ctx, p.of(p.client(), p.C), p.C)
			require.NoError(t, c.Close())
			select {
			case <-h.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("Close did not end the hold")
			}
			assert.ErrorIs(t, h.Err(), fairlock.ErrClosed)
			require.NoError(t, got(t, w).Release(ctx))
			eventually(t, "A given back too", p.empty)
		})
		t.Run("BadLease", func(t *testing.T) {
			p := newPlaza(t, b)
			_, err := p.of(p.client(), p.A, p.B).Acquire(ctx, time.Millisecond)
			assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
			_, err = p.of(p.client(), p.A, p.B).TryAcquire(ctx, -1, 0)
			assert.ErrorIs(t, err, fairlock.ErrInvalidValue)
		})
	})
}

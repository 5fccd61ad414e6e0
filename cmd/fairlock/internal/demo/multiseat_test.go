package demo

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// multiConfig is a small multi-seat run: 8 buyers chase the best blocks of
// 1-4 seats among 60 (six rows), so bookings overlap.
func multiConfig(t *testing.T, addr string, kinds ...string) Config {
	return Config{Clients: 2, Goroutines: 4, Seats: 60, Hold: 5 * time.Millisecond, Multi: 4,
		Kinds: kinds, Seed: 1, Redis: &redis.Options{Addr: addr}, Prefix: redistest.Prefix(t),
		// No acquisition of a deadlock-free kind waits this long, even on
		// a loaded machine: a timeout here is a deadlock.
		GiveUp:  time.Minute,
		Options: []fairlock.Option{fairlock.WithLease(5 * time.Second)}}
}

// TestMultiMode runs the --multi mode with the fair multi-seat hold and the
// canonical-order MultiLock: every seat booked once, no deadlock, nothing
// left behind, and the fair hold grants every pair of bookings naming a
// common seat in arrival order.
func TestMultiMode(t *testing.T) {
	b := redistest.Mini(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := multiConfig(t, b.Addr, SeatsHold, MultiLock)
	rs, err := Run(ctx, c)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	for _, r := range rs {
		assert.Equal(t, c.Seats, r.Booked, r.Kind)
		assert.Zero(t, r.DoubleBookings, r.Kind)
		assert.Zero(t, r.Timeouts, r.Kind+": an acquisition waited a minute (deadlock)")
		assert.Empty(t, r.Leftover, r.Kind)
		assert.Zero(t, r.Unseen, r.Kind+": arrivals not seen in Redis")
		assert.Positive(t, r.Done, r.Kind)
		assert.Len(t, r.Bookings, r.Done+r.LostGrants(), r.Kind)
		for _, k := range r.Bookings {
			require.NotEmpty(t, k.Seats, r.Kind)
			require.LessOrEqual(t, len(k.Seats), c.Multi, r.Kind)
			// adjacent, one row
			first, last := k.Seats[0], k.Seats[len(k.Seats)-1]
			require.Equal(t, len(k.Seats)-1, last-first, r.Kind)
			require.Equal(t, (first-1)/RowWidth, (last-1)/RowWidth, r.Kind)
		}
	}
	inv, pairs := rs[0].SeatInversions()
	assert.Zero(t, inv, "the fair multi-seat hold granted a common seat out of arrival order")
	assert.Positive(t, pairs, "no two bookings named a common seat: the run shows nothing")
}

// TestMultiModeCatchesBrokenBookings: the mode's checks catch a booking
// that holds only the first of its seats (double bookings) and one that
// polls without queueing (per-seat inversions). The seats scripts cannot
// be swapped per client, so the broken variants are bookings, not scripts.
func TestMultiModeCatchesBrokenBookings(t *testing.T) {
	b := redistest.Mini(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := multiConfig(t, b.Addr, brokenOneLock, brokenPolling)
	c.allowBroken = true
	rs, err := Run(ctx, c)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	inv, pairs := rs[1].SeatInversions()
	t.Logf("one lock: %d double bookings; polling: %d/%d per-seat inversions", rs[0].DoubleBookings, inv, pairs)
	assert.Positive(t, rs[0].DoubleBookings, "holding one seat of several: no double booking seen")
	assert.Positive(t, inv, "polling without a queue: no inversion seen")
	assert.Zero(t, rs[1].DoubleBookings, "polling still excludes")
}

// TestMultiModeNaiveEnds: per-seat locks in the buyer's order deadlock;
// --give-up ends each deadlock, so the run ends, reports them, and still
// books every seat once.
func TestMultiModeNaiveEnds(t *testing.T) {
	b := redistest.Mini(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := multiConfig(t, b.Addr, Naive)
	c.GiveUp = 300 * time.Millisecond
	rs, err := Run(ctx, c)
	require.NoError(t, err)
	r := rs[0]
	assert.Equal(t, c.Seats, r.Booked)
	assert.Zero(t, r.DoubleBookings)
	assert.Empty(t, r.Leftover)
	t.Logf("naive: %d acquisitions given up", r.Timeouts)
}

func TestMultiValidate(t *testing.T) {
	c := Config{Clients: 1, Goroutines: 1, Seats: 10, Multi: 4, Kinds: []string{SeatsHold}}
	require.NoError(t, c.Validate())
	for _, bad := range []Config{
		{Clients: 1, Goroutines: 1, Seats: 10, Multi: RowWidth + 1, Kinds: []string{SeatsHold}},
		{Clients: 1, Goroutines: 1, Seats: 10, Multi: 4, Kinds: []string{Fair}},
		{Clients: 1, Goroutines: 1, Seats: 10, Multi: 4, Kinds: []string{brokenOneLock}},
		{Clients: 1, Goroutines: 1, Seats: 10, Multi: 4, Permits: 2, Kinds: []string{SeatsHold}},
		{Clients: 1, Goroutines: 1, Seats: 10, Permits: 2, Kinds: []string{SeatsHold}},
	} {
		assert.Error(t, bad.Validate(), "%+v", bad)
	}
}

// TestSeatInversions checks the count on a small history.
func TestSeatInversions(t *testing.T) {
	r := &Result{Bookings: []Booking{
		{Grant: 1, Arrival: 2, Seats: []int{1, 2}},
		{Grant: 2, Arrival: 1, Seats: []int{2, 3}}, // inverted with grant 1 (seat 2)
		{Grant: 3, Arrival: 3, Seats: []int{1, 2, 3}},
		{Grant: 4, Arrival: 4, Seats: []int{9}},
	}}
	inv, pairs := r.SeatInversions()
	assert.Equal(t, int64(1), inv)
	assert.Equal(t, int64(3), pairs) // (1,2), (1,3), (2,3); seat 9 shares nothing
}

// TestMultiModeCancel ends multi-seat runs mid-way (as Ctrl-C does): the
// run returns ctx's error and leaves no hold, queue or lock behind.
func TestMultiModeCancel(t *testing.T) {
	b := redistest.Mini(t)
	for _, kind := range []string{SeatsHold, MultiLock, Naive} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			c := multiConfig(t, b.Addr, kind)
			c.Seats, c.Hold = 1000, 20*time.Millisecond
			time.AfterFunc(300*time.Millisecond, cancel)
			rs, err := Run(ctx, c)
			require.ErrorIs(t, err, context.Canceled)
			require.Len(t, rs, 1)
			assert.Less(t, rs[0].Booked, c.Seats)
			assert.Empty(t, rs[0].Leftover)
			assert.Zero(t, rs[0].DoubleBookings)
		})
	}
}

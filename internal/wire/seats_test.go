package wire_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

func TestSeatsKeyNames(t *testing.T) {
	assert.Equal(t, "venue", wire.Venue("{venue}:12A"))
	assert.Equal(t, "b", wire.Venue("}a{b}"))
	assert.Equal(t, "12A", wire.Venue("12A"))
	k := wire.SeatsKeysFor("venue")
	assert.Equal(t, "fairlock_seats:{venue}", k.Holds)
	assert.Equal(t, "fairlock_seats_lease:{venue}", k.Leases)
	assert.Equal(t, "fairlock_seats_seat:{venue}", k.Seat)
	assert.Equal(t, "fairlock_seats_req:{venue}", k.Req)
	assert.Equal(t, "fairlock_seats_queue:{venue}", k.Queue)
	assert.Equal(t, "fairlock_seats_grace:{venue}", k.Grace)
	assert.Equal(t, "fairlock_seats_token:{venue}", k.Token)
	assert.Equal(t, "fairlock_seats__channel:{venue}:u:1", k.WaiterChannel("u:1"))
	assert.Equal(t, "fairlock_seats_acquire_latch:{venue}:r", k.AcquireLatch("r"))
	assert.Equal(t, "fairlock_seats_release_latch:{venue}:r", k.ReleaseLatch("r"))
}

// The seats scripts, one scenario through every reply, on both backends:
// opposite orders cannot deadlock, a head that heads only some of its
// queues is not granted, all or nothing, wake-ups only for who can act.
func TestSeatsContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		s := wire.SeatsDefault()
		for _, f := range wire.SeatsFiles {
			sc := s.Script(f)
			sha, err := sc.Load(ctx, rdb).Result()
			require.NoError(t, err, f)
			require.Equal(t, sc.Hash(), sha, f)
		}
		venue := redistest.Prefix(t) + "venue"
		k := wire.SeatsKeysFor(venue)
		seat := func(n string) string { return "{" + venue + "}:" + n }
		A, B, C := seat("A"), seat("B"), seat("C")
		arg := func(owner, id string, seats ...string) wire.SeatsArgs {
			return wire.SeatsArgs{Owner: owner, Seats: seats, LeaseMs: 60000, GraceMs: 5000, Queue: true,
				AcquireID: id, LatchMs: 60000}
		}
		drain := drainer(t, rdb, k.Channel)
		acq := func(a wire.SeatsArgs) wire.SeatsResult {
			t.Helper()
			r, err := s.Acquire(ctx, rdb, k, a)
			require.NoError(t, err)
			return r
		}

		// H holds A and B at once; X asks for A,C and queues (A held);
		// Y asks for B,C and queues behind X on C although B... is held
		// too; Z asks C alone: C is free but X and Y queue for it: Z waits.
		r := acq(arg("u:H", "h1", A, B))
		require.True(t, r.Granted)
		tokH := r.Token
		r = acq(arg("u:H", "h1", A, B))
		require.True(t, r.Granted, "a copy of the granting request")
		assert.Equal(t, tokH, r.Token)
		r = acq(arg("u:X", "x1", A, C))
		require.False(t, r.Granted)
		assert.True(t, r.SleepMs > 0 && r.SleepMs <= 60000, "X sleeps at most until H's lease ends: %d", r.SleepMs)
		r = acq(arg("u:Y", "y1", B, C))
		require.False(t, r.Granted)
		r = acq(arg("u:Z", "z1", C))
		require.False(t, r.Granted, "Z must not pass X and Y queued for C")
		try := arg("u:T", "", C)
		try.Queue = false
		r = acq(try)
		require.False(t, r.Granted, "a try never passes the queue")
		assert.Empty(t, drain(), "nobody can act yet")
		assert.Equal(t, "u:X", rdb.HGet(ctx, k.Queue, "h|"+C).Val())
		assert.Equal(t, "u:X", rdb.HGet(ctx, k.Queue, "h|"+A).Val())
		assert.Equal(t, "u:Y", rdb.HGet(ctx, k.Queue, "h|"+B).Val())

		// Refusals change nothing.
		_, err := s.Acquire(ctx, rdb, k, arg("u:H", "h2", C))
		require.ErrorIs(t, err, wire.ErrSeatsAlreadyHolds)
		_, err = s.Acquire(ctx, rdb, k, arg("u:X", "x2", A))
		require.ErrorIs(t, err, wire.ErrSeatsOtherSeats)
		_, err = s.Acquire(ctx, rdb, k, arg("u:W", "w1", A, A))
		require.ErrorIs(t, err, wire.ErrSeatsBadArgs)
		_, err = s.Acquire(ctx, rdb, k, arg("u|W", "w1", A))
		require.ErrorIs(t, err, wire.ErrSeatsBadArgs)
		require.NoError(t, rdb.HSet(ctx, seat("L"), "someone", 1).Err())
		_, err = s.Acquire(ctx, rdb, k, arg("u:W", "w2", seat("L")))
		require.ErrorIs(t, err, wire.ErrSeatsMixed)

		// H releases A and B: X heads A and C and both are free: ready,
		// woken with the waiter behind it on C (Y). Y heads B but not C:
		// not ready, not woken as a head.
		ok, err := s.Release(ctx, rdb, k, wire.SeatsArgs{Owner: "u:H", ReleaseID: "r1", LatchMs: 60000, GraceMs: 5000})
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, []string{k.WaiterChannel("u:X"), k.WaiterChannel("u:Y")}, drain())
		ok, err = s.Release(ctx, rdb, k, wire.SeatsArgs{Owner: "u:H", ReleaseID: "r1", LatchMs: 60000, GraceMs: 5000})
		require.NoError(t, err)
		require.True(t, ok, "the latch answers a retried release")
		assert.Empty(t, drain())
		_, err = s.Acquire(ctx, rdb, k, arg("u:H", "h1", A, B))
		require.ErrorIs(t, err, wire.ErrGrantOver)

		// Y polls: X's grace is running: Y sleeps at most until it ends.
		r = acq(arg("u:Y", "y1", B, C))
		require.False(t, r.Granted)
		assert.True(t, r.SleepMs > 0 && r.SleepMs <= 5000, "%d", r.SleepMs)
		// X takes A and C at once; Y then heads B and C, but C is held.
		r = acq(arg("u:X", "x1", A, C))
		require.True(t, r.Granted)
		assert.Greater(t, r.Token, tokH)
		assert.Empty(t, drain())
		assert.Equal(t, "u:X", rdb.HGet(ctx, k.Seat, A).Val())
		assert.Equal(t, "u:X", rdb.HGet(ctx, k.Seat, C).Val())
		assert.False(t, rdb.HExists(ctx, k.Seat, B).Val(), "B stays free: Y may not take it alone")

		// Z gives up: Y is unaffected (C held). X's abandon of a request it
		// holds by gives its seats back: Y is ready and woken (Z gone).
		was, err := s.Leave(ctx, rdb, k, wire.SeatsArgs{Owner: "u:Z", GraceMs: 5000})
		require.NoError(t, err)
		assert.True(t, was)
		assert.Empty(t, drain())
		g, err := s.Abandon(ctx, rdb, k, wire.SeatsArgs{Owner: "u:X", AcquireID: "x1", LatchMs: 60000, GraceMs: 5000})
		require.NoError(t, err)
		assert.True(t, g)
		assert.Equal(t, []string{k.WaiterChannel("u:Y")}, drain())
		_, err = s.Acquire(ctx, rdb, k, arg("u:X", "x1", A, C))
		require.ErrorIs(t, err, wire.ErrAbandoned)
		r = acq(arg("u:Y", "y1", B, C))
		require.True(t, r.Granted)

		// Renewal: Y's hold is renewed, X's (given back) is not.
		st, err := s.RenewEach(ctx, rdb, []wire.SeatsKeys{k, k}, []string{"u:Y", "u:X"}, 30000)
		require.NoError(t, err)
		assert.Equal(t, []wire.RenewStatus{wire.RenewOK, wire.RenewGone}, st)
		ok, err = s.Release(ctx, rdb, k, wire.SeatsArgs{Owner: "u:Y", ReleaseID: "r2", LatchMs: 100, GraceMs: 5000})
		require.NoError(t, err)
		assert.True(t, ok)

		// Nothing left but the latches and the token counter.
		for _, key := range []string{k.Holds, k.Leases, k.Seat, k.Req, k.Queue, k.Grace} {
			assert.Zero(t, rdb.Exists(ctx, key).Val(), key)
		}
	})
}

// The hot scripts check no types with TYPE: every key they may write is
// read with a command of its type first (seats_guard, token_check, the
// latches). A key of another type must still be ErrSeatsWrongType with
// nothing written, whichever key it is, on a venue with a holder and a
// waiter (so that a call would otherwise write).
func TestSeatsWrongType(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		s := wire.SeatsDefault()
		for i, which := range []string{"holds", "leases", "seat", "req", "queue", "grace", "token", "acquire latch", "release latch"} {
			venue := redistest.Prefix(t) + "wt" + string(rune('a'+i))
			k := wire.SeatsKeysFor(venue)
			A, B := "{"+venue+"}:A", "{"+venue+"}:B"
			arg := func(owner, id string, seats ...string) wire.SeatsArgs {
				return wire.SeatsArgs{Owner: owner, Seats: seats, LeaseMs: 60000, GraceMs: 5000, Queue: true,
					AcquireID: id, LatchMs: 60000, ReleaseID: "r-" + id}
			}
			r, err := s.Acquire(ctx, rdb, k, arg("u:H", "h", A))
			require.NoError(t, err)
			require.True(t, r.Granted)
			r, err = s.Acquire(ctx, rdb, k, arg("u:X", "x", A, B))
			require.NoError(t, err)
			require.False(t, r.Granted)
			// Y's request for B would queue behind X; H's release would
			// give A back, wake X and start its grace.
			key := map[string]string{"holds": k.Holds, "leases": k.Leases, "seat": k.Seat, "req": k.Req,
				"queue": k.Queue, "grace": k.Grace, "token": k.Token,
				"acquire latch": k.AcquireLatch("y"), "release latch": k.ReleaseLatch("h")}[which]
			require.NoError(t, rdb.Del(ctx, key).Err())
			if which == "token" || which == "acquire latch" || which == "release latch" {
				require.NoError(t, rdb.SAdd(ctx, key, "x").Err())
			} else {
				require.NoError(t, rdb.Set(ctx, key, "x", 0).Err())
			}
			all := []string{k.Holds, k.Leases, k.Seat, k.Req, k.Queue, k.Grace, k.Token,
				k.AcquireLatch("y"), k.ReleaseLatch("h"), k.AcquireLatch("h2")}
			snapshot := func() map[string]string {
				m := map[string]string{}
				for _, x := range all {
					m[x] = rdb.Dump(ctx, x).Val()
				}
				return m
			}
			before := snapshot()
			if which != "release latch" { // the acquisition does not use it
				_, err = s.Acquire(ctx, rdb, k, arg("u:Y", "y", B))
				require.ErrorIs(t, err, wire.ErrSeatsWrongType, "%s: acquire", which)
			}
			if which != "acquire latch" && which != "release latch" {
				_, err = s.Acquire(ctx, rdb, k, arg("u:H", "h2", A))
				require.ErrorIs(t, err, wire.ErrSeatsWrongType, "%s: acquire by the holder", which)
			}
			_, err = s.Release(ctx, rdb, k, wire.SeatsArgs{Owner: "u:H", ReleaseID: "h", LatchMs: 60000, GraceMs: 5000})
			if which != "token" && which != "acquire latch" {
				require.ErrorIs(t, err, wire.ErrSeatsWrongType, "%s: release", which)
			}
			if which == "token" || which == "acquire latch" {
				require.NoError(t, err, "%s: the release does not use this key", which)
				continue
			}
			assert.Equal(t, before, snapshot(), "%s: nothing written", which)
		}
	})
}

// With no waiter and nothing to reclaim the hot scripts leave the grace
// hash unread until the acquisition is not granted (it then reads it
// before joining); a grace key of another type is still an error with
// nothing written there, and the release, which does not touch it then,
// works.
func TestSeatsWrongTypeGraceQuiet(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		s := wire.SeatsDefault()
		venue := redistest.Prefix(t) + "wtq"
		k := wire.SeatsKeysFor(venue)
		A := "{" + venue + "}:A"
		arg := func(owner, id string, queue bool) wire.SeatsArgs {
			return wire.SeatsArgs{Owner: owner, Seats: []string{A}, LeaseMs: 60000, GraceMs: 5000, Queue: queue,
				AcquireID: id, LatchMs: 60000}
		}
		r, err := s.Acquire(ctx, rdb, k, arg("u:H", "h", true))
		require.NoError(t, err)
		require.True(t, r.Granted)
		require.NoError(t, rdb.Set(ctx, k.Grace, "x", 0).Err())
		all := []string{k.Holds, k.Leases, k.Seat, k.Req, k.Queue, k.Grace, k.Token, k.AcquireLatch("y"), k.AcquireLatch("t")}
		snapshot := func() map[string]string {
			m := map[string]string{}
			for _, x := range all {
				m[x] = rdb.Dump(ctx, x).Val()
			}
			return m
		}
		before := snapshot()
		_, err = s.Acquire(ctx, rdb, k, arg("u:Y", "y", true))
		require.ErrorIs(t, err, wire.ErrSeatsWrongType)
		_, err = s.Acquire(ctx, rdb, k, arg("u:T", "t", false))
		require.ErrorIs(t, err, wire.ErrSeatsWrongType)
		assert.Equal(t, before, snapshot(), "nothing written")
		ok, err := s.Release(ctx, rdb, k, wire.SeatsArgs{Owner: "u:H", GraceMs: 5000})
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Equal(t, "string", rdb.Type(ctx, k.Grace).Val())
	})
}

package wire_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

func TestSemKeyNames(t *testing.T) {
	k := wire.SemFairKeysFor("pool")
	assert.Equal(t, "fairlock_sem:{pool}", k.Holders)
	assert.Equal(t, "fairlock_sem_lease:{pool}", k.Leases)
	assert.Equal(t, "fairlock_sem_permits:{pool}", k.Permits)
	assert.Equal(t, "fairlock_sem_queue:{pool}", k.Queue)
	assert.Equal(t, "fairlock_sem_wants:{pool}", k.Wants)
	assert.Equal(t, "fairlock_sem_grace:{pool}", k.Grace)
	assert.Equal(t, "fairlock_sem_token:{pool}", k.Token)
	assert.Equal(t, "fairlock_sem__channel:{pool}:u:1", k.WaiterChannel("u:1"))
	assert.Equal(t, "fairlock_sem_acquire_latch:{pool}:r", k.AcquireLatch("r"))
	assert.Equal(t, "fairlock_sem_release_latch:{pool}:r", k.ReleaseLatch("r"))
	assert.Equal(t, "fairlock_sem:{t}:pool", wire.SemFairKeysFor("{t}:pool").Holders)
}

// The fair semaphore's scripts, one scenario through every reply, on both
// backends.
func TestSemFairContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		s := wire.SemFairDefault()
		k := wire.SemFairKeysFor(redistest.Prefix(t) + "sem")
		arg := func(owner string, n int64, id string) wire.SemArgs {
			return wire.SemArgs{Owner: owner, Permits: n, LeaseMs: 60000, WaitMs: 30000, GraceMs: 5000,
				Queue: true, AcquireID: id, LatchMs: 60000}
		}
		drain := drainer(t, rdb, k.Channel)

		// No pool yet: a clear refusal, nothing queued.
		_, err := s.Acquire(ctx, rdb, k, arg("u:A", 1, "a0"))
		require.ErrorIs(t, err, wire.ErrSemNotSet)
		_, err = s.AddPermits(ctx, rdb, k, 1, wire.SemArgs{})
		require.ErrorIs(t, err, wire.ErrSemNotSet)
		_, was, err := s.SetPermits(ctx, rdb, k, 3, wire.SemArgs{})
		require.NoError(t, err)
		assert.False(t, was)

		// A takes 2 of 3; B asks 2 and queues; C asks 1 and queues behind
		// B although 1 permit is free (B blocks it).
		r, err := s.Acquire(ctx, rdb, k, arg("u:A", 2, "a1"))
		require.NoError(t, err)
		require.True(t, r.Granted)
		tokA := r.Token
		r, err = s.Acquire(ctx, rdb, k, arg("u:B", 2, "b1"))
		require.NoError(t, err)
		require.False(t, r.Granted)
		assert.True(t, r.SleepMs > 0 && r.SleepMs <= 60000, "B sleeps at most until A's lease ends: %d", r.SleepMs)
		r, err = s.Acquire(ctx, rdb, k, arg("u:C", 1, "c1"))
		require.NoError(t, err)
		require.False(t, r.Granted, "C must not pass the blocked head B")
		try := arg("u:D", 1, "")
		try.Queue = false
		r, err = s.Acquire(ctx, rdb, k, try)
		require.NoError(t, err)
		require.False(t, r.Granted, "a try never passes the queue")
		st, err := s.State(ctx, rdb, k)
		require.NoError(t, err)
		assert.Equal(t, wire.SemState{Pool: 3, Available: 1, Holders: 1, Queued: 2}, st)

		// Refusals.
		_, err = s.Acquire(ctx, rdb, k, arg("u:E", 4, "e1"))
		require.ErrorIs(t, err, wire.ErrSemTooMany)
		_, err = s.Acquire(ctx, rdb, k, arg("u:A", 1, "a2"))
		require.ErrorIs(t, err, wire.ErrSemAlreadyHolds)
		// A copy of A's request: the same grant.
		r, err = s.Acquire(ctx, rdb, k, arg("u:A", 2, "a1"))
		require.NoError(t, err)
		assert.Equal(t, wire.SemAcquireResult{Granted: true, Token: tokA}, r)

		// Renew: A's lease; nobody else's.
		st2, err := s.RenewEach(ctx, rdb, []wire.SemFairKeys{k, k}, []string{"u:A", "u:B"}, 90000)
		require.NoError(t, err)
		assert.Equal(t, []wire.RenewStatus{wire.RenewOK, wire.RenewGone}, st2)

		// A releases: B (head, 2) and C (1) both fit in the 3 free permits,
		// and joined with latches: the release grants them the permits
		// directly, in order, on their channels (issue 33); the retry is
		// latched.
		drain()
		rel := wire.SemArgs{Owner: "u:A", ReleaseID: "ra", LatchMs: 60000, GraceMs: 5000}
		ok, err := s.Release(ctx, rdb, k, rel)
		require.NoError(t, err)
		require.True(t, ok)
		assert.ElementsMatch(t, []string{k.WaiterChannel("u:B"), k.WaiterChannel("u:C")}, drain())
		ok, err = s.Release(ctx, rdb, k, rel)
		require.NoError(t, err)
		assert.True(t, ok, "a retried release replies its first answer")
		rel.ReleaseID = "ra2"
		ok, err = s.Release(ctx, rdb, k, rel)
		require.NoError(t, err)
		assert.False(t, ok)
		_, err = s.Acquire(ctx, rdb, k, arg("u:A", 2, "a1"))
		require.ErrorIs(t, err, wire.ErrGrantOver)

		// B, then C, were granted in order with increasing tokens; their
		// requests' copies claim the grants.
		r, err = s.Acquire(ctx, rdb, k, arg("u:B", 2, "b1"))
		require.NoError(t, err)
		require.True(t, r.Granted)
		assert.Greater(t, r.Token, tokA)
		tokB := r.Token
		assert.Empty(t, drain(), "nobody is left to wake")
		r, err = s.Acquire(ctx, rdb, k, arg("u:C", 1, "c1"))
		require.NoError(t, err)
		require.True(t, r.Granted)
		assert.Greater(t, r.Token, tokB)
		assert.Zero(t, rdb.Exists(ctx, k.Queue, k.Wants).Val(), "an empty queue keeps no state")

		// Abandon: a granted request's permits go back; a late copy does nothing.
		held, err := s.Abandon(ctx, rdb, k, arg("u:C", 1, "c1"))
		require.NoError(t, err)
		assert.True(t, held)
		_, err = s.Acquire(ctx, rdb, k, arg("u:C", 1, "c1"))
		require.ErrorIs(t, err, wire.ErrAbandoned)
		st, err = s.State(ctx, rdb, k)
		require.NoError(t, err)
		assert.Equal(t, wire.SemState{Pool: 3, Available: 1, Holders: 1, Queued: 0}, st)

		// Leave.
		r, err = s.Acquire(ctx, rdb, k, arg("u:D", 3, "d1"))
		require.NoError(t, err)
		require.False(t, r.Granted)
		was, err = s.Leave(ctx, rdb, k, wire.SemArgs{Owner: "u:D", WaitMs: 30000})
		require.NoError(t, err)
		assert.True(t, was)
		assert.Zero(t, rdb.Exists(ctx, k.Queue, k.Wants).Val())

		// Pool changes.
		n, err := s.AddPermits(ctx, rdb, k, 2, wire.SemArgs{})
		require.NoError(t, err)
		assert.EqualValues(t, 5, n)
		_, err = s.AddPermits(ctx, rdb, k, -6, wire.SemArgs{})
		require.ErrorIs(t, err, wire.ErrSemNegative)
		old, was, err := s.SetPermits(ctx, rdb, k, 1, wire.SemArgs{})
		require.NoError(t, err)
		assert.True(t, was)
		assert.EqualValues(t, 5, old)

		// A lease ends on the server's clock: B's permits come back.
		r, err = s.Acquire(ctx, rdb, k, arg("u:F", 1, "f1"))
		require.NoError(t, err)
		require.False(t, r.Granted, "B holds 2 of a pool of 1")
		short := wire.SemArgs{Owner: "u:G", Permits: 1, LeaseMs: 1, Queue: false}
		_, _, err = s.SetPermits(ctx, rdb, wire.SemFairKeysFor(k.Name+"2"), 1, wire.SemArgs{})
		require.NoError(t, err)
		k2 := wire.SemFairKeysFor(k.Name + "2")
		r, err = s.Acquire(ctx, rdb, k2, short)
		require.NoError(t, err)
		require.True(t, r.Granted)
		if b.Mini != nil {
			b.Mini.SetTime(time.Now().Add(time.Second))
		}
		require.Eventually(t, func() bool {
			st, err := s.State(ctx, rdb, k2)
			return err == nil && st.Holders == 0 && st.Available == 1
		}, 10*time.Second, 5*time.Millisecond, "a 1 ms lease ends")
		short.Owner = "u:H"
		r, err = s.Acquire(ctx, rdb, k2, short)
		require.NoError(t, err)
		assert.True(t, r.Granted, "the ended lease was reclaimed")
		assert.EqualValues(t, 1, rdb.HLen(ctx, k2.Holders).Val())
		if b.Mini != nil {
			b.Mini.SetTime(time.Time{})
		}
	})
}

// A key of the wrong type: a clear error, nothing written.
func TestSemFairWrongType(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		s := wire.SemFairDefault()
		k := wire.SemFairKeysFor(redistest.Prefix(t) + "sem")
		for _, key := range []string{k.Holders, k.Leases, k.Queue, k.Wants} {
			require.NoError(t, rdb.Del(ctx, k.Holders, k.Leases, k.Permits, k.Queue, k.Wants, k.Grace, k.Token).Err())
			require.NoError(t, rdb.Set(ctx, k.Permits, 2, 0).Err())
			require.NoError(t, rdb.Set(ctx, key, "x", 0).Err())
			_, err := s.Acquire(ctx, rdb, k, wire.SemArgs{Owner: "u:1", Permits: 1, LeaseMs: 1000, Queue: true})
			require.ErrorIs(t, err, wire.ErrSemWrongType, key)
			_, err = s.Release(ctx, rdb, k, wire.SemArgs{Owner: "u:1"})
			require.ErrorIs(t, err, wire.ErrSemWrongType, key)
			_, _, err = s.SetPermits(ctx, rdb, k, 5, wire.SemArgs{})
			require.ErrorIs(t, err, wire.ErrSemWrongType, key)
			assert.Equal(t, "2", rdb.Get(ctx, k.Permits).Val(), "nothing written")
			keys, err := rdb.Keys(ctx, "*"+k.Name+"*").Result()
			require.NoError(t, err)
			assert.ElementsMatch(t, []string{k.Permits, key}, keys, "nothing written")
		}
		// The token key: the acquisition reads it before writing anything
		// (token_check); a release does not use it.
		require.NoError(t, rdb.Del(ctx, k.Holders, k.Leases, k.Permits, k.Queue, k.Wants, k.Grace, k.Token).Err())
		require.NoError(t, rdb.Set(ctx, k.Permits, 2, 0).Err())
		require.NoError(t, rdb.HSet(ctx, k.Token, "x", "1").Err())
		_, err := s.Acquire(ctx, rdb, k, wire.SemArgs{Owner: "u:1", Permits: 1, LeaseMs: 1000, Queue: true})
		require.ErrorIs(t, err, wire.ErrSemWrongType)
		keys, err := rdb.Keys(ctx, "*"+k.Name+"*").Result()
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{k.Permits, k.Token}, keys, "nothing written")
		require.NoError(t, rdb.Del(ctx, k.Token).Err())
		require.NoError(t, rdb.Set(ctx, k.Permits, "many", 0).Err())
		_, err = s.Acquire(ctx, rdb, k, wire.SemArgs{Owner: "u:1", Permits: 1, LeaseMs: 1000})
		require.Error(t, err)
		require.NoError(t, rdb.Set(ctx, k.Leases, "x", 0).Err())
		st, err := s.RenewEach(ctx, rdb, []wire.SemFairKeys{k}, []string{"u:1"}, 1000)
		require.NoError(t, err)
		assert.Equal(t, []wire.RenewStatus{wire.RenewWrongType}, st)
	})
}

// drainer returns a function that returns the channels published on (the
// pattern channel+":*") since its last call: it publishes a marker and
// reads up to it (Redis delivers a subscriber's messages in order).
func drainer(t *testing.T, rdb *redis.Client, channel string) func() []string {
	ctx := context.Background()
	ps := rdb.PSubscribe(ctx, channel+":*")
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(ctx)
	require.NoError(t, err)
	sync := channel + ":#sync"
	return func() []string {
		t.Helper()
		require.NoError(t, rdb.Publish(ctx, sync, "x").Err())
		var got []string
		for {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			m, err := ps.ReceiveMessage(ctx)
			cancel()
			require.NoError(t, err)
			if m.Channel == sync {
				return got
			}
			got = append(got, m.Channel)
		}
	}
}

// A damaged queue hash (a node field deleted by hand) is repaired by the
// queue engine, never looped on: every script returns, and the waiters,
// polling again, are granted in turn. On miniredis only, with a read
// timeout, so that a script that looped could not stall a shared server.
func TestSemFairDamagedQueueReturns(t *testing.T) {
	for _, field := range []string{"n:u:A", "p:u:B", "d:u:B", "hd", "t"} {
		t.Run(field, func(t *testing.T) {
			ctx := context.Background()
			m := redistest.Mini(t)
			rdb := redis.NewClient(&redis.Options{Addr: m.Addr, ReadTimeout: 10 * time.Second, MaxRetries: -1})
			defer rdb.Close()
			s := wire.SemFairDefault()
			k := wire.SemFairKeysFor("sem")
			_, _, err := s.SetPermits(ctx, rdb, k, 1, wire.SemArgs{})
			require.NoError(t, err)
			acq := func(o string) wire.SemAcquireResult {
				r, err := s.Acquire(ctx, rdb, k, wire.SemArgs{Owner: o, Permits: 1, LeaseMs: 60000, WaitMs: 1000, GraceMs: 1000, Queue: true})
				require.NoError(t, err)
				return r
			}
			require.True(t, acq("u:H").Granted)
			for _, o := range []string{"u:A", "u:B", "u:C"} {
				require.False(t, acq(o).Granted)
			}
			require.NoError(t, rdb.HDel(ctx, k.Queue, field).Err())
			_, err = s.Release(ctx, rdb, k, wire.SemArgs{Owner: "u:H"})
			require.NoError(t, err)
			granted := 0
			for range 10 {
				for _, o := range []string{"u:A", "u:B", "u:C"} {
					if r := acq(o); r.Granted {
						granted++
						ok, err := s.Release(ctx, rdb, k, wire.SemArgs{Owner: o})
						require.NoError(t, err)
						require.True(t, ok)
					}
				}
			}
			assert.GreaterOrEqual(t, granted, 3, "every waiter is granted again and again")
			st, err := s.State(ctx, rdb, k)
			require.NoError(t, err)
			assert.EqualValues(t, 1, st.Available)
		})
	}
}

// A holder's count that is not a count (damaged) stands for the whole pool
// in acquisition (res_sem.lua's sem_count); State must read it the same
// way rather than report its permits free.
func TestSemFairStateCountsADamagedHolderAsAcquisitionDoes(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		s := wire.SemFairDefault()
		k := wire.SemFairKeysFor(redistest.Prefix(t) + "sem")
		_, _, err := s.SetPermits(ctx, rdb, k, 3, wire.SemArgs{})
		require.NoError(t, err)
		r, err := s.Acquire(ctx, rdb, k, wire.SemArgs{Owner: "u:A", Permits: 1, LeaseMs: 60000, WaitMs: 30000, Queue: true})
		require.NoError(t, err)
		require.True(t, r.Granted)
		require.NoError(t, rdb.HSet(ctx, k.Holders, "u:A", "x").Err())
		st, err := s.State(ctx, rdb, k)
		require.NoError(t, err)
		r, err = s.Acquire(ctx, rdb, k, wire.SemArgs{Owner: "u:B", Permits: 1, LeaseMs: 60000, WaitMs: 30000})
		require.NoError(t, err)
		assert.False(t, r.Granted, "nothing is granted against a damaged count")
		assert.Equal(t, wire.SemState{Pool: 3, Available: 0, Holders: 1, Queued: 0}, st,
			"State reports as free only what an acquisition could take")
	})
}

func TestSemFairQueuedContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		s := wire.SemFairDefault()
		k := wire.SemFairKeysFor(redistest.Prefix(t) + "semq")
		_, _, err := s.SetPermits(ctx, rdb, k, 1, wire.SemArgs{GraceMs: 5000})
		require.NoError(t, err)
		arg := func(owner, id string) wire.SemArgs {
			return wire.SemArgs{Owner: owner, Permits: 1, LeaseMs: 60000, WaitMs: 1000, GraceMs: 5000,
				Queue: true, AcquireID: id, LatchMs: 60000}
		}
		r, err := s.Acquire(ctx, rdb, k, arg("u:A", ""))
		require.NoError(t, err)
		require.True(t, r.Granted)
		for _, o := range []string{"u:B", "u:C", "u:D"} {
			r, err = s.Acquire(ctx, rdb, k, arg(o, ""))
			require.NoError(t, err)
			require.False(t, r.Granted)
		}
		for _, c := range []struct {
			owner, id string
			want      bool
		}{
			{"u:A", "a", false}, // holds, not queued
			{"u:B", "b", false}, // the head
			{"u:C", "c", false}, // behind the head
			{"u:D", "d", true},  // third
			{"u:E", "e", false}, // not queued
			{"u:D", "", false},  // no request id: no latch to read
		} {
			got, err := s.Queued(ctx, rdb, k, arg(c.owner, c.id))
			require.NoError(t, err)
			assert.Equal(t, c.want, got, "%s", c.owner)
		}
		// a latch of the request (a grant, a void): the attempt is made
		require.NoError(t, rdb.Set(ctx, k.AcquireLatch("d"), "granted:9", time.Minute).Err())
		got, err := s.Queued(ctx, rdb, k, arg("u:D", "d"))
		require.NoError(t, err)
		assert.False(t, got)
		// a queue key of another type: 0, no error
		require.NoError(t, rdb.Del(ctx, k.Queue).Err())
		require.NoError(t, rdb.Set(ctx, k.Queue, "x", 0).Err())
		got, err = s.Queued(ctx, rdb, k, arg("u:D", "e"))
		require.NoError(t, err)
		assert.False(t, got)
	})
}

package wire_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Issue 30, item 3: every place a script turns a number into a string
// (a fencing token, a lease, a sleep, a join sequence) writes the exact
// integer. Lua 5.1's own conversion (.., tostring) keeps 14 significant
// digits: on a real redis-server 123456789012346 .. '' is
// "1.2345678901235e+14" (miniredis's Lua writes it exactly, so these cases
// fail on redis-server only). Each case runs one conversion with a value
// past 1e14 and reads back what was written.

// bigToken is a token past 1e14 whose 14-digit rounding differs from it.
const bigToken = int64(123456789012345)

// subscribe listens on channel; the returned function waits for the next
// message.
func subscribe(t *testing.T, ctx context.Context, rdb *redis.Client, channel string) func() string {
	t.Helper()
	ps := rdb.Subscribe(ctx, channel)
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)
	ch := ps.Channel()
	return func() string {
		t.Helper()
		select {
		case m := <-ch:
			return m.Payload
		case <-time.After(10 * time.Second):
			t.Fatalf("no message on %s", channel)
			return ""
		}
	}
}

// fairEngine is one of the fair lock's two engines.
type fairEngine struct {
	name string
	fs   wire.FairSet
}

// fairEngines are both.
func fairEngines() []fairEngine {
	return []fairEngine{{"redisson", wire.Default().Fair()}, {"scalable", wire.ScalableDefault().Fair()}}
}

// fairArgs are a fair call's arguments: a 60 s wait slot, a 5 s grace, an
// acquisition request req ("": none) with a 10 s latch.
func fairArgs(owner, req string, lease int64) wire.Args {
	return wire.Args{Owner: owner, LeaseMs: lease, WaitMs: 60000, NowMs: time.Now().UnixMilli(),
		GraceMs: 5000, AcquireID: req, LatchMs: 10000}
}

func TestLargeNumbersWrittenExactly(t *testing.T) {
	engines := fairEngines()
	args := func(owner, req string) wire.Args { return fairArgs(owner, req, 30000) }
	type tcase struct {
		name string
		run  func(t *testing.T, ctx context.Context, b *redistest.Backend, rdb *redis.Client, k wire.Keys)
	}
	var cases []tcase
	for _, e := range engines {
		// latch_grant: the take's latch "held:<token>", which a copy of
		// the request replies (latch_check), by the fast path (a free lock,
		// nothing queued) and by the full path (the head of a queue).
		cases = append(cases, tcase{e.name + ": fast take's latch and its copy", func(t *testing.T, ctx context.Context, b *redistest.Backend, rdb *redis.Client, k wire.Keys) {
			require.NoError(t, rdb.Set(ctx, k.Token(), bigToken, 0).Err())
			a := args("c:1", "r1")
			ok, tok, err := e.fs.TryLockToken(ctx, rdb, k, a)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, bigToken+1, tok)
			assert.Equal(t, "held:"+strconv.FormatInt(bigToken+1, 10), rdb.Get(ctx, k.AcquireLatch("r1")).Val())
			ok, tok, err = e.fs.TryLockToken(ctx, rdb, k, a) // a copy
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, bigToken+1, tok, "a copy replies the token the first copy got")
		}})
		cases = append(cases, tcase{e.name + ": full take's latch and its copy", func(t *testing.T, ctx context.Context, b *redistest.Backend, rdb *redis.Client, k wire.Keys) {
			x := args("x:1", "")
			ok, err := e.fs.TryLock(ctx, rdb, k, x)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, rdb.Set(ctx, k.Token(), bigToken, 0).Err())
			a := args("c:1", "r1")
			// It joins; no grace, so no handoff: the head takes the lock
			// itself.
			a.GraceMs = 0
			ok, _, _, err = e.fs.TryLockWaitToken(ctx, rdb, k, a)
			require.NoError(t, err)
			require.False(t, ok)
			x.GraceMs = 0
			res, err := e.fs.Unlock(ctx, rdb, k, x)
			require.NoError(t, err)
			require.Equal(t, wire.Released, res)
			ok, _, tok, err := e.fs.TryLockWaitToken(ctx, rdb, k, a)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, bigToken+1, tok)
			assert.Equal(t, "held:"+strconv.FormatInt(bigToken+1, 10), rdb.Get(ctx, k.AcquireLatch("r1")).Val())
			ok, tok, err = e.fs.TryLockToken(ctx, rdb, k, a) // a copy, by the other script
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, bigToken+1, tok)
		}})
	}
	scalable := engines[1].fs
	cases = append(cases,
		// handoff: the grant's latch "granted:<token>", its message
		// "g:<token>:<ttl>:<id>", and the claim's "held:<token>".
		tcase{"scalable: handoff's grant, message and claim", func(t *testing.T, ctx context.Context, b *redistest.Backend, rdb *redis.Client, k wire.Keys) {
			x := args("x:1", "")
			ok, err := scalable.TryLock(ctx, rdb, k, x)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, rdb.Set(ctx, k.Token(), bigToken, 0).Err())
			a := args("c:1", "r1")
			ok, _, _, err = scalable.TryLockWaitToken(ctx, rdb, k, a)
			require.NoError(t, err)
			require.False(t, ok)
			next := subscribe(t, ctx, rdb, k.WaiterChannel("c:1"))
			_, err = scalable.Unlock(ctx, rdb, k, x)
			require.NoError(t, err)
			msg := next()
			g, ok := wire.ParseGrant(msg)
			require.True(t, ok, "the grant message %q", msg)
			assert.Equal(t, bigToken+1, g.Token)
			assert.Equal(t, "granted:"+strconv.FormatInt(bigToken+1, 10), rdb.Get(ctx, k.AcquireLatch("r1")).Val())
			ok, _, tok, err := scalable.TryLockWaitToken(ctx, rdb, k, a) // the claim
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, bigToken+1, tok)
			assert.Equal(t, "held:"+strconv.FormatInt(bigToken+1, 10), rdb.Get(ctx, k.AcquireLatch("r1")).Val())
		}},
		// grant_note: the join's handoff note keeps the lease, the slot and the
		// latch lifetime; a release reads them back to grant.
		tcase{"scalable: join note with a lease and a slot past 1e14", func(t *testing.T, ctx context.Context, b *redistest.Backend, rdb *redis.Client, k wire.Keys) {
			x := args("x:1", "")
			ok, err := scalable.TryLock(ctx, rdb, k, x)
			require.NoError(t, err)
			require.True(t, ok)
			a := args("c:1", "r1")
			a.LeaseMs, a.WaitMs = bigToken, bigToken+2
			ok, _, _, err = scalable.TryLockWaitToken(ctx, rdb, k, a)
			require.NoError(t, err)
			require.False(t, ok)
			note := rdb.HGet(ctx, k.ScalableQueue(), "s:c:1").Val()
			assert.Equal(t, "1|123456789012345|123456789012347|10000|"+k.AcquireLatch("r1"), note)
			_, err = scalable.Unlock(ctx, rdb, k, x)
			require.NoError(t, err)
			assert.Equal(t, "1", rdb.HGet(ctx, k.Name, "c:1").Val(), "the release granted the lock from the note")
		}},
		// wake_front: the note "s:<sleep>:<ahead>" to a waiter that moved
		// to the head while the lock is held, its sleep the lock's PTTL.
		tcase{"scalable: wake-up note with a sleep past 1e14", func(t *testing.T, ctx context.Context, b *redistest.Backend, rdb *redis.Client, k wire.Keys) {
			x := args("x:1", "")
			x.LeaseMs = 2 * bigToken
			if !b.Real() {
				// miniredis keeps a TTL as a time.Duration: at most 9.2e12 ms
				x.LeaseMs = 9e12
			}
			ok, err := scalable.TryLock(ctx, rdb, k, x)
			require.NoError(t, err)
			require.True(t, ok)
			for _, o := range []string{"b:1", "c:1"} {
				ok, _, _, err = scalable.TryLockWaitToken(ctx, rdb, k, args(o, "r-"+o))
				require.NoError(t, err)
				require.False(t, ok)
			}
			next := subscribe(t, ctx, rdb, k.WaiterChannel("c:1"))
			require.NoError(t, scalable.AcquireFailed(ctx, rdb, k, args("b:1", "r-b:1")))
			msg := next()
			n, ok := wire.ParseNote(msg)
			require.True(t, ok, "the note %q", msg)
			assert.Greater(t, n.SleepMs, x.LeaseMs-60000, "the sleep is the lock's PTTL")
			assert.Equal(t, int64(0), n.Ahead)
		}},
		// q_append: a join sequence past 1e14 (the tail's + 1).
		tcase{"scalable: join sequence past 1e14", func(t *testing.T, ctx context.Context, b *redistest.Backend, rdb *redis.Client, k wire.Keys) {
			x := args("x:1", "")
			ok, err := scalable.TryLock(ctx, rdb, k, x)
			require.NoError(t, err)
			require.True(t, ok)
			ok, _, _, err = scalable.TryLockWaitToken(ctx, rdb, k, args("b:1", ""))
			require.NoError(t, err)
			require.False(t, ok)
			big := strconv.FormatInt(bigToken, 10)
			require.NoError(t, rdb.HSet(ctx, k.ScalableQueue(), "hs", big, "ts", big, "s:b:1", big).Err())
			ok, _, _, err = scalable.TryLockWaitToken(ctx, rdb, k, args("c:1", ""))
			require.NoError(t, err)
			require.False(t, ok)
			assert.Equal(t, strconv.FormatInt(bigToken+1, 10), rdb.HGet(ctx, k.ScalableQueue(), "s:c:1").Val())
			assert.Equal(t, strconv.FormatInt(bigToken+1, 10), rdb.HGet(ctx, k.ScalableQueue(), "ts").Val())
		}},
		// fenced_acquire: its latch "held:<token>" and a copy's reply.
		tcase{"fenced: latch and its copy", func(t *testing.T, ctx context.Context, b *redistest.Backend, rdb *redis.Client, k wire.Keys) {
			require.NoError(t, rdb.Set(ctx, k.Token(), bigToken, 0).Err())
			a := args("c:1", "r1")
			ok, _, tok, err := wire.Default().FencedAcquire(ctx, rdb, k, a)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, bigToken+1, tok)
			assert.Equal(t, "held:"+strconv.FormatInt(bigToken+1, 10), rdb.Get(ctx, k.AcquireLatch("r1")).Val())
			ok, _, tok, err = wire.Default().FencedAcquire(ctx, rdb, k, a)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, bigToken+1, tok)
		}},
	)
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				c.run(t, ctx, b, b.Client(t), wire.KeysFor(redistest.Prefix(t)+"lock"))
			})
		})
	}
}

// Tokens are exact up to 2^53 (a Lua number is a double): a take whose
// INCR would pass 2^53 is refused and changes nothing, on every path that
// INCRs; a take that reaches 2^53 exactly is fine, and so is the re-entry
// of its holder (the fair lock's re-entry does not INCR).
func TestTokenRangeEnd(t *testing.T) {
	const end = int64(1) << 53
	endS := strconv.FormatInt(end, 10)
	args := func(owner, req string) wire.Args { return fairArgs(owner, req, 30000) }
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rdb := b.Client(t)
		for _, e := range fairEngines() {
			t.Run(e.name, func(t *testing.T) {
				k := wire.KeysFor(redistest.Prefix(t) + "lock")
				require.NoError(t, rdb.Set(ctx, k.Token(), end-1, 0).Err())
				ok, tok, err := e.fs.TryLockToken(ctx, rdb, k, args("c:1", "r1"))
				require.NoError(t, err)
				require.True(t, ok)
				assert.Equal(t, end, tok, "the take that reaches 2^53")
				ok, tok, err = e.fs.TryLockToken(ctx, rdb, k, args("c:1", "r2")) // re-entry
				require.NoError(t, err)
				require.True(t, ok)
				assert.Equal(t, end, tok, "the holder's re-entry keeps its token")

				// The next take would INCR past 2^53: another owner's
				// attempt is refused, by both scripts, while the lock is
				// held and once it is free; nothing changes (no hold, no
				// latch, no queue).
				_, _, err = e.fs.TryLockToken(ctx, rdb, k, args("d:1", "r3"))
				require.Error(t, err)
				assert.Contains(t, err.Error(), "2^53")
				assert.Equal(t, "2", rdb.HGet(ctx, k.Name, "c:1").Val())
				for _, req := range []string{"u1", "u2"} {
					u := args("c:1", "")
					u.RequestID = req
					res, err := e.fs.Unlock(ctx, rdb, k, u)
					require.NoError(t, err)
					require.NotEqual(t, wire.NotHeld, res)
				}
				for _, try := range []func() error{
					func() error { _, _, err := e.fs.TryLockToken(ctx, rdb, k, args("d:1", "r4")); return err },
					func() error { _, _, _, err := e.fs.TryLockWaitToken(ctx, rdb, k, args("d:1", "r5")); return err },
				} {
					err := try()
					require.Error(t, err)
					assert.Contains(t, err.Error(), "2^53")
					assert.Zero(t, rdb.Exists(ctx, k.Name, k.AcquireLatch("r4"), k.AcquireLatch("r5"), k.ScalableQueue(), k.Queue).Val())
					assert.Equal(t, endS, rdb.Get(ctx, k.Token()).Val())
				}
			})
		}
		t.Run("scalable handoff", func(t *testing.T) {
			// A release does not grant past 2^53: the head is left to take
			// the lock itself, which is refused.
			fs := wire.ScalableDefault().Fair()
			k := wire.KeysFor(redistest.Prefix(t) + "lock")
			ok, err := fs.TryLock(ctx, rdb, k, args("x:1", ""))
			require.NoError(t, err)
			require.True(t, ok)
			ok, _, _, err = fs.TryLockWaitToken(ctx, rdb, k, args("c:1", "r1"))
			require.NoError(t, err)
			require.False(t, ok)
			require.NoError(t, rdb.Set(ctx, k.Token(), end, 0).Err())
			_, err = fs.Unlock(ctx, rdb, k, args("x:1", ""))
			require.NoError(t, err)
			assert.Zero(t, rdb.Exists(ctx, k.Name, k.AcquireLatch("r1")).Val(), "no grant")
			assert.Equal(t, endS, rdb.Get(ctx, k.Token()).Val())
			_, _, _, err = fs.TryLockWaitToken(ctx, rdb, k, args("c:1", "r1"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "2^53")
		})
		t.Run("fenced", func(t *testing.T) {
			// Every fenced acquisition INCRs, re-entries included.
			k := wire.KeysFor(redistest.Prefix(t) + "lock")
			require.NoError(t, rdb.Set(ctx, k.Token(), end-1, 0).Err())
			ok, _, tok, err := wire.Default().FencedAcquire(ctx, rdb, k, args("c:1", "r1"))
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, end, tok)
			_, _, _, err = wire.Default().FencedAcquire(ctx, rdb, k, args("c:1", "r2"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "2^53")
			assert.Equal(t, "1", rdb.HGet(ctx, k.Name, "c:1").Val(), "the refused re-entry added no hold")
			assert.Zero(t, rdb.Exists(ctx, k.AcquireLatch("r2")).Val())
			assert.Equal(t, endS, rdb.Get(ctx, k.Token()).Val())
			for _, v := range []string{"9007199254740993", "-9007199254740994", "9223372036854775806"} {
				require.NoError(t, rdb.Del(ctx, k.Name).Err())
				require.NoError(t, rdb.Set(ctx, k.Token(), v, 0).Err())
				_, _, _, err = wire.Default().FencedAcquire(ctx, rdb, k, args("d:1", ""))
				require.Error(t, err, v)
				assert.Zero(t, rdb.Exists(ctx, k.Name).Val())
				assert.Equal(t, v, rdb.Get(ctx, k.Token()).Val())
			}
		})
	})
}

// The permit-expirable semaphore's token (sem_acquire.lua, which loads
// sem_common.lua, not latch_common.lua): past 1e14 a copy of a granted
// request replies the token the grant got, exactly (its latch used to hold
// "held:1.2345678901235e+14", a token larger than the next grant's), and
// the token ends at 2^53 as the locks' do: the grant that would INCR past
// it is refused and changes nothing.
func TestSemTokenRange(t *testing.T) {
	const end = int64(1) << 53
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rdb := b.Client(t)
		s := wire.Default()
		k := wire.SemKeysFor(redistest.Prefix(t) + "sem")
		ok, err := s.SemTrySetPermits(ctx, rdb, k, 3, "")
		require.NoError(t, err)
		require.True(t, ok)
		now := time.Now().UnixMilli()
		acquire := func(id, req string) (bool, int64, error) {
			return s.SemAcquire(ctx, rdb, k, wire.SemAcquireArgs{IDs: []string{id}, Request: req,
				LeaseMs: 60000, NowMs: now, LatchMs: 10000})
		}

		require.NoError(t, rdb.Set(ctx, k.Token, bigToken, 0).Err())
		got, tok, err := acquire("p1", "r1")
		require.NoError(t, err)
		require.True(t, got)
		assert.Equal(t, bigToken+1, tok)
		got, again, err := acquire("p1", "r1") // a copy of the same request
		require.NoError(t, err)
		require.True(t, got)
		assert.Equal(t, tok, again, "a copy replies the grant's own token, exactly")
		got, next, err := acquire("p2", "r2")
		require.NoError(t, err)
		require.True(t, got)
		assert.Greater(t, next, again, "tokens only grow")

		require.NoError(t, rdb.Set(ctx, k.Token, end, 0).Err())
		avail, err := rdb.Get(ctx, k.Pool).Result()
		require.NoError(t, err)
		_, _, err = acquire("p3", "r3")
		require.Error(t, err, "a grant past 2^53 is refused")
		assert.Contains(t, err.Error(), "2^53")
		v, err := rdb.Get(ctx, k.Token).Int64()
		require.NoError(t, err)
		assert.Equal(t, end, v, "the refused grant left the token key as it was")
		after, err := rdb.Get(ctx, k.Pool).Result()
		require.NoError(t, err)
		assert.Equal(t, avail, after, "the refused grant took no permit")
		n, err := rdb.Exists(ctx, k.RequestLatch("r3")).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the refused grant wrote no latch")
	})
}

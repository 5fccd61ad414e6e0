package fair_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Script-level regression tests of the fair-lock liveness issue.

// scores reads redisson_lock_timeout as member -> score.
func scores(t testing.TB, rdb redis.UniversalClient, k wire.Keys) map[string]int64 {
	t.Helper()
	zs, err := rdb.ZRangeWithScores(context.Background(), k.Timeouts, 0, -1).Result()
	require.NoError(t, err)
	out := map[string]int64{}
	for _, z := range zs {
		out[z.Member.(string)] = int64(z.Score)
	}
	return out
}

// Case 4: in a mixed deployment Java Redisson clients read the zset
// redisson_lock_timeout: a new Java waiter's deadline is the tail's score
// plus its slot, and a Java take lowers every score by the taker's slot. So
// nothing a Go client does when it releases, polls or hands the lock over may
// change a score; only Redisson's own rules may (a take lowers every
// remaining score by the taker's slot; a give-up lowers the scores behind the
// leaver by its slot). The expected scores below are computed from those
// rules alone (shared/redisson-reference.md §5.1), never read back.
func TestGoHandOverKeepsRedissonScores(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		k := wire.KeysFor(redistest.Prefix(t) + "lock")
		s := wire.Default()
		now := time.Now().UnixMilli()
		const slot, lease, grace = 300_000, 30_000, 5_000
		arg := func(owner string) wire.Args {
			return wire.Args{Owner: owner, LeaseMs: lease, WaitMs: slot, NowMs: now, GraceMs: grace,
				RequestID: owner + "-unlock", LatchMs: 10_000}
		}
		ok, _, err := s.FairTryLockWait(ctx, rdb, k, arg("go:1"))
		require.NoError(t, err)
		require.True(t, ok)
		for _, w := range []string{"java-h:1", "java-j:1"} {
			ok, _, err := s.FairTryLockWait(ctx, rdb, k, arg(w))
			require.NoError(t, err)
			require.False(t, ok)
		}
		want := scores(t, rdb, k)
		require.Len(t, want, 2)
		require.InDelta(t, now+lease+slot, want["java-h:1"], 1000, "first waiter: now + PTTL + slot")
		require.Equal(t, want["java-h:1"]+slot, want["java-j:1"], "next waiter: the tail's score + slot")

		// A Go client releases: the head is woken, no score moves.
		res, err := s.FairUnlock(ctx, rdb, k, arg("go:1"))
		require.NoError(t, err)
		require.Equal(t, wire.Released, res)
		assert.Equal(t, want, scores(t, rdb, k), "a Go release changed a score Redisson reads")

		// A Go waiter behind the head polls the free lock: no score moves.
		ok, _, err = s.FairTryLockWait(ctx, rdb, k, arg("java-j:1"))
		require.NoError(t, err)
		require.False(t, ok)
		assert.Equal(t, want, scores(t, rdb, k), "a Go poll changed a score Redisson reads")

		// A new waiter joins before the head takes: Redisson's rule.
		ok, _, err = s.FairTryLockWait(ctx, rdb, k, arg("java-k:1"))
		require.NoError(t, err)
		require.False(t, ok)
		want["java-k:1"] = want["java-j:1"] + slot
		assert.Equal(t, want, scores(t, rdb, k))

		// The head takes: every remaining score drops by its slot, exactly.
		ok, _, err = s.FairTryLockWait(ctx, rdb, k, arg("java-h:1"))
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, map[string]int64{"java-j:1": want["java-j:1"] - slot, "java-k:1": want["java-k:1"] - slot},
			scores(t, rdb, k))
	})
}

// Case 6: a scalable queue hash with one node field deleted by hand (or by
// eviction). Every script must return promptly (an error, or a repair): a
// script that loops for ever blocks every client of the server (BUSY) until
// SCRIPT KILL. Run on a private redis-server, so a runaway script cannot
// stall other tests.
func TestScalableCorruptNodeDoesNotSpin(t *testing.T) {
	srv := redistest.StartT(t)
	rdb := srv.Backend().Client(t)
	ctx := context.Background()
	t.Cleanup(func() { _ = rdb.Do(context.Background(), "script", "kill").Err() })
	for _, field := range []string{"n", "p", "d"} {
		t.Run("hdel-"+field, func(t *testing.T) {
			k := wire.KeysFor(redistest.Prefix(t) + "lock")
			now := time.Now().UnixMilli()
			sc := wire.ScalableDefault()
			a := func(owner string, slot int64) wire.Args {
				return wire.Args{Owner: owner, LeaseMs: 30_000, WaitMs: slot, NowMs: now, GraceMs: 5000}
			}
			ok, _, err := sc.TryLockWait(ctx, rdb, k, a("holder:1", 1000))
			require.NoError(t, err)
			require.True(t, ok)
			for _, w := range []string{"a:1", "b:1", "c:1"} {
				_, _, err := sc.TryLockWait(ctx, rdb, k, a(w, 1000))
				require.NoError(t, err)
			}
			require.NoError(t, rdb.HDel(ctx, k.ScalableQueue(), field+":a:1").Err())
			require.NoError(t, rdb.Del(ctx, k.Name).Err()) // the holder's lease ended

			// Later, every waiter's deadline has passed: the scripts prune.
			late := a("d:1", 1000)
			late.NowMs = now + 120_000
			calls := map[string]func(ctx context.Context) error{
				"tryLockWait": func(ctx context.Context) error { _, _, err := sc.TryLockWait(ctx, rdb, k, late); return err },
				"tryLock":     func(ctx context.Context) error { _, err := sc.TryLock(ctx, rdb, k, late); return err },
				"unlock":      func(ctx context.Context) error { _, err := sc.Unlock(ctx, rdb, k, late); return err },
				"forceUnlock": func(ctx context.Context) error { _, err := sc.ForceUnlock(ctx, rdb, k, late); return err },
				"acquireFailed": func(ctx context.Context) error {
					return sc.AcquireFailed(ctx, rdb, k, wire.Args{Owner: "a:1", WaitMs: 1000})
				},
			}
			for _, name := range []string{"acquireFailed", "unlock", "forceUnlock", "tryLock", "tryLockWait"} {
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				start := time.Now()
				err := calls[name](cctx)
				cancel()
				took := time.Since(start)
				if took > 2*time.Second || err != nil && (strings.Contains(err.Error(), "deadline") ||
					strings.Contains(err.Error(), "timeout") || strings.Contains(err.Error(), "BUSY")) {
					_ = rdb.Do(context.Background(), "script", "kill").Err()
					t.Fatalf("%s after HDEL %s:a:1 did not return: %v after %v", name, field, err, took)
				}
				t.Logf("%s: %v in %v", name, err, took.Round(time.Millisecond))
			}
		})
	}
}

// Malformed state, engine by engine: keys or fields deleted or edited by
// hand (or evicted), keys of the wrong type. Every script must return
// promptly, with a result or a clear error, never spin; and where the state
// is ours to repair (the scalable queue, the head grace key), a new waiter
// gets the lock once the lock is free and the old deadlines have passed.
// Redisson's own keys of the wrong type are left alone: the scripts reply
// with Redis's WRONGTYPE error.
func TestMalformedStateNeverSpins(t *testing.T) {
	type corruption struct {
		name  string
		do    func(ctx context.Context, rdb *redis.Client, k wire.Keys) error
		heals bool // a new waiter gets the lock afterwards
	}
	grace := func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
		return rdb.HSet(ctx, k.Grace(), "x", "y").Err()
	}
	graceForever := func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
		return rdb.Set(ctx, k.Grace(), "a:1", 0).Err()
	}
	hdel := func(f string) func(context.Context, *redis.Client, wire.Keys) error {
		return func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
			return rdb.HDel(ctx, k.ScalableQueue(), f).Err()
		}
	}
	hset := func(f, v string) func(context.Context, *redis.Client, wire.Keys) error {
		return func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
			return rdb.HSet(ctx, k.ScalableQueue(), f, v).Err()
		}
	}
	engines := []struct {
		engineCase
		set         wire.FairSet
		corruptions []corruption
	}{
		{engineCases[0], wire.Default().Fair(), []corruption{
			{"timeouts deleted (ghosts, H1)", func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
				return rdb.Del(ctx, k.Timeouts).Err()
			}, true},
			{"a waiter's deadline deleted", func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
				return rdb.ZRem(ctx, k.Timeouts, "b:1").Err()
			}, true},
			{"a waiter only in the zset", func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
				return rdb.LRem(ctx, k.Queue, 0, "b:1").Err()
			}, true},
			{"a waiter queued twice", func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
				return rdb.RPush(ctx, k.Queue, "a:1").Err()
			}, true},
			{"grace key of the wrong type", grace, true},
			{"grace key without expiry", graceForever, true},
			{"queue of the wrong type", func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
				if err := rdb.Del(ctx, k.Queue).Err(); err != nil {
					return err
				}
				return rdb.Set(ctx, k.Queue, "x", 0).Err()
			}, false},
		}},
		{engineCases[1], wire.ScalableDefault().Fair(), []corruption{
			{"head's next deleted", hdel("n:a:1"), true},
			{"head's prev deleted", hdel("p:a:1"), true},
			{"head's delta deleted", hdel("d:a:1"), true},
			{"middle node's next deleted", hdel("n:b:1"), true},
			{"middle node's prev deleted", hdel("p:b:1"), true},
			{"tail's next deleted", hdel("n:c:1"), true},
			{"h deleted", hdel("h"), true},
			{"t deleted", hdel("t"), true},
			{"hd deleted", hdel("hd"), true},
			{"td deleted", hdel("td"), true},
			{"hd not a number", hset("hd", "x"), true},
			{"a delta not a number", hset("d:b:1", "x"), true},
			{"a link to nobody", hset("n:b:1", "nobody:1"), true},
			{"a link to itself", hset("n:a:1", "a:1"), true},
			{"a cycle", hset("n:c:1", "a:1"), true},
			{"queue of the wrong type", func(ctx context.Context, rdb *redis.Client, k wire.Keys) error {
				if err := rdb.Del(ctx, k.ScalableQueue()).Err(); err != nil {
					return err
				}
				return rdb.Set(ctx, k.ScalableQueue(), "x", 0).Err()
			}, true},
			{"grace key of the wrong type", grace, true},
			{"grace key without expiry", graceForever, true},
		}},
	}
	backends := []struct {
		name string
		b    func(t *testing.T) *redistest.Backend
	}{
		{"miniredis", func(t *testing.T) *redistest.Backend { return redistest.Mini(t) }},
		{"redis-server", func(t *testing.T) *redistest.Backend { return redistest.StartT(t).Backend() }},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			rdb := be.b(t).Client(t)
			for _, e := range engines {
				for _, c := range e.corruptions {
					t.Run(e.name+"/"+c.name, func(t *testing.T) {
						malformed(t, rdb, e.set, c.do, c.heals)
					})
				}
			}
		})
	}
}

func malformed(t *testing.T, rdb *redis.Client, set wire.FairSet, corrupt func(context.Context, *redis.Client, wire.Keys) error, heals bool) {
	ctx := context.Background()
	k := wire.KeysFor(redistest.Prefix(t) + "lock")
	now := time.Now().UnixMilli()
	a := func(owner string, at int64) wire.Args {
		return wire.Args{Owner: owner, LeaseMs: 30_000, WaitMs: 60_000, NowMs: at, GraceMs: 5000,
			RequestID: owner + "-r", LatchMs: 10_000}
	}
	ok, _, err := set.TryLockWait(ctx, rdb, k, a("holder:1", now))
	require.NoError(t, err)
	require.True(t, ok)
	for _, w := range []string{"a:1", "b:1", "c:1"} {
		_, _, err := set.TryLockWait(ctx, rdb, k, a(w, now))
		require.NoError(t, err)
	}
	require.NoError(t, corrupt(ctx, rdb, k))

	// prompt: each script, at the time of the state and an hour later
	// (every deadline passed: the scripts prune), returns within 2 s.
	prompt := func(what string, call func(ctx context.Context) error) error {
		done := make(chan error, 1)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		go func() { done <- call(cctx) }()
		select {
		case err := <-done:
			took := time.Since(start)
			require.Less(t, took, 2*time.Second, "%s took %v (%v)", what, took, err)
			return err
		case <-time.After(5 * time.Second):
			_ = rdb.Do(context.Background(), "script", "kill").Err()
			t.Fatalf("%s did not return: a script spins", what)
		}
		return nil
	}
	var errs []string
	for _, at := range []int64{now, now + 3_600_000} {
		for _, o := range []string{"a:1", "b:1", "c:1", "d:1"} {
			calls := []struct {
				name string
				call func(ctx context.Context) error
			}{
				{"tryLockWait", func(ctx context.Context) error { _, _, err := set.TryLockWait(ctx, rdb, k, a(o, at)); return err }},
				{"tryLock", func(ctx context.Context) error { _, err := set.TryLock(ctx, rdb, k, a(o, at)); return err }},
				{"unlock", func(ctx context.Context) error { _, err := set.Unlock(ctx, rdb, k, a(o, at)); return err }},
				{"acquireFailed", func(ctx context.Context) error { return set.AcquireFailed(ctx, rdb, k, a(o, at)) }},
			}
			for _, c := range calls {
				if err := prompt(c.name+" by "+o, c.call); err != nil {
					errs = append(errs, c.name+": "+err.Error())
				}
			}
		}
	}
	require.NoError(t, prompt("forceUnlock", func(ctx context.Context) error {
		_, err := set.ForceUnlock(ctx, rdb, k, a("admin:1", now))
		return err
	}), "a holder can always be forced out")
	if !heals {
		for _, e := range errs {
			assert.Contains(t, e, "WRONGTYPE")
		}
		return
	}
	assert.Empty(t, errs, "scripts failed on a state they repair")
	// Live again: with the lock free and every old deadline passed, a new
	// waiter takes the lock (after at most one grace, on the server's clock:
	// the grace key is removed so the test does not wait for it).
	later := now + 3_600_000
	for i := 0; ; i++ {
		require.NoError(t, rdb.Del(ctx, k.Grace()).Err())
		ok, _, err := set.TryLockWait(ctx, rdb, k, a("z:1", later))
		require.NoError(t, err)
		if ok {
			break
		}
		require.Less(t, i, 10, "a new waiter never got the lock")
	}
}

// An unlock sent without a latch lifetime (LatchMs 0: the client's cleanup
// gives back a hold a cancelled acquisition may have taken, with the
// acquisition's arguments) must still release and wake the waiters. SET
// with PX 0 is an error: the script used to fail after deleting the lock,
// before waking anyone, so the next waiter slept its whole lease with the
// lock free.
func TestUnlockWithoutLatchStillWakes(t *testing.T) {
	for _, e := range []struct {
		name string
		set  wire.FairSet
	}{{"redisson", wire.Default().Fair()}, {"scalable", wire.ScalableDefault().Fair()}} {
		t.Run(e.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				rdb := b.Client(t)
				name := redistest.Prefix(t) + "lock"
				k := wire.KeysFor(name)
				messages := recordMessages(t, b.Client(t), name)
				now := time.Now().UnixMilli()
				a := func(owner string) wire.Args {
					return wire.Args{Owner: owner, LeaseMs: 30_000, WaitMs: 60_000, NowMs: now, RequestID: "r-" + owner}
				}
				ok, _, err := e.set.TryLockWait(ctx, rdb, k, a("x:1"))
				require.NoError(t, err)
				require.True(t, ok)
				ok, _, err = e.set.TryLockWait(ctx, rdb, k, a("w:1"))
				require.NoError(t, err)
				require.False(t, ok)
				res, err := e.set.Unlock(ctx, rdb, k, a("x:1"))
				require.NoError(t, err)
				assert.Equal(t, wire.Released, res)
				assert.Zero(t, rdb.Exists(ctx, k.Name).Val())
				require.Eventually(t, func() bool {
					return slices.Contains(messages(), k.WaiterChannel("w:1")+"=0")
				}, 10*time.Second, time.Millisecond, "the head was not woken: %v", messages())
			})
		})
	}
}

package fair_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/lua"
)

// Script-level regression tests of the fair-lock liveness issue.

// scores reads redisson_lock_timeout as member -> score.
func scores(t testing.TB, rdb redis.UniversalClient, k lua.Keys) map[string]int64 {
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
		k := lua.KeysFor(redistest.Prefix(t) + "lock")
		s := lua.Default
		now := time.Now().UnixMilli()
		const slot, lease, grace = 300_000, 30_000, 5_000
		arg := func(owner string) lua.Args {
			return lua.Args{Owner: owner, LeaseMs: lease, WaitMs: slot, NowMs: now, GraceMs: grace,
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
		require.Equal(t, lua.Released, res)
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
			k := lua.KeysFor(redistest.Prefix(t) + "lock")
			now := time.Now().UnixMilli()
			sc := lua.ScalableDefault
			a := func(owner string, slot int64) lua.Args {
				return lua.Args{Owner: owner, LeaseMs: 30_000, WaitMs: slot, NowMs: now, GraceMs: 5000}
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
					return sc.AcquireFailed(ctx, rdb, k, lua.Args{Owner: "a:1", WaitMs: 1000})
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

package wire_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// A late copy of a granted acquisition request claims the grant without
// shortening the lock's TTL (issue 33): after the grant the owner re-entered
// with a longer lease, which its client trusts; the copy's shorter lease
// must not cut it (nobody would be woken, and the key could expire while
// the client still counts the re-entry valid). Both engines: on the
// Redisson engine the waiter is one of this library's (version-8 client id).
func TestClaimNeverShortensTheLease(t *testing.T) {
	const waiter = "0000000c-0000-8000-8000-00000000000c:1"
	args := fairArgs
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rdb := b.Client(t)
		for _, e := range fairEngines() {
			t.Run(e.name, func(t *testing.T) {
				k := wire.KeysFor(redistest.Prefix(t) + "lock")
				ok, _, err := e.fs.TryLockToken(ctx, rdb, k, args("h:1", "h1", 30000))
				require.NoError(t, err)
				require.True(t, ok)
				ok, _, _, err = e.fs.TryLockWaitToken(ctx, rdb, k, args(waiter, "r1", 30000))
				require.NoError(t, err)
				require.False(t, ok, "queued")
				u := args("h:1", "", 30000)
				u.RequestID = "u1"
				res, err := e.fs.Unlock(ctx, rdb, k, u)
				require.NoError(t, err)
				require.Equal(t, wire.Released, res)
				require.True(t, rdb.HExists(ctx, k.Name, waiter).Val(), "the release granted the lock to the waiter")
				assert.LessOrEqual(t, rdb.PTTL(ctx, k.Name).Val(), 10*time.Second, "the grant's TTL: two graces")

				ok, _, err = e.fs.TryLockToken(ctx, rdb, k, args(waiter, "r2", 120000)) // re-entry, a longer lease
				require.NoError(t, err)
				require.True(t, ok)
				ok, _, _, err = e.fs.TryLockWaitToken(ctx, rdb, k, args(waiter, "r1", 30000)) // the late copy claims
				require.NoError(t, err)
				require.True(t, ok)
				assert.Greater(t, rdb.PTTL(ctx, k.Name).Val(), 60*time.Second, "the claim kept the re-entry's longer lease")
				assert.Equal(t, "2", rdb.HGet(ctx, k.Name, waiter).Val(), "the claim adds no hold")
			})
		}
	})
}

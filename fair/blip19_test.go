package fair_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/lua"
)

// Issue 19 (e): a deadline key of the wrong type (the Redisson engine's
// zset; the scalable engine repairs its own queue key instead) fails the
// waiting call at once with the script's error. Leaving the queue fails on the same key
// for good, so it is not retried while the caller waits (it used to hold
// the caller for the whole cleanup timeout).
func TestWrongTypedQueueKeyIsReportedAtOnce(t *testing.T) {
	for _, e := range engineCases[:1] {
		t.Run(e.name, func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			name := redistest.Prefix(t) + "lock"
			direct := b.Client(t)
			c := newClient(t, b.Client(t), fairlock.WithCleanupTimeout(5*time.Second))
			holder := newMutex(t, c, name, e.opt)
			require.NoError(t, holder.Lock(ctx))
			k := lua.KeysFor(name)
			require.NoError(t, direct.Set(ctx, k.Timeouts, "not a queue", 0).Err())
			m := newMutex(t, c, name, e.opt, fair.WithWaitSlot(time.Minute))
			start := time.Now()
			ok, err := m.TryLockFor(ctx, 10*time.Second, 0)
			took := time.Since(start)
			require.False(t, ok)
			require.Error(t, err)
			var re redis.Error
			assert.True(t, errors.As(err, &re), "the script's error is wrapped: %v", err)
			assert.Less(t, took, 2*time.Second, "reported after %v", took)
			require.NoError(t, holder.Unlock(ctx))
		})
	}
}

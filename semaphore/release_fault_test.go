package semaphore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/semaphore"
)

// A Release that Redis never saw (the connection was cut) must not leave
// the permits held by the watchdog: the release is retried in the
// background, and the permits come back once Redis is reachable again, and
// at the latest when their lease ends. (faulttests TestReplicaFailover,
// seeds 2849316605086693884 and 335824925264633342: a whole-pool hold whose
// Release failed during the failover was renewed for 15-18 s and the fair
// semaphore granted nothing meanwhile.)
func TestUnconfirmedReleaseStopsRenewingAndIsRetried(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	ctx := context.Background()
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	// The watchdog's lease (renewed every 10 s): long enough that the key
	// cannot expire by itself before the background release reaches it on
	// a loaded machine (an expiry is no confirmed release, and the loss
	// would rightly stay).
	const lease = 30 * time.Second
	c, err := fairlock.NewClient(rdb, fairlock.WithLease(lease), fairlock.WithCleanupTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	f, err := semaphore.NewFair(c, redistest.Prefix(t)+"fair")
	require.NoError(t, err)
	setPool(t, f, 2)
	other := sameFair(t, b, f)

	all, err := f.Acquire(ctx, 2, 0) // watchdog-kept
	require.NoError(t, err)
	undo := p.Cut() // what was sent is lost, as on a primary that died
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	err = all.Release(rctx)
	cancel()
	require.Error(t, err, "Redis never saw the release")
	t.Logf("Release: %v", err)
	undo() // Redis is reachable again: a watchdog still renewing would keep the permits
	select {
	case <-all.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the hold whose release was sent still looks held: its watchdog renews it")
	}
	t.Logf("Err after the failed Release: %v", all.Err())
	start := time.Now()
	// Before the fix, the watchdog renewed the permits for as long as the
	// client lived: nothing was granted within the wait.
	got, err := other.TryAcquire(ctx, 2, 3*lease, 0)
	require.NoError(t, err)
	require.NotNil(t, got, "the permits never came back")
	t.Logf("granted %v after the network came back", time.Since(start))
	require.NoError(t, got.Release(ctx))
	// The background release was confirmed: the loss is withdrawn.
	assert.Eventually(t, func() bool { return all.Err() == nil }, 30*time.Second, 10*time.Millisecond)
}

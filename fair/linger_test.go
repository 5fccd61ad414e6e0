package fair_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// Issue 33: a waiter's wake channel stays subscribed after its wait
// (pubsub.Linger), and the owner's next wait joins that subscription before
// its first attempt: it waits on that attempt's reply, with no re-check,
// and every release still wakes it. Before the fix every wait subscribed
// again and re-checked (two attempts before the release); a first version
// of the fix that left the subscribing wait's waiter registered after its
// Lock returned lost the third wait's wake-up (the deadline ran out).
func TestWaitsReuseTheSubscription(t *testing.T) {
	for _, e := range engineCases {
		t.Run(e.name, func(t *testing.T) {
			be := redistest.Real(t)
			ctx := testCtx(t)
			rdb := be.Client(t)
			name := redistest.Prefix(t) + "lock"
			holder := newMutex(t, newClient(t, be.Client(t)), name, e.opt)
			wrdb := be.Client(t)
			var evals atomic.Int64
			wrdb.AddHook(countHook{n: &evals})
			waiter := newMutex(t, newClient(t, wrdb), name, e.opt)
			for round := 1; round <= 4; round++ {
				before := evals.Load()
				got := holdAndWait(t, ctx, holder, waiter)
				e.waitQueued(t, rdb, name, 1)
				want := int64(2) // an attempt, a subscription, a re-check
				if round > 1 {
					want = 1 // the subscription is live: no re-check
				}
				require.Eventually(t, func() bool { return evals.Load()-before >= want }, 10*time.Second, time.Millisecond)
				time.Sleep(200 * time.Millisecond) // a re-check, if any, has run
				require.Equal(t, want, evals.Load()-before, "round %d: attempts before the release", round)
				releaseAndAwait(t, ctx, holder, waiter, got, 10*time.Second, 5*time.Second, fmt.Sprintf("round %d", round))
			}
		})
	}
}

// A subscription kept for reuse whose pub/sub connection is killed while a
// wait that reused it sleeps: the release's message is lost with the
// connection, and the hub's new connection wakes the waiter once it is
// subscribed again, so the waiter still takes the lock well within its
// lease (30 s; the wait's deadline is 20 s).
func TestReusedSubscriptionSurvivesAKilledConnection(t *testing.T) {
	for _, e := range engineCases {
		t.Run(e.name, func(t *testing.T) {
			be := redistest.Real(t)
			ctx := testCtx(t)
			rdb := be.Client(t)
			name := redistest.Prefix(t) + "lock"
			holder := newMutex(t, newClient(t, be.Client(t)), name, e.opt)
			cname := strings.ReplaceAll(redistest.Prefix(t), ":", "") + "w"
			wrdb := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, ClientName: cname})
			t.Cleanup(func() { _ = wrdb.Close() })
			var evals atomic.Int64
			wrdb.AddHook(countHook{n: &evals})
			waiter := newMutex(t, newClient(t, wrdb), name, e.opt)
			wait := func(kill bool) {
				before := evals.Load()
				got := holdAndWait(t, ctx, holder, waiter)
				e.waitQueued(t, rdb, name, 1)
				require.Eventually(t, func() bool { return evals.Load() > before }, 10*time.Second, time.Millisecond)
				if kill {
					killPubSub(t, rdb, cname)
				}
				releaseAndAwait(t, ctx, holder, waiter, got, 15*time.Second, 10*time.Second, fmt.Sprintf("kill %v", kill))
			}
			wait(false) // subscribes; the subscription lingers
			wait(true)  // reuses it; its connection is killed during the wait
			wait(false) // the rebuilt subscription serves the next wait
		})
	}
}

// holdAndWait takes the lock with holder and starts waiter's Lock (its
// wait bounded at 20 s); the channel gets its result.
func holdAndWait(t *testing.T, ctx context.Context, holder, waiter *fair.Mutex) <-chan error {
	t.Helper()
	require.NoError(t, holder.Lock(ctx))
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got <- waiter.Lock(wctx)
	}()
	return got
}

// releaseAndAwait releases holder's lock and requires the waiter to be
// granted within wake (and within quick of the release), then releases it.
func releaseAndAwait(t *testing.T, ctx context.Context, holder, waiter *fair.Mutex, got <-chan error, wake, quick time.Duration, what string) {
	t.Helper()
	t0 := time.Now()
	require.NoError(t, holder.Unlock(ctx))
	select {
	case err := <-got:
		require.NoError(t, err, what)
	case <-time.After(wake):
		t.Fatalf("%s: the release did not wake the waiter within %v", what, wake)
	}
	require.Less(t, time.Since(t0), quick, what)
	require.NoError(t, waiter.Unlock(ctx))
}

// killPubSub kills the pub/sub connections of the client named cname.
func killPubSub(t *testing.T, rdb *redis.Client, cname string) {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	require.NoError(t, err)
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+cname+" ") || !(strings.Contains(line, " sub=1") || strings.Contains(line, " sub=2") || strings.Contains(line, " sub=3")) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				require.NoError(t, rdb.Do(context.Background(), "client", "kill", "id", id).Err())
				killed++
			}
		}
	}
	require.Positive(t, killed, "no pub/sub connection of %s", cname)
}

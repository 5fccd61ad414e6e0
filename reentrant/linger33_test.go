package reentrant_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Issue 33: a fair waiter's own wake channel stays subscribed for a while
// after its wait (the next wait of the same owner reuses it), but a
// reentrant lock's channel, which every waiter shares and this client's own
// releases publish on, is unsubscribed when the wait ends: kept, it would
// deliver the client's own releases to it. Stated by order, not by time:
// one client waits on a fair lock, then on a reentrant one; the reentrant
// channel's subscription must end while the fair channel's, from the
// earlier wait, still lingers. Before the fix both lingered alike (the
// reentrant one ended last).
func TestSharedChannelIsNotKeptAfterTheWait(t *testing.T) {
	be := redistest.Real(t)
	ctx := testCtx(t)
	rdb := be.Client(t)
	prefix := redistest.Prefix(t)
	holderC, waiterC := newClient(t, be.Client(t)), newClient(t, be.Client(t))
	fh, err := fair.New(holderC, prefix+"fair")
	require.NoError(t, err)
	fw, err := fair.New(waiterC, prefix+"fair")
	require.NoError(t, err)
	rh, rw := newMutex(t, holderC, prefix+"re"), newMutex(t, waiterC, prefix+"re")
	numsub := func(ch string) int64 { return rdb.PubSubNumSub(ctx, ch).Val()[ch] }
	fairCh := wire.KeysFor(prefix + "fair").WaiterChannel(fw.Owner())
	reCh := wire.KeysFor(prefix + "re").Channel

	handoff := func(holder, waiter locker, ch string) {
		require.NoError(t, holder.Lock(ctx))
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(ctx) }()
		require.Eventually(t, func() bool { return numsub(ch) == 1 }, 10*time.Second, time.Millisecond,
			"the waiter never subscribed to %s", ch)
		require.NoError(t, holder.Unlock(ctx))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not woken")
		}
		require.NoError(t, waiter.Unlock(ctx))
	}
	handoff(fh, fw, fairCh)
	handoff(rh, rw, reCh)
	require.Eventually(t, func() bool { return numsub(reCh) == 0 }, 30*time.Second, time.Millisecond,
		"the reentrant lock's channel stayed subscribed")
	require.Equal(t, int64(1), numsub(fairCh),
		"the reentrant channel's subscription ended only after the fair one's, which began to linger earlier: it lingered too")
	require.Eventually(t, func() bool { return numsub(fairCh) == 0 }, 30*time.Second, 10*time.Millisecond,
		"the fair waiter's channel never stopped lingering")
}

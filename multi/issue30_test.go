package multi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/multi"
	"github.com/fairlock-go/fairlock/reentrant"
)

// Issue 30, 2.1: a MultiLock held twice, whose first Unlock fails for one
// member (its Redis unreachable), still holds every member after the next
// nested Lock and Unlock: it holds one count. Before the fix the failed
// member was kept in a left-over list and released again by the next
// acquisition, while the member's own handle retried the same release in
// the background: two releases of one count, and the key was deleted while
// the MultiLock still held it.
func TestMultiLockReentryKeepsMembersAfterFailedUnlock(t *testing.T) {
	ctx := testCtx(t)
	srv := redistest.Real(t)
	p := faultproxy.Start(t, srv.Addr)
	direct := newClient(t, srv.Client(t))
	cut := newClient(t, redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1}))
	other := newClient(t, srv.Client(t))
	ns := names(t, 2)
	a, err := reentrant.New(direct, ns[0])
	require.NoError(t, err)
	b, err := reentrant.New(cut, ns[1])
	require.NoError(t, err)
	l := newMulti(t, a, b)

	require.NoError(t, l.Lock(ctx))
	require.NoError(t, l.Lock(ctx)) // count 2
	undo := p.Cut()
	err = l.Unlock(ctx) // count 1: b's release is not confirmed
	require.Error(t, err)
	var me *multi.MemberError
	require.ErrorAs(t, err, &me)
	require.Equal(t, 1, me.Index)
	undo()

	require.NoError(t, l.Lock(ctx))   // count 2
	require.NoError(t, l.Unlock(ctx)) // count 1
	held, err := l.IsHeld(ctx)
	require.NoError(t, err)
	require.True(t, held, "the MultiLock holds one count: every member is held")
	require.ElementsMatch(t, ns, locked(t, ctx, direct, ns))
	for _, n := range ns {
		m, err := reentrant.New(other, n)
		require.NoError(t, err)
		ok, err := m.TryLock(ctx)
		require.NoError(t, err)
		require.False(t, ok, "another client took %s while the MultiLock holds it", n)
	}
	require.NoError(t, l.Unlock(ctx))
	require.Empty(t, locked(t, ctx, direct, ns))
	_ = errors.New
	_ = context.Background
	_ = time.Second
	_ = fairlock.ErrLost
}

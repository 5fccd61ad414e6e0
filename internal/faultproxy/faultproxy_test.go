package faultproxy_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

func TestFaults(t *testing.T) {
	b := redistest.Real(t)
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())

	// Stall: the command times out on the client, and reaches Redis after undo.
	key := redistest.Prefix(t) + "k"
	undo := p.Stall()
	err := rdb.Incr(ctx, key).Err()
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a timeout, got %v", err)
	undo()
	direct := b.Client(t)
	require.Eventually(t, func() bool { return direct.Get(ctx, key).Val() == "1" }, 10*time.Second, 10*time.Millisecond,
		"the stalled INCR reaches Redis after the stall ends")

	// Reset: the pooled connection is closed; the next command redials.
	require.NoError(t, rdb.Ping(ctx).Err())
	p.Reset()
	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 10*time.Second, 10*time.Millisecond)

	// Cut: refused until undone.
	restore := p.Cut()
	require.Error(t, rdb.Ping(ctx).Err())
	restore()
	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 10*time.Second, 10*time.Millisecond)

	// Latency.
	undo = p.Latency(200 * time.Millisecond)
	start := time.Now()
	require.NoError(t, rdb.Ping(ctx).Err())
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	undo()
}

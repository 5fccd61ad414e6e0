package faultproxy_test

import (
	"context"
	"errors"
	"io"
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

// StallReplies lets commands run and holds their replies back; BlackHole
// drops bytes both ways and its undo closes the connections it held; a
// stall survives a Reset; Close ends every connection.
func TestRepliesBlackHoleReset(t *testing.T) {
	b := redistest.Real(t)
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	direct := b.Client(t)
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	key := redistest.Prefix(t) + "k"

	// StallReplies: the INCR runs in Redis while its reply is held.
	undo := p.StallReplies()
	err := rdb.Incr(ctx, key).Err()
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "want a timeout, got %v", err)
	require.Eventually(t, func() bool { return direct.Get(ctx, key).Val() == "1" }, 10*time.Second, 10*time.Millisecond,
		"the INCR ran although its reply was held")
	undo()
	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 10*time.Second, 10*time.Millisecond)

	// BlackHole: a command is dropped (never reaches Redis), the open
	// connection is closed on undo, and a new one works.
	c, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	buf := make([]byte, 64)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	n, err := c.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", string(buf[:n]))
	undo = p.BlackHole()
	_, err = c.Write([]byte("INCR " + key + "\r\n"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = c.Read(buf)
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "a black hole answered: %v", err)
	undo()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(buf)
	require.ErrorIs(t, err, io.EOF, "undo closes the black-holed connection")
	require.Equal(t, "1", direct.Get(ctx, key).Val(), "the black-holed INCR never ran")
	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 10*time.Second, 10*time.Millisecond)

	// A stall is a property of the proxy, not of a connection: after a
	// Reset the new connection is stalled too, and the client's close
	// follows the held command, which still runs when the stall ends.
	undo = p.Stall()
	p.Reset()
	c2, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	_, err = c2.Write([]byte("INCR " + key + "\r\n"))
	require.NoError(t, err)
	require.NoError(t, c2.Close())
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, "1", direct.Get(ctx, key).Val(), "a stalled command ran")
	undo()
	require.Eventually(t, func() bool { return direct.Get(ctx, key).Val() == "2" }, 10*time.Second, 10*time.Millisecond,
		"the held command, sent before the close, runs when the stall ends")

	// Close: the proxy refuses connections.
	p.Close()
	_, err = net.DialTimeout("tcp", p.Addr, 2*time.Second)
	require.Error(t, err)
}

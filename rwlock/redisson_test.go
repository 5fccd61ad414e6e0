package rwlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// A Java service using Redisson's RReadWriteLock, as the reference
// (shared/redisson-reference.md section 7) describes its scripts: written
// from that pseudocode, not from this module's scripts, with Redisson's
// keys, owner ids, arguments and messages. The tests below run it beside
// Go handles on the same lock.

var (
	jReadAcquire = redis.NewScript(`
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local k = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':' .. k, 1)
    redis.call('pexpire', KEYS[2] .. ':' .. k, ARGV[1])
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
    return nil
end
return redis.call('pttl', KEYS[1])`)
	jReadUnlock = redis.NewScript(`
local l = redis.call('get', KEYS[5])
if l then return tonumber(l) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[3], KEYS[2], ARGV[1])
    redis.call('set', KEYS[5], 1, 'px', ARGV[4])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
local c = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if c == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end
redis.call('del', KEYS[3] .. ':' .. (c + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    local maxT = -3
    for _, f in ipairs(redis.call('hkeys', KEYS[1])) do
        local n = tonumber(redis.call('hget', KEYS[1], f))
        if type(n) == 'number' then
            for k = n, 1, -1 do
                maxT = math.max(maxT, redis.call('pttl', KEYS[4] .. ':' .. f .. ':rwlock_timeout:' .. k))
            end
        end
    end
    if maxT > 0 then
        redis.call('pexpire', KEYS[1], maxT)
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
    if mode == 'write' then
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1`)
	jWriteAcquire = redis.NewScript(`
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + tonumber(ARGV[1]))
    return nil
end
return redis.call('pttl', KEYS[1])`)
	jWriteUnlock = redis.NewScript(`
local l = redis.call('get', KEYS[3])
if l then return tonumber(l) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[4], KEYS[2], ARGV[1])
    redis.call('set', KEYS[3], 1, 'px', ARGV[5])
    return nil
end
if mode == 'write' then
    if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
    local c = redis.call('hincrby', KEYS[1], ARGV[3], -1)
    if c > 0 then
        redis.call('pexpire', KEYS[1], ARGV[2])
        redis.call('set', KEYS[3], 0, 'px', ARGV[5])
        return 0
    end
    redis.call('hdel', KEYS[1], ARGV[3])
    if redis.call('hlen', KEYS[1]) == 1 then
        redis.call('del', KEYS[1])
        redis.call(ARGV[4], KEYS[2], ARGV[1])
    else
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
    redis.call('set', KEYS[3], 1, 'px', ARGV[5])
    return 1
end
return nil`)
)

// javaRW is one Java thread's read-write lock.
type javaRW struct {
	rdb        redis.UniversalClient
	name, tid  string // tid: "<uuid>:<thread>"
	req        int
	prefix     string
	channel    string
	latchStart string
}

func newJava(rdb redis.UniversalClient, name string) *javaRW {
	return &javaRW{rdb: rdb, name: name, tid: "0b9e8f3c-5a9d-4c1e-9f0a-2d4c6e8a0b1c:1",
		prefix: "{" + name + "}", channel: "redisson_rwlock:{" + name + "}", latchStart: "redisson_unlock_latch:{" + name + "}:"}
}

func (j *javaRW) latch() string { j.req++; return j.latchStart + "java" + string(rune('a'+j.req)) }

// readLock / writeLock: true when acquired, else the PTTL Redisson returns.
func (j *javaRW) readLock(ctx context.Context, lease time.Duration) (bool, error) {
	err := jReadAcquire.Run(ctx, j.rdb, []string{j.name, j.prefix + ":" + j.tid + ":rwlock_timeout"}, lease.Milliseconds(), j.tid, j.tid+":write").Err()
	return acquired(err)
}

func (j *javaRW) writeLock(ctx context.Context, lease time.Duration) (bool, error) {
	err := jWriteAcquire.Run(ctx, j.rdb, []string{j.name}, lease.Milliseconds(), j.tid+":write").Err()
	return acquired(err)
}

func acquired(err error) (bool, error) {
	if err == redis.Nil {
		return true, nil
	}
	return false, err
}

func (j *javaRW) readUnlock(ctx context.Context) (int64, error) {
	return jReadUnlock.Run(ctx, j.rdb, []string{j.name, j.channel, j.prefix + ":" + j.tid + ":rwlock_timeout", j.prefix, j.latch()},
		"0", j.tid, "publish", 16000).Int64()
}

func (j *javaRW) writeUnlock(ctx context.Context) (int64, error) {
	return jWriteUnlock.Run(ctx, j.rdb, []string{j.name, j.channel, j.latch()}, "1", 30000, j.tid+":write", "publish", 16000).Int64()
}

// A Java reader (Redisson's scripts) and Go handles exclude and share on one
// lock: readers of both share, writers of either wait for readers of the
// other, a Java reader's unlock sets the lock's TTL from the Go reader's
// read-hold key (so the names agree: had they differed, the lock would have
// been deleted under the Go reader), and each side's write unlock wakes the
// other side's waiters on the shared channel.
func TestMixedWithRedisson(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "rw"
		java := newJava(b.Client(t), name)
		c := newClient(t, b.Client(t))
		g, gw := newRW(t, c, name), newRW(t, c, name)

		ok, err := java.readLock(ctx, time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, g.ReadLock().Lock(ctx)) // watchdog lease, 30 s
		ok, err = gw.WriteLock().TryLock(ctx)
		require.NoError(t, err)
		assert.False(t, ok, "a Go writer beside a Java reader")
		ok, err = java.writeLock(ctx, time.Second)
		require.NoError(t, err)
		assert.False(t, ok, "a Java writer beside a Go reader")

		n, err := java.readUnlock(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(0), n, "Redisson: 0 while the Go reader holds")
		pttl, err := rdb.PTTL(ctx, name).Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, 20*time.Second, "the Java unlock did not find the Go reader's hold key")
		held, err := g.ReadLock().IsHeld(ctx)
		require.NoError(t, err)
		assert.True(t, held)
		require.NoError(t, g.ReadLock().Unlock(ctx))

		// A Go writer's unlock wakes a waiting Java reader.
		require.NoError(t, gw.WriteLock().Lock(ctx))
		ok, err = java.readLock(ctx, time.Second)
		require.NoError(t, err)
		require.False(t, ok)
		sub := rdb.Subscribe(ctx, java.channel)
		defer sub.Close()
		_, err = sub.Receive(ctx)
		require.NoError(t, err)
		require.NoError(t, gw.WriteLock().Unlock(ctx))
		msg, err := sub.ReceiveMessage(ctx)
		require.NoError(t, err)
		assert.Equal(t, "1", msg.Payload, "a write unlock wakes every waiter")
		ok, err = java.readLock(ctx, 30*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		n, err = java.readUnlock(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(1), n)

		// A Java writer's unlock wakes a waiting Go writer at once (the
		// Java lease is 30 s: a Go writer not woken would sleep that long).
		ok, err = java.writeLock(ctx, 30*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		got := waitGot(func() error { return gw.WriteLock().Lock(ctx) })
		waitSubscribers(t, b, name, 2)
		n, err = java.writeUnlock(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(1), n)
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(8 * time.Second):
			t.Fatal("the Go writer was not woken by the Java writer's unlock")
		}
		require.NoError(t, gw.WriteLock().Unlock(ctx))
	})
}

package semaphore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// A Java service using Redisson's RPermitExpirableSemaphore, as the
// reference (shared/redisson-reference.md section 15) describes its
// scripts: written from that description, with Redisson's keys, arguments
// (the expiry instant and "now" by the client's clock), permit ids (16 raw
// bytes) and messages, not from this module's scripts. It runs beside Go
// handles on one pool.
var (
	jReclaim = `
local function reclaim(pool, timeouts, channel, pubcmd, now, limit)
    local ids = redis.call('zrangebyscore', timeouts, 0, now, 'limit', 0, limit)
    if #ids > 0 then
        redis.call('zrem', timeouts, unpack(ids))
        local v = redis.call('incrby', pool, #ids)
        if v > 0 then redis.call(pubcmd, channel, v) end
    end
end
`
	// KEYS pool, timeouts, channel; ARGV n, expiry instant, now, never, pubcmd, ids...
	jTryAcquire = redis.NewScript(jReclaim + `
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[5], ARGV[3], ARGV[1])
local v = redis.call('get', KEYS[1])
if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    for i = 6, #ARGV do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]) end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end
    return 'OK'
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[1] ~= nil and first[2] ~= ARGV[4] then return ':' .. tostring(first[2]) end
return nil`)
	// KEYS pool, channel, timeouts; ARGV id, 1, now, pubcmd
	jTryRelease = redis.NewScript(`
local e = redis.call('zscore', KEYS[3], ARGV[1])
if redis.call('zrem', KEYS[3], ARGV[1]) ~= 1 then return 0 end
local v = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], v)
if tonumber(e) <= tonumber(ARGV[3]) then return 0 end
return 1`)
	// KEYS pool, channel; ARGV n, pubcmd
	jTrySetPermits = redis.NewScript(`
if redis.call('get', KEYS[1]) == false then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0`)
	// KEYS pool, timeouts, channel; ARGV now, pubcmd
	jAvailable = redis.NewScript(jReclaim + `
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1], -1)
local v = redis.call('get', KEYS[1])
return v == false and 0 or tonumber(v)`)
	// KEYS pool, timeouts, channel; ARGV id, never, now, pubcmd
	jLeaseTime = redis.NewScript(jReclaim + `
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[4], ARGV[3], -1)
local e = redis.call('zscore', KEYS[2], ARGV[1])
if e == false then return 0 end
if tonumber(e) == tonumber(ARGV[2]) then return -1 end
return tonumber(e) - tonumber(ARGV[3])`)
)

const jNever = "922337203685477"

// javaSem is one Java client's view of the semaphore.
type javaSem struct {
	rdb *redis.Client
	k   wire.SemKeys
}

func (j javaSem) now() int64 { return time.Now().UnixMilli() }

// tryAcquire is Redisson's tryAcquire(n, lease) without a wait: the ids
// (hex) or nil, and the reply when not acquired.
func (j javaSem) tryAcquire(t *testing.T, n int, lease time.Duration) ([]string, any) {
	t.Helper()
	exp := jNever
	if lease > 0 {
		exp = strconv.FormatInt(j.now()+lease.Milliseconds(), 10)
	}
	args := []any{n, exp, j.now(), jNever, "publish"}
	var hexIDs []string
	for range n {
		var b [16]byte
		_, _ = rand.Read(b[:])
		args = append(args, string(b[:]))
		hexIDs = append(hexIDs, hex.EncodeToString(b[:]))
	}
	r, err := jTryAcquire.Run(context.Background(), j.rdb, []string{j.k.Pool, j.k.Timeouts, j.k.Channel}, args...).Result()
	if err == redis.Nil {
		return nil, nil
	}
	require.NoError(t, err)
	if r == "OK" {
		return hexIDs, nil
	}
	return nil, r
}

func (j javaSem) tryRelease(t *testing.T, id string) bool {
	t.Helper()
	raw, err := hex.DecodeString(id)
	require.NoError(t, err)
	n, err := jTryRelease.Run(context.Background(), j.rdb, []string{j.k.Pool, j.k.Channel, j.k.Timeouts}, string(raw), 1, j.now(), "publish").Int64()
	require.NoError(t, err)
	return n == 1
}

func (j javaSem) available(t *testing.T) int64 {
	t.Helper()
	n, err := jAvailable.Run(context.Background(), j.rdb, []string{j.k.Pool, j.k.Timeouts, j.k.Channel}, j.now(), "publish").Int64()
	require.NoError(t, err)
	return n
}

func (j javaSem) leaseTime(t *testing.T, id string) int64 {
	t.Helper()
	raw, _ := hex.DecodeString(id)
	n, err := jLeaseTime.Run(context.Background(), j.rdb, []string{j.k.Pool, j.k.Timeouts, j.k.Channel}, string(raw), jNever, j.now(), "publish").Int64()
	require.NoError(t, err)
	return n
}

// Java (Redisson's scripts) and Go share one pool: each sees the other's
// permits, releases them by id, and wakes the other's waiters.
func TestSemaphoreMixedWithRedissonScripts(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		s, _ := newSem(t, b)
		rdb := b.Client(t)
		// Redisson's names, spelled out (not wire.SemKeysFor): a Go key or
		// channel named otherwise fails this test.
		j := javaSem{rdb: rdb, k: wire.SemKeys{Pool: s.Name(), Timeouts: "{" + s.Name() + "}:timeout", Channel: "redisson_sc:{" + s.Name() + "}"}}
		ps := rdb.Subscribe(ctx, j.k.Channel)
		defer ps.Close()
		_, err := ps.Receive(ctx)
		require.NoError(t, err)

		ok, err := jTrySetPermits.Run(ctx, rdb, []string{j.k.Pool, j.k.Channel}, 2, "publish").Int64()
		require.NoError(t, err)
		require.Equal(t, int64(1), ok)
		got, err := s.TrySetPermits(ctx, 5)
		require.NoError(t, err)
		assert.False(t, got, "Go sees Java's pool")

		goIDs, err := acq(s, ctx, 1, 0)
		require.NoError(t, err)
		javaIDs, reply := j.tryAcquire(t, 1, 0)
		require.NotNil(t, javaIDs, "reply %v", reply)
		none, reply := j.tryAcquire(t, 1, 0)
		assert.Nil(t, none)
		r0, isStr := reply.(string)
		require.True(t, isStr, "Java gets the nearest expiry (the Go permit's watchdog lease): %v", reply)
		assert.True(t, strings.HasPrefix(r0, ":"), r0)
		// A Go permit without lease is kept by the watchdog (the client's
		// lease, 30 s by default), not Redisson's non-expiring score.
		lt0 := j.leaseTime(t, goIDs[0])
		assert.Greater(t, lt0, int64(20_000), "Java reads a Go permit's watchdog lease")
		assert.LessOrEqual(t, lt0, int64(31_000), "Java reads a Go permit's watchdog lease")

		// A Go waiter is woken by Java's release.
		res := make(chan []string, 1)
		go func() {
			ids, err := acq(s, ctx, 1, 0)
			assert.NoError(t, err)
			res <- ids
		}()
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		assert.True(t, j.tryRelease(t, javaIDs[0]))
		var waiterIDs []string
		select {
		case waiterIDs = <-res:
			assert.Less(t, time.Since(start), 10*time.Second)
		case <-time.After(20 * time.Second):
			t.Fatal("the Go waiter did not get Java's permit")
		}
		// Java releases a Go permit by id, Go a Java one.
		assert.True(t, j.tryRelease(t, goIDs[0]))
		javaIDs, _ = j.tryAcquire(t, 1, 300*time.Millisecond)
		require.NotNil(t, javaIDs)
		lt, err := s.LeaseTime(ctx, javaIDs[0])
		require.NoError(t, err)
		assert.Greater(t, lt, time.Duration(0))
		assert.LessOrEqual(t, lt, 300*time.Millisecond+50*time.Millisecond)
		// Java's lease (client clock) runs out; Go's count reclaims it.
		require.Eventually(t, func() bool {
			n, err := s.AvailablePermits(ctx)
			return err == nil && n == 1
		}, 10*time.Second, 50*time.Millisecond)
		require.NoError(t, s.Release(ctx, waiterIDs...))
		assert.Equal(t, int64(2), j.available(t))

		// A Go lease is read by Java as an instant on its clock.
		leased, err := acq(s, ctx, 1, time.Hour)
		require.NoError(t, err)
		assert.InDelta(t, time.Hour.Milliseconds(), j.leaseTime(t, leased[0]), 60_000)
		_, reply = j.tryAcquire(t, 2, 0)
		r, isStr := reply.(string)
		require.True(t, isStr, "Java gets the nearest expiry: %v", reply)
		assert.True(t, strings.HasPrefix(r, ":"), r)

		// Messages on Redisson's channel are counts, as Redisson's waiters read them.
		seen := 0
		for {
			rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			m, err := ps.ReceiveMessage(rctx)
			cancel()
			if err != nil {
				break
			}
			_, perr := strconv.ParseInt(m.Payload, 10, 64)
			assert.NoError(t, perr, "payload %q", m.Payload)
			seen++
		}
		assert.Greater(t, seen, 3)
	})
}

// The rule when ctx ends after the script ran: the caller gets an error and
// holds nothing, and the permits the script took come back. The script is
// slowed down (a busy loop before it answers) so that ctx ends while it
// runs. With the give-back broken (sem_abandon.lua returns nothing), the
// same check fails: permits lost.
func TestSemaphoreCtxEndsAfterTheScriptRan(t *testing.T) {
	redistest.Long(t)
	slow := func(file, src string) string {
		if file == wire.FileSemAcquire {
			src = strings.Replace(src, "local n = tonumber(ARGV[1])",
				"local t0 = redis.call('time')\nrepeat local t = redis.call('time') until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 400000\nlocal n = tonumber(ARGV[1])", 1)
		}
		return src
	}
	run := func(t *testing.T, edit func(file, src string) string) (available int) {
		b := redistest.Real(t)
		s, _ := newSem(t, b, fairlock.Option(core.WithScripts(wire.Edit(edit))))
		ctx := context.Background()
		_, err := s.TrySetPermits(ctx, 3)
		require.NoError(t, err)
		tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		ids, err := acq(s, tctx, 2, 0)
		assert.Nil(t, ids)
		assert.ErrorIs(t, err, fairlock.ErrCanceled)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		// Give the background give-back time (generous).
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := s.AvailablePermits(ctx)
			require.NoError(t, err)
			if n == 3 || time.Now().After(deadline) {
				return n
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Run("ours", func(t *testing.T) {
		assert.Equal(t, 3, run(t, slow), "permits taken after ctx ended were not given back")
	})
	t.Run("broken give-back is caught", func(t *testing.T) {
		broken := func(file, src string) string {
			src = slow(file, src)
			if file == wire.FileSemAbandon {
				src = strings.Replace(src, "removed = removed + redis.call('zrem', KEYS[2], ARGV[i])", "removed = removed + 0", 1)
			}
			return src
		}
		assert.Equal(t, 1, run(t, broken), "the broken give-back should lose the 2 permits")
	})
}

var _ = semaphore.ErrNotHeld

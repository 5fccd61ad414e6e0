package wire

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// FileFencedAcquire is the fenced lock's acquisition script (Redisson's
// RedissonFencedLock): acquire.lua's logic plus an INCR of the token key on
// every success, replying {-1, token} or {pttl, -1}.
const FileFencedAcquire = "fenced_acquire.lua"

// tokenPrefix names the fencing token key, as Redisson's fenced lock.
const tokenPrefix = "redisson_lock_token"

// Token is the lock's fencing token key, "redisson_lock_token:{name}"
// (Redisson's RedissonFencedLock): a counter that never expires, INCRed by
// every acquisition of the fenced lock and by every take of the fair lock.
func (k Keys) Token() string {
	if k.token == "" {
		return prefixName(tokenPrefix, k.Name)
	}
	return k.token
}

// NoToken is the token an acquisition reports when its script returned
// none: a latch written by a version without tokens, or an engine without
// tokens (the reentrant lock).
const NoToken int64 = 0

// tokenReply reads an acquisition reply: "OK" (held, no token), an integer
// (not held: the ttl or sleep), {-1, token} (held) or {pttl, -1} (not held).
func tokenReply(cmd *redis.Cmd) (acquired bool, ttlMs, token int64, err error) {
	v, err := cmd.Result()
	if err != nil {
		return false, 0, 0, err
	}
	switch v := v.(type) {
	case string:
		if v == "OK" {
			return true, 0, NoToken, nil
		}
	case int64:
		return false, v, 0, nil
	case []any:
		if len(v) == 2 {
			a, ok1 := v[0].(int64)
			b, ok2 := v[1].(int64)
			if ok1 && ok2 {
				if b == -1 {
					return false, a, 0, nil
				}
				return true, 0, b, nil
			}
		}
	}
	return false, 0, 0, fmt.Errorf("lua: unexpected acquisition reply %T %v", v, v)
}

// FencedAcquire runs fenced_acquire.lua (reads Owner, LeaseMs, AcquireID,
// LatchMs). It reports whether the owner holds the lock now and the token
// this acquisition got, and otherwise the holder's remaining lease in ms
// (-1: no expiry).
func (s *Scripts) FencedAcquire(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, ttlMs, token int64, err error) {
	c := s.cmd(FileFencedAcquire, 3, 3)
	c.key(k.Name).key(k.Token()).str(a.acquireLatch(k)).num(a.LeaseMs).key(a.Owner).num(a.acquireLatchMs())
	acquired, ttlMs, token, err = tokenReply(c.run(ctx, rdb))
	return acquired, ttlMs, token, acquireErr(err)
}

// TryLockToken is TryLock also reporting the holder's fencing token when
// acquired (fair_token in fair_common.lua: new on a take, the current one on
// a re-entry).
func (f FairSet) TryLockToken(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, token int64, err error) {
	c := f.set.cmd(FileFairTryLock, 8, 8)
	c.key(k.Name).key(k.Queue).key(k.Timeouts).key(k.ScalableQueue()).key(k.Token()).str(a.acquireLatch(k)).key(k.Channel).key(k.Grace())
	c.num(a.LeaseMs).key(a.Owner).now(a.NowMs).num(a.WaitMs).num(a.acquireLatchMs()).num(a.GraceMs).key(a.pubCmd()).key(UnlockMessage)
	acquired, _, token, err = tokenReply(c.run(ctx, rdb))
	return acquired, token, acquireErr(err)
}

// TryLockWaitToken is TryLockWait also reporting the holder's fencing token
// when acquired.
func (f FairSet) TryLockWaitToken(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, ttlMs, token int64, err error) {
	c := f.set.cmd(FileFairTryLockWait, 8, 8)
	c.key(k.Name).key(k.Queue).key(k.Timeouts).key(k.ScalableQueue()).key(k.Token()).str(a.acquireLatch(k)).key(k.Channel).key(k.Grace())
	c.num(a.LeaseMs).key(a.Owner).num(a.WaitMs).now(a.NowMs).num(a.acquireLatchMs()).num(a.GraceMs).key(a.pubCmd()).key(UnlockMessage)
	acquired, ttlMs, token, err = tokenReply(c.run(ctx, rdb))
	return acquired, ttlMs, token, acquireErr(err)
}

// Ahead is a queued caller's place, as fair_try_lock_wait.lua replies it
// when asked (ARGV 9 "1").
type Ahead struct {
	Ahead  int64 // waiters ahead of the caller; -1: unknown
	Joined bool  // this call put the caller at the tail of the queue
}

// TryLockWaitAhead is TryLockWaitToken asking for the caller's place too:
// when not acquired, ahead says how many waiters are ahead of it (see the
// script: exact on the Redisson engine, an upper bound on the scalable one
// when waiters ahead gave up). The script runs one command more (LPOS, or
// one HMGET); the call is the same single round trip.
func (f FairSet) TryLockWaitAhead(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, ttlMs, token int64, ahead Ahead, err error) {
	c := f.set.cmd(FileFairTryLockWait, 8, 9)
	c.key(k.Name).key(k.Queue).key(k.Timeouts).key(k.ScalableQueue()).key(k.Token()).str(a.acquireLatch(k)).key(k.Channel).key(k.Grace())
	c.num(a.LeaseMs).key(a.Owner).num(a.WaitMs).now(a.NowMs).num(a.acquireLatchMs()).num(a.GraceMs).key(a.pubCmd()).key(UnlockMessage).key("1")
	cmd := c.run(ctx, rdb)
	ahead.Ahead = -1
	if v, ok := cmd.Val().([]any); ok && cmd.Err() == nil && len(v) == 3 {
		ttl, ok1 := v[0].(int64)
		n, ok2 := v[1].(int64)
		j, ok3 := v[2].(int64)
		if ok1 && ok2 && ok3 {
			return false, ttl, 0, Ahead{Ahead: n, Joined: j == 1}, nil
		}
		return false, 0, 0, ahead, fmt.Errorf("lua: unexpected acquisition reply %v", v)
	}
	acquired, ttlMs, token, err = tokenReply(cmd)
	return acquired, ttlMs, token, ahead, acquireErr(err)
}

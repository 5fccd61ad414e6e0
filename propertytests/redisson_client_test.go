package propertytests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// A reference Redisson client for mixed-deployment tests: the fair lock as
// a Java service using Redisson would run it, built from the rules in
// shared/redisson-reference.md (sections 4.5 to 4.7, 5 and 6), not from
// Redisson's code and not from this module's scripts. The Lua below is
// written from that document's pseudocode; the client loop follows its
// synchronous tryLock / lock, with Redisson's keys, arguments, message
// values and defaults:
//
//   - keys: the lock hash <name>, redisson_lock_queue:{name},
//     redisson_lock_timeout:{name}, redisson_unlock_latch:{name}:<request>;
//     each waiter listens on redisson_lock__channel:{name}:<uuid>:<thread>
//     for "0";
//   - a waiter's slot is its positive waitTime, else fairLockWaitTimeout
//     (300 s); deadlines are the client's wall clock in ms;
//   - lock(): try, subscribe, then loop: try, and wait for a message or the
//     returned ttl (ttl < 0: a message only); tryLock(wait, lease): the same
//     bounded by the remaining wait, with acquireFailed (same slot) on every
//     way out without the lock;
//   - a hold without a lease is renewed by a watchdog every
//     lockWatchdogTimeout/3 (one batch script per tick); unlock uses a fresh
//     request id and a latch of 16 to 20 s, cancels renewal, and resets the
//     lock object's internal lease.
//
// Leaving out what does not change the shared state or its timing on one
// server: WAIT / NoSyncedSlaves, retries, sharded pub/sub, and the sharing
// of one subscription connection between channels (each wait here has its
// own, subscribed before the loop as Redisson's entry is).

// Scripts, from the reference's pseudocode.

// rPurge is purgeStaleHeads(now) (5.2): drop heads whose deadline passed;
// stop at a live head or at a head with no deadline (Redisson's H1).
const rPurge = `
local function purge(queue, timeouts, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then return end
        local score = redis.call('zscore', timeouts, head)
        if score == false or tonumber(score) > now then return end
        redis.call('zrem', timeouts, head)
        redis.call('lpop', queue)
    end
end
`

// rTryLockWait is the fair tryLock with a wait (5.4). KEYS: lock, queue,
// timeouts. ARGV: lease, owner, wait (slot), now. Reply: nil when held,
// else a ttl in ms.
var rTryLockWait = redis.NewScript(rPurge + `
local lock, queue, timeouts = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, wait, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
purge(queue, timeouts, now)
if redis.call('exists', lock) == 0 and
   (redis.call('exists', queue) == 0 or redis.call('lindex', queue, 0) == owner) then
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, owner)
    local rest = redis.call('zrange', timeouts, 0, -1)
    for i = 1, #rest do
        redis.call('zincrby', timeouts, -wait, rest[i])
    end
    redis.call('hset', lock, owner, 1)
    redis.call('pexpire', lock, lease)
    return nil
end
if redis.call('hexists', lock, owner) == 1 then
    redis.call('hincrby', lock, owner, 1)
    redis.call('pexpire', lock, lease)
    return nil
end
if redis.call('zscore', timeouts, owner) ~= false then
    return math.max(0, redis.call('pttl', lock))
end
local ttl
local last = redis.call('lindex', queue, -1)
local lastScore = false
if last and last ~= owner then
    lastScore = redis.call('zscore', timeouts, last)
end
if lastScore ~= false then
    ttl = tonumber(lastScore) - now
else
    ttl = redis.call('pttl', lock)
end
if redis.call('zadd', timeouts, ttl + wait + now, owner) == 1 then
    redis.call('rpush', queue, owner)
end
return ttl
`)

// rAcquireFailed is acquireFailed (5.5). KEYS: queue, timeouts. ARGV:
// owner, wait (the slot it queued with).
var rAcquireFailed = redis.NewScript(`
local queue, timeouts = KEYS[1], KEYS[2]
local owner, wait = ARGV[1], tonumber(ARGV[2])
local members = redis.call('lrange', queue, 0, -1)
local at = #members + 1
for i = 1, #members do
    if members[i] == owner then at = i; break end
end
for i = at + 1, #members do
    redis.call('zincrby', timeouts, -wait, members[i])
end
redis.call('zrem', timeouts, owner)
redis.call('lrem', queue, 0, owner)
return nil
`)

// rUnlock is the fair unlock (5.6). KEYS: lock, queue, timeouts, channel
// prefix, latch. ARGV: "0", internal lease, owner, now, publish command,
// latch ttl. Reply: nil (not held), 0 (still held), 1 (released; also when
// the lock is gone, Redisson's H4).
var rUnlock = redis.NewScript(rPurge + `
local lock, queue, timeouts, prefix, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local stored = redis.call('get', latch)
if stored then return tonumber(stored) end
purge(queue, timeouts, tonumber(ARGV[4]))
local function wake()
    local head = redis.call('lindex', queue, 0)
    if head then redis.call(ARGV[5], prefix .. ':' .. head, ARGV[1]) end
end
if redis.call('exists', lock) == 0 then
    wake()
    redis.call('set', latch, '1', 'px', ARGV[6])
    return 1
end
if redis.call('hexists', lock, ARGV[3]) == 0 then return nil end
if redis.call('hincrby', lock, ARGV[3], -1) > 0 then
    redis.call('pexpire', lock, ARGV[2])
    redis.call('set', latch, '0', 'px', ARGV[6])
    return 0
end
redis.call('del', lock)
redis.call('set', latch, '1', 'px', ARGV[6])
wake()
return 1
`)

// rRenew is the watchdog's batch (6.2). KEYS: locks. ARGV: lease, then the
// owner of each lock. Reply: 1 or 0 per lock.
var rRenew = redis.NewScript(`
local out = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        redis.call('pexpire', KEYS[i], ARGV[1])
        out[i] = 1
    else
        out[i] = 0
    end
end
return out
`)

// rClient is one Redisson client (one RedissonClient in a JVM).
type rClient struct {
	id       string // the client UUID
	rdb      *redis.Client
	h        *history      // records attempts made with an attempt context (may be nil)
	watchdog time.Duration // lockWatchdogTimeout
	slot     time.Duration // fairLockWaitTimeout

	mu      sync.Mutex
	renew   map[string]*rRenewal // by lock name
	nextTID int64
	stop    chan struct{}
	done    chan struct{}
	bg      sync.WaitGroup // fire-and-forget latch deletions

	// foreign counts the messages other than "0" its waiters received:
	// Java's Redisson decodes every message on a waiter channel as a
	// number, so a Go peer must never send one there (issue 33's notes go
	// to version-8 client ids only; this client's is version 4).
	foreign atomic.Int64
}

// closeChecked closes c when t ends and fails t if any of c's waiters was
// sent a message a Java client could not read.
func closeChecked(t testing.TB, c *rClient) {
	t.Cleanup(func() {
		c.Close()
		if n := c.foreign.Load(); n > 0 {
			t.Errorf("the Redisson-rule client %s was sent %d messages other than %q on its waiter channels", c.id, n, wire.UnlockMessage)
		}
	})
}

// rRenewal is the watchdog's entry for one lock name: one thread id per
// acquisition, in order, and each thread's owner id.
type rRenewal struct {
	threads []int64
	count   map[int64]int
	owner   map[int64]string
}

// newRClient starts a Redisson-rule client; watchdog is its
// lockWatchdogTimeout (0: Redisson's default, 30 s).
func newRClient(rdb *redis.Client, h *history, watchdog time.Duration) *rClient {
	if watchdog <= 0 {
		watchdog = 30 * time.Second
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b[:])
	c := &rClient{
		id:  x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32],
		rdb: rdb, h: h, watchdog: watchdog, slot: 300 * time.Second,
		renew: map[string]*rRenewal{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	go c.watchdogLoop()
	return c
}

// Close stops the watchdog (held locks then run out, as when a JVM stops).
func (c *rClient) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
		<-c.done
	}
	c.bg.Wait()
}

// watchdogLoop renews every registered hold every lockWatchdogTimeout/3,
// with the first thread of each lock's entry; a lock not renewed (gone or
// not ours) loses that thread's registration.
func (c *rClient) watchdogLoop() {
	defer close(c.done)
	tick := time.NewTicker(c.watchdog / 3)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		c.mu.Lock()
		var names, owners []string
		var tids []int64
		for name, e := range c.renew {
			if len(e.threads) == 0 {
				continue
			}
			tid := e.threads[0]
			names, owners, tids = append(names, name), append(owners, e.owner[tid]), append(tids, tid)
		}
		c.mu.Unlock()
		if len(names) == 0 {
			continue
		}
		args := []any{c.watchdog.Milliseconds()}
		for _, o := range owners {
			args = append(args, o)
		}
		res, err := rRenew.Run(context.Background(), c.rdb, names, args...).Int64Slice()
		if err != nil {
			continue // logged by Redisson; every entry is kept
		}
		for i, r := range res {
			if r == 0 {
				c.cancelRenewal(names[i], tids[i])
			}
		}
	}
}

func (c *rClient) scheduleRenewal(name string, tid int64, owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.renew[name]
	if e == nil {
		e = &rRenewal{count: map[int64]int{}, owner: map[int64]string{}}
		c.renew[name] = e
	}
	e.threads = append(e.threads, tid)
	e.count[tid]++
	e.owner[tid] = owner
}

func (c *rClient) cancelRenewal(name string, tid int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.renew[name]
	if e == nil || e.count[tid] == 0 {
		return
	}
	e.count[tid]--
	if e.count[tid] > 0 {
		return
	}
	delete(e.count, tid)
	delete(e.owner, tid)
	var keep []int64
	for _, x := range e.threads {
		if x != tid {
			keep = append(keep, x)
		}
	}
	e.threads = keep
	if len(e.threads) == 0 {
		delete(c.renew, name)
	}
}

// rLock is RedissonFairLock for one thread: the owner "<uuid>:<thread>".
type rLock struct {
	c      *rClient
	name   string
	keys   wire.Keys
	tid    int64
	owner  string
	ilease time.Duration // internalLockLeaseTime, a field of the lock object
}

// Lock returns the fair lock called name for a new thread of c.
func (c *rClient) Lock(name string) *rLock {
	c.mu.Lock()
	c.nextTID++
	tid := c.nextTID
	c.mu.Unlock()
	return &rLock{c: c, name: name, keys: wire.KeysFor(name), tid: tid, owner: fmt.Sprintf("%s:%d", c.id, tid), ilease: c.watchdog}
}

// slotMs is the waiter's slot: its positive waitTime, else the default.
func (l *rLock) slotMs(wait time.Duration) int64 {
	if wait > 0 {
		return wait.Milliseconds()
	}
	return l.c.slot.Milliseconds()
}

// acquire runs the with-wait script once: acquired, or the ttl to wait.
// On success it remembers the lease or registers the watchdog.
func (l *rLock) acquire(ctx context.Context, wait, lease time.Duration) (bool, int64, error) {
	leaseMs := l.c.watchdog.Milliseconds()
	if lease > 0 {
		leaseMs = lease.Milliseconds()
	}
	start := time.Now()
	v, err := rTryLockWait.Run(ctx, l.c.rdb, []string{l.keys.Name, l.keys.Queue, l.keys.Timeouts},
		leaseMs, l.owner, l.slotMs(wait), time.Now().UnixMilli()).Result()
	end := time.Now()
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	if errors.Is(err, redis.Nil) {
		if a != nil && l.c.h != nil {
			l.c.h.granting(a, start)
		}
		if lease > 0 {
			l.ilease = lease
		} else {
			l.c.scheduleRenewal(l.name, l.tid, l.owner)
		}
		return true, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	ttl, ok := v.(int64)
	if !ok {
		return false, 0, fmt.Errorf("redisson-rule tryLock: reply %T %v", v, v)
	}
	if a != nil && l.c.h != nil {
		l.c.h.queued(a, start, end)
	}
	return false, ttl, nil
}

// acquireFailed leaves the queue with the slot used to join.
func (l *rLock) acquireFailed(wait time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := rAcquireFailed.Run(ctx, l.c.rdb, []string{l.keys.Queue, l.keys.Timeouts}, l.owner, l.slotMs(wait)).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		panic("redisson-rule acquireFailed: " + err.Error()) // a test helper: surface it
	}
}

// sub is one waiter's subscription: a counting semaphore fed by "0"
// messages on its channel (a message with nobody waiting is banked).
type sub struct {
	ps   *redis.PubSub
	sem  chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup
}

func (l *rLock) subscribe(ctx context.Context) (*sub, error) {
	ps := l.c.rdb.Subscribe(ctx, l.keys.WaiterChannel(l.owner))
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, err
	}
	s := &sub{ps: ps, sem: make(chan struct{}, 1024), quit: make(chan struct{})}
	ch := ps.Channel()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			select {
			case m, ok := <-ch:
				if !ok {
					return
				}
				if m.Payload != wire.UnlockMessage {
					l.c.foreign.Add(1)
					continue
				}
				select {
				case s.sem <- struct{}{}:
				default:
				}
			case <-s.quit:
				return
			}
		}
	}()
	return s, nil
}

func (s *sub) close() {
	close(s.quit)
	_ = s.ps.Close()
	s.wg.Wait()
}

// tryAcquire waits for a permit up to d (d < 0: without a bound) or ctx.
func (s *sub) tryAcquire(ctx context.Context, d time.Duration) error {
	if d < 0 {
		select {
		case <-s.sem:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.sem:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// TryLock is tryLock(waitTime, leaseTime) (4.5 with the fair lock's slot
// and acquireFailed). A lease <= 0 means the watchdog keeps the lock.
func (l *rLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	remaining := wait
	last := time.Now()
	spent := func() bool {
		now := time.Now()
		remaining -= now.Sub(last)
		last = now
		return remaining <= 0
	}
	ok, ttl, err := l.acquire(ctx, wait, lease)
	if err != nil || ok {
		return ok, err
	}
	if spent() {
		l.acquireFailed(wait)
		return false, nil
	}
	sctx, cancel := context.WithTimeout(ctx, remaining)
	s, err := l.subscribe(sctx)
	cancel()
	if err != nil {
		l.acquireFailed(wait)
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, nil
	}
	defer s.close()
	if spent() {
		l.acquireFailed(wait)
		return false, nil
	}
	for {
		ok, ttl, err = l.acquire(ctx, wait, lease)
		if err != nil {
			l.acquireFailed(wait)
			return false, err
		}
		if ok {
			return true, nil
		}
		if spent() {
			l.acquireFailed(wait)
			return false, nil
		}
		d := remaining
		if ttl >= 0 && time.Duration(ttl)*time.Millisecond < remaining {
			d = time.Duration(ttl) * time.Millisecond
		}
		if err := s.tryAcquire(ctx, d); err != nil {
			l.acquireFailed(wait)
			return false, err
		}
		if spent() {
			l.acquireFailed(wait)
			return false, nil
		}
	}
}

// Lock is lock(leaseTime) (4.5): the default slot, no bound. Redisson's
// lock() has no way out but an interrupt; here ctx is the interrupt, and the
// waiter then leaves the queue (acquireFailed) so that tests end clean.
func (l *rLock) Lock(ctx context.Context, lease time.Duration) error {
	ok, _, err := l.acquire(ctx, -1, lease)
	if err != nil || ok {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 7500*time.Millisecond) // subscriptionTimeout
	s, err := l.subscribe(sctx)
	cancel()
	if err != nil {
		l.acquireFailed(-1)
		return err
	}
	defer s.close()
	for {
		ok, ttl, err := l.acquire(ctx, -1, lease)
		if err != nil {
			l.acquireFailed(-1)
			return err
		}
		if ok {
			return nil
		}
		d := time.Duration(-1)
		if ttl >= 0 {
			d = time.Duration(ttl) * time.Millisecond
		}
		if err := s.tryAcquire(ctx, d); err != nil {
			l.acquireFailed(-1)
			return err
		}
	}
}

// errNotHeld is Redisson's IllegalMonitorStateException on unlock.
var errNotHeld = errors.New("redisson-rule: attempt to unlock lock, not locked by current thread")

// Unlock is unlock() (4.7 with the fair unlock script).
func (l *rLock) Unlock(ctx context.Context) error {
	var b [16]byte
	_, _ = rand.Read(b[:])
	req := hex.EncodeToString(b[:])
	latch := l.keys.Latch(req)
	latchTTL := 16000 + mrand.Int64N(4001) // (3000 + [1000..2000]) x 4
	v, err := rUnlock.Run(ctx, l.c.rdb,
		[]string{l.keys.Name, l.keys.Queue, l.keys.Timeouts, l.keys.Channel, latch},
		wire.UnlockMessage, l.ilease.Milliseconds(), l.owner, time.Now().UnixMilli(), wire.Publish, latchTTL).Result()
	l.c.cancelRenewal(l.name, l.tid)
	if errors.Is(err, redis.Nil) {
		l.ilease = l.c.watchdog
		return errNotHeld
	}
	if err != nil {
		return err
	}
	if n, _ := v.(int64); n == 1 {
		l.ilease = l.c.watchdog
	}
	l.c.bg.Add(1)
	go func() {
		defer l.c.bg.Done()
		_ = l.c.rdb.Del(context.Background(), latch).Err()
	}()
	return nil
}

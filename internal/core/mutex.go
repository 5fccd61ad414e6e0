package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/watchdog"
	"github.com/fairlock-go/fairlock/lua"
)

// Engine is what differs between the reentrant and the fair lock: which
// scripts run, and which channel a waiter listens on.
type Engine interface {
	// Try makes one attempt. With queue set it may join a wait queue (the
	// fair lock); ttlMs then says how long to wait before the next attempt.
	Try(ctx context.Context, a lua.Args, queue bool) (acquired bool, ttlMs int64, err error)
	// GiveUp leaves the wait queue after attempts made with queue set.
	GiveUp(ctx context.Context, a lua.Args) error
	Unlock(ctx context.Context, a lua.Args) (lua.UnlockResult, error)
	ForceUnlock(ctx context.Context, a lua.Args) (bool, error)
	// WakeChannel is the channel on which the owner is woken.
	WakeChannel(owner string) string
}

// Mutex is the client side of one lock handle: one owner id, its local view
// of its holds, and the loops that acquire, wait and release.
type Mutex struct {
	S     *Session
	E     Engine
	Keys  lua.Keys
	Owner string

	mu    sync.Mutex
	holds int   // holds this handle has taken and not released
	cur   *hold // the current hold; nil when not held
	last  *hold // the hold that ended most recently
}

// hold is one period of holding the lock, from the first acquisition to the
// release of the last hold or the loss of the lock.
type hold struct {
	m       *Mutex
	done    chan struct{} // made on the first call to Done
	ended   bool
	err     error
	leaseMs int64 // lease set by the latest acquisition (Redisson's internalLockLeaseTime)
	wd      *watchdog.Entry
	timer   *time.Timer
}

// NewMutex validates name and builds a handle with a fresh owner id, or
// with threadID when it is positive.
func NewMutex(s *Session, e func(lua.Keys) Engine, name string, threadID int64) (*Mutex, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidValue)
	}
	if err := lua.ValidateName(name); err != nil {
		return nil, fmt.Errorf("fairlock: %w", err)
	}
	if threadID < 0 {
		return nil, fmt.Errorf("%w: negative thread id %d", ErrInvalidValue, threadID)
	}
	if threadID == 0 {
		threadID = s.NewThreadID()
	}
	k := lua.KeysFor(name)
	return &Mutex{S: s, E: e(k), Keys: k, Owner: lua.Owner(s.ID, threadID)}, nil
}

// Forever, as AcquireOpts.Wait, waits until the lock is acquired or ctx ends.
const Forever time.Duration = -1

// AcquireOpts says how to acquire.
type AcquireOpts struct {
	Lease time.Duration // explicit lease; 0: the watchdog keeps the lock
	Wait  time.Duration // how long to wait; 0: one attempt; Forever: until ctx ends
	Slot  time.Duration // fair lock wait slot; 0: the session's
	Queue bool          // attempts may join the fair queue
}

func canceled(err error) error { return fmt.Errorf("%w: %w", ErrCanceled, err) }

// Acquire acquires the lock as o says. It reports false with a nil error when
// the wait ran out; a wait ended by ctx returns an error matching both
// ErrCanceled and ctx.Err(). Whenever it returns without the lock, the owner
// is no longer queued and holds nothing it did not hold before.
func (m *Mutex) Acquire(ctx context.Context, o AcquireOpts) (bool, error) {
	if ctx == nil {
		return false, fmt.Errorf("%w: nil context", ErrInvalidValue)
	}
	if o.Lease < 0 || o.Slot < 0 || (o.Wait < 0 && o.Wait != Forever) {
		return false, fmt.Errorf("%w: lease %v, wait %v, slot %v", ErrInvalidValue, o.Lease, o.Wait, o.Slot)
	}
	if o.Lease > 0 && o.Lease < time.Millisecond {
		return false, fmt.Errorf("%w: lease %v is under 1ms", ErrInvalidValue, o.Lease)
	}
	if m.S.Closed() {
		return false, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return false, canceled(err)
	}
	cfg := &m.S.Config
	a := lua.Args{
		Owner:   m.Owner,
		LeaseMs: cfg.Lease.Milliseconds(),
		WaitMs:  cfg.WaitSlot.Milliseconds(),
		GraceMs: m.S.GraceMs(),
		PubCmd:  m.S.PubCmd(),
	}
	if o.Lease > 0 {
		a.LeaseMs = o.Lease.Milliseconds()
	}
	if o.Slot > 0 {
		a.WaitMs = max(1, o.Slot.Milliseconds())
	}
	var deadline time.Time
	if o.Wait >= 0 {
		deadline = time.Now().Add(o.Wait)
	}
	expired := func() bool { return !deadline.IsZero() && !time.Now().Before(deadline) }

	attempt := func() (bool, int64, error) {
		a.NowMs = m.S.WallMs()
		ok, ttl, err := m.E.Try(ctx, a, o.Queue)
		if ok && err == nil {
			// Replica acknowledgement (replicas.go): an error here is
			// handled as an ambiguous attempt, whose cleanup undoes the hold.
			if err = m.S.ConfirmAcquire(ctx, m.Keys.Name, m.Owner); err != nil {
				ok = false
			}
		}
		return ok, ttl, err
	}
	giveUp := func(err error, ambiguous bool) (bool, error) {
		m.cleanup(ctx, a, o.Queue, ambiguous && !notSent(err))
		switch {
		case ctx.Err() != nil && err != nil:
			return false, fmt.Errorf("%w: %w", canceled(ctx.Err()), err)
		case ctx.Err() != nil:
			return false, canceled(ctx.Err())
		}
		return false, err
	}

	ok, ttl, err := attempt()
	if err != nil {
		return giveUp(fmt.Errorf("fairlock: acquire %q: %w", m.Keys.Name, err), true)
	}
	if ok {
		m.granted(a.LeaseMs, o.Lease == 0)
		return true, nil
	}
	if expired() {
		return giveUp(nil, false)
	}

	subCtx, cancelSub := ctx, context.CancelFunc(func() {})
	if !deadline.IsZero() {
		subCtx, cancelSub = context.WithDeadline(ctx, deadline)
	}
	w, err := m.S.Hub.Subscribe(subCtx, m.E.WakeChannel(m.Owner))
	cancelSub()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return giveUp(nil, false) // the wait ran out while subscribing
		}
		return giveUp(fmt.Errorf("fairlock: subscribe: %w", err), false)
	}
	defer w.Close()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ok, ttl, err = attempt()
		if err != nil {
			return giveUp(fmt.Errorf("fairlock: acquire %q: %w", m.Keys.Name, err), true)
		}
		if ok {
			m.granted(a.LeaseMs, o.Lease == 0)
			return true, nil
		}
		if expired() {
			return giveUp(nil, false)
		}
		// Sleep until a wake-up, or until the lock's lease (or, queued
		// behind a free lock, the head's deadline) runs out: a message
		// can be missed. ttl < 0 means a lock with no expiry: only a
		// message frees it, but re-check once a lease anyway.
		sleep := time.Duration(ttl) * time.Millisecond
		if ttl < 0 {
			sleep = cfg.Lease
		}
		if !deadline.IsZero() {
			sleep = min(sleep, time.Until(deadline))
		}
		timer.Reset(max(sleep, 0))
		select {
		case <-w.C():
		case <-timer.C:
		case <-ctx.Done():
			return giveUp(nil, false)
		}
	}
}

// cleanup runs after a failed acquisition, on a fresh context bounded by
// CleanupTime since ctx may be dead. It leaves the fair queue, and when the
// last attempt's outcome is unknown (an error: the script may have run) it
// gives back a hold that attempt may have taken, so the lock is never held
// by nobody until its lease ends.
func (m *Mutex) cleanup(ctx context.Context, a lua.Args, queued, ambiguous bool) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.S.Config.CleanupTime)
	defer cancel()
	if queued {
		_ = m.E.GiveUp(cctx, a)
	}
	if !ambiguous {
		return
	}
	n, err := m.S.RDB.HGet(cctx, m.Keys.Name, m.Owner).Int()
	if err != nil {
		return // not held (redis.Nil), or Redis unreachable: nothing more we can do
	}
	m.mu.Lock()
	extra := n > m.holds
	m.mu.Unlock()
	if extra {
		a.RequestID = RequestID()
		a.NowMs = m.S.WallMs()
		_, _ = m.E.Unlock(cctx, a)
	}
}

// granted records an acquisition: the first starts a hold (watchdog or lease
// timer), a re-entry adds to it.
func (m *Mutex) granted(leaseMs int64, watchdogLease bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.holds++
	h := m.cur
	if h == nil {
		h = &hold{m: m}
		m.cur = h
	}
	h.leaseMs = leaseMs
	if watchdogLease {
		if h.timer != nil {
			h.timer.Stop()
			h.timer = nil
		}
		if h.wd == nil {
			h.wd = m.S.Watchdog.Add(m.Keys.Name, m.Owner, h)
		}
		return
	}
	if h.wd != nil {
		return // the watchdog keeps renewing what an earlier hold asked for
	}
	d := time.Duration(leaseMs) * time.Millisecond
	if h.timer != nil {
		h.timer.Reset(d)
		return
	}
	h.timer = time.AfterFunc(d, func() {
		m.end(h, fmt.Errorf("%w: %q: lease of %v ran out", ErrLost, m.Keys.Name, d))
	})
}

// Lost is the watchdog's report that h's lock is gone.
func (h *hold) Lost(reason error) {
	h.m.end(h, fmt.Errorf("%w: %q: %w", ErrLost, h.m.Keys.Name, reason))
}

// end finishes hold h (if still current) with err: nil for a release.
func (m *Mutex) end(h *hold, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != h {
		return
	}
	m.cur = nil
	m.last = h
	m.holds = 0
	if h.wd != nil {
		m.S.Watchdog.Remove(h.wd)
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	h.err = err
	h.ended = true
	if h.done != nil {
		close(h.done)
	}
}

// unlockRetries is how many times an unlock is sent when Redis does not
// answer; the latch makes a repeat return the first outcome.
const unlockRetries = 3

// Unlock releases one hold. When ctx has ended, before or during the call,
// it still runs to completion on a fresh context bounded by CleanupTime. It returns ErrNotHeld when the owner
// does not hold the lock, and changes nothing then.
func (m *Mutex) Unlock(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidValue)
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), m.S.Config.CleanupTime)
		defer cancel()
	}
	m.mu.Lock()
	h := m.cur
	leaseMs := m.S.Config.Lease.Milliseconds()
	if h != nil {
		leaseMs = h.leaseMs
	}
	m.mu.Unlock()
	a := lua.Args{
		Owner: m.Owner, LeaseMs: leaseMs, RequestID: RequestID(),
		LatchMs: m.S.Config.LatchTTL.Milliseconds(), GraceMs: m.S.GraceMs(), PubCmd: m.S.PubCmd(),
	}
	var res lua.UnlockResult
	var err error
	fresh := false
	for try := 0; try < unlockRetries; try++ {
		a.NowMs = m.S.WallMs()
		res, err = m.E.Unlock(ctx, a)
		if err == nil || isScriptError(err) {
			break
		}
		if ctx.Err() != nil {
			if fresh {
				break
			}
			// ctx ended during the call: finish on a fresh context. The
			// same request id makes a repeat return the first outcome.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), m.S.Config.CleanupTime)
			defer cancel()
			fresh = true
		}
	}
	if err != nil {
		return fmt.Errorf("fairlock: unlock %q: %w", m.Keys.Name, err)
	}
	switch res {
	case lua.StillHeld:
		m.mu.Lock()
		if m.holds > 1 {
			m.holds--
		}
		m.mu.Unlock()
		return nil
	case lua.Released:
		if h != nil {
			m.end(h, nil)
		}
		return nil
	}
	if h != nil {
		m.end(h, fmt.Errorf("%w: %q: not held at unlock", ErrLost, m.Keys.Name))
	}
	return fmt.Errorf("%w: %q by %s", ErrNotHeld, m.Keys.Name, m.Owner)
}

// notSent reports an error that proves a command never reached Redis (no
// connection could be made), so it cannot have changed anything.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func isScriptError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// ForceUnlock deletes the lock whoever holds it and wakes a waiter. It
// reports whether there was a lock to delete.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if ctx == nil {
		return false, fmt.Errorf("%w: nil context", ErrInvalidValue)
	}
	a := lua.Args{NowMs: m.S.WallMs(), GraceMs: m.S.GraceMs(), PubCmd: m.S.PubCmd()}
	ok, err := m.E.ForceUnlock(ctx, a)
	if err != nil {
		return false, fmt.Errorf("fairlock: force unlock %q: %w", m.Keys.Name, err)
	}
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	if h != nil {
		m.end(h, nil)
	}
	return ok, nil
}

// Done returns a channel closed when the current hold ends: released by the
// last Unlock, deleted by ForceUnlock, or lost. When the handle holds
// nothing, the channel is already closed.
func (m *Mutex) Done() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return closedChan
	}
	if m.cur.done == nil {
		m.cur.done = make(chan struct{})
	}
	return m.cur.done
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Err reports why the most recent hold ended: nil while held or after a
// release, an error matching ErrLost when the lock was lost.
func (m *Mutex) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil || m.last == nil {
		return nil
	}
	return m.last.err
}

// IsLocked reports whether anyone holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	n, err := m.S.RDB.Exists(ctx, m.Keys.Name).Result()
	return n == 1, err
}

// IsHeld reports whether this handle's owner holds the lock.
func (m *Mutex) IsHeld(ctx context.Context) (bool, error) {
	return m.S.RDB.HExists(ctx, m.Keys.Name, m.Owner).Result()
}

// HoldCount is the owner's hold count in Redis, 0 when not held.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	s, err := m.S.RDB.HGet(ctx, m.Keys.Name, m.Owner).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

// NoExpiry is what RemainingLease reports for a lock without a lease.
const NoExpiry time.Duration = -1

// RemainingLease is the lock's remaining lease: 0 when nobody holds it,
// NoExpiry when it has no lease.
func (m *Mutex) RemainingLease(ctx context.Context) (time.Duration, error) {
	ms, err := m.S.RDB.Do(ctx, "pttl", m.Keys.Name).Int64()
	switch {
	case err != nil:
		return 0, err
	case ms == -2:
		return 0, nil
	case ms == -1:
		return NoExpiry, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

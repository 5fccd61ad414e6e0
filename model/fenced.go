package model

import "errors"

// The fenced lock (Redisson's RedissonFencedLock) is the reentrant lock's
// hash plus a counter, the token key "redisson_lock_token:{name}" (Token).
// Every successful acquisition, a take or a re-entry, increments the
// counter and replies its new value; a refused one replies the holder's
// PTTL and leaves the counter alone. Unlock, forceUnlock and renewal are the
// reentrant lock's and never touch the counter. The fair lock uses the same
// counter, incremented by a take only (fair.go, fairToken).
//
// Acquisition latch (not in Redisson; lua/latch_common.lua): a request id
// sent with an acquisition makes its copies count once. After a copy took
// the lock the latch holds "held:<token>": a later copy replies that same
// token while the owner holds the lock, and an error once it does not. After
// the caller gave the request up (Abandon) it holds "void" or "void:held"
// and every later copy is an error that changes nothing.

// Acquisition latch states.
const (
	LatchHeld     = "held"
	LatchVoid     = "void"
	LatchVoidHeld = "void:held"
	// LatchGranted: a release granted the lock to the request's owner
	// directly (the scalable fair engine's handoff, fair.go); the first
	// copy that comes while the owner holds it claims it (the lock's TTL
	// becomes the copy's lease, the latch LatchHeld with the same token).
	LatchGranted = "granted"
)

// AcquireLatch is a stored acquisition outcome.
type AcquireLatch struct {
	State     string // LatchHeld, LatchVoid or LatchVoidHeld
	Token     int64  // with LatchHeld: the token the granting copy got (0: none)
	ExpiresAt int64  // server clock, ms
}

// Errors an acquisition replies on a latch hit.
var (
	ErrAbandoned = errors.New("acquisition request abandoned")
	ErrGrantOver = errors.New("acquisition request already granted and its hold is over")
)

// latchHit is latch_check: the reply of a copy whose request id has a live
// latch, or ok false when the acquisition runs normally.
func (l *Lock) latchHit(owner, requestID string, latchMs int64) (acquired bool, token int64, err error, ok bool) {
	if latchMs <= 0 {
		return false, 0, nil, false
	}
	la, found := l.AcquireLatches[requestID]
	if !found {
		return false, 0, nil, false
	}
	switch la.State {
	case LatchHeld, LatchGranted:
		if l.Holds[owner] > 0 {
			return true, la.Token, nil, true
		}
		return false, 0, ErrGrantOver, true
	}
	return false, 0, ErrAbandoned, true
}

// FencedAcquire is fenced_acquire.lua: take the lock when it is free or
// re-enter it when owner holds it, resetting the lease to leaseMs and
// incrementing the token, whose new value is the reply; otherwise reply the
// holder's remaining lease (NoExpiry for none) and token 0 (the script's
// -1). requestID and latchMs are the acquisition latch (latchMs 0: none).
func (l *Lock) FencedAcquire(server int64, owner string, leaseMs int64, requestID string, latchMs int64) (acquired bool, ttlMs, token int64, err error) {
	l.Advance(server)
	if acquired, token, err, hit := l.latchHit(owner, requestID, latchMs); hit {
		return acquired, 0, token, err
	}
	if l.Locked() && l.Holds[owner] == 0 {
		return false, l.PTTL(server), 0, nil
	}
	l.Token++
	l.Holds[owner]++
	l.LeaseEnd = server + leaseMs
	if latchMs > 0 {
		l.AcquireLatches[requestID] = AcquireLatch{State: LatchHeld, Token: l.Token, ExpiresAt: server + latchMs}
	}
	return true, 0, l.Token, nil
}

// Abandon is abandon.lua: the caller gives request requestID up. The latch
// becomes void ("void:held" when a copy had taken the lock and owner still
// holds it); the reply says whether that hold is the caller's to give back.
// A repeat replies the same while owner holds the lock.
func (l *Lock) Abandon(server int64, owner, requestID string, latchMs int64) bool {
	l.Advance(server)
	la, found := l.AcquireLatches[requestID]
	held := l.Holds[owner] > 0
	if found && la.State == LatchVoidHeld {
		return held
	}
	if found && la.State == LatchVoid {
		return false
	}
	held = held && found && (la.State == LatchHeld || la.State == LatchGranted)
	state := LatchVoid
	if held {
		state = LatchVoidHeld
	}
	l.AcquireLatches[requestID] = AcquireLatch{State: state, ExpiresAt: server + max(latchMs, 1)}
	return held
}

package fair

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock-go/fairlock/internal/core"
)

// Fencing tokens (not in Redisson's RFairLock; see docs/design.md, "Fencing
// tokens"). The key is Redisson's fenced-lock token key,
// "redisson_lock_token:{name}": the acquisition that takes the lock (free
// -> held) INCRs it, and a re-entry returns the holder's current token. A
// fenced lock (package fenced) and a fair lock on the same name share one
// strictly increasing sequence; Redisson's own RFairLock never touches the
// key. Every acquisition of a fair lock maintains the token, whichever
// method made it; these methods also return it.

// LockAndGetToken is Lock returning the hold's fencing token: new when this
// call took the lock, the current one when it re-entered a hold of this
// owner. Send it with every write the lock protects and let the resource
// refuse writes with an older token (package fence).
func (m *Mutex) LockAndGetToken(ctx context.Context) (int64, error) {
	if m.zero() {
		return 0, errZero
	}
	var token int64
	_, err := m.m.Acquire(ctx, core.AcquireOpts{Wait: Forever, Slot: m.slot, Queue: true, Token: &token})
	if err != nil {
		return 0, err
	}
	return token, nil
}

// TryLockAndGetToken is TryLockFor returning the fencing token when it
// acquired (ok true).
func (m *Mutex) TryLockAndGetToken(ctx context.Context, wait, lease time.Duration) (token int64, ok bool, err error) {
	if m.zero() {
		return 0, false, errZero
	}
	if wait < 0 {
		return 0, false, fmt.Errorf("%w: wait %v", ErrInvalidValue, wait)
	}
	slot := wait // as TryLockFor: the wait is the slot, or the handle's default
	if slot == 0 {
		slot = m.slot
	}
	ok, err = m.m.Acquire(ctx, core.AcquireOpts{Wait: wait, Lease: lease, Slot: slot, Queue: true, Token: &token})
	if !ok {
		token = 0
	}
	return token, ok, err
}

// Token reads the lock's token key: the token of the latest take on this
// name (by a fair or a fenced lock), whoever holds it now; 0 when no token
// was ever issued on this name. It is the holder's token only while the
// holder holds the lock.
func (m *Mutex) Token(ctx context.Context) (int64, error) {
	if m.zero() {
		return 0, errZero
	}
	return m.m.Token(ctx)
}

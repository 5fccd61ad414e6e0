package etcd

import (
	"context"
	"sync"
	"time"
)

// callWatchDelay is how long a call on a callBound's context runs before
// the caller's context (and the session's) is watched (a context.AfterFunc
// on it). A call that ends sooner, as an uncontended acquisition's Txn or
// an Unlock's delete on a reachable etcd does, registers nothing on either
// and makes no context of its own; a call that is still running by then
// (etcd out of reach) ends at most this long after either ended.
// A variable for the tests.
var callWatchDelay = 20 * time.Millisecond

// callBound is a handle's reusable bound for one call at a time to etcd on
// a caller's context: the first attempt of an acquisition (its joining
// Txn, which decides an uncontended grant) or the release of Unlock. The
// context it gives (begin) carries the caller's values and ends at the
// bound end (the wait bound, the cleanup timeout; zero: none) and, from
// callWatchDelay into the call, when the caller's context or the watched
// one (the session's, which ends with the session and the Client; or
// none) ends. It replaces a context.WithCancel of the caller's context and
// a context.AfterFunc on the session's per call (their allocations and
// registrations were the difference between an uncontended cycle on a
// cancellable context and one on Background): its base context, derived
// from nothing that lives on (so a handle dropped by its user registers
// nothing anywhere), is kept from call to call while nothing ended it, and
// one timer per callBound, reset for each call, does the rest. A user of
// the bound calls begin, then endCall once the call is over; the calls of
// one callBound do not overlap.
type callBound struct {
	mu     sync.Mutex
	base   context.Context // the calls' Done and Err; nil: none yet or spent
	cancel context.CancelCauseFunc
	timer  *time.Timer
	due    time.Time // when the timer's current run is meant (an earlier run is stale)

	active  bool
	user    context.Context
	watch   context.Context // nil: none
	end     time.Time       // zero: no bound but the contexts'
	watched bool            // the contexts are watched (stops set)
	stops   [2]func() bool
}

// begin starts a call bounded by user, watch (nil: none) and end (see
// callBound) and returns its context.
func (b *callBound) begin(user, watch context.Context, end time.Time) context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.base == nil || b.base.Err() != nil {
		b.base, b.cancel = context.WithCancelCause(context.Background())
	}
	b.active, b.user, b.watch, b.end, b.watched = true, user, watch, end, false
	var d time.Duration
	switch {
	case user.Done() != nil || watch != nil:
		d = callWatchDelay
		if !end.IsZero() {
			d = min(d, time.Until(end))
		}
	case !end.IsZero():
		d = time.Until(end)
	default:
		d = -1 // nothing to watch, no bound: no timer
	}
	b.due = time.Time{} // no run is meant for this call
	if d >= 0 {
		b.due = time.Now().Add(d)
		if b.timer == nil {
			b.timer = time.AfterFunc(d, b.fire)
		} else {
			b.timer.Reset(d)
		}
	}
	if user == context.Background() || user == context.TODO() {
		return b.base // no values to carry: the base is the whole context
	}
	return &callCtx{base: b.base, user: user}
}

// fire is the timer: at end it ends the call's context; at callWatchDelay
// it watches the caller's context and the watched one. A run meant for an
// earlier call (it fired as that call ended and the timer was reset for
// this one) is too early: ignored.
func (b *callBound) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if !b.active || b.due.IsZero() || now.Before(b.due) {
		return
	}
	if !b.end.IsZero() && !now.Before(b.end) {
		b.cancel(context.DeadlineExceeded)
		b.base = nil // spent
		return
	}
	if !b.watched {
		b.watched = true
		cancel := b.cancel
		for i, c := range [2]context.Context{b.user, b.watch} {
			if c != nil && c.Done() != nil {
				b.stops[i] = context.AfterFunc(c, func() { cancel(context.Cause(c)) })
			}
		}
	}
	if !b.end.IsZero() {
		b.due = b.end
		b.timer.Reset(time.Until(b.end))
	}
}

// endCall ends the call begun last: its context is no longer used. The
// base is kept for the next call unless something ended it (or may yet:
// a watch that already began to run).
func (b *callBound) endCall() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.active = false
	if b.timer != nil {
		b.timer.Stop() // a run already under way finds the call inactive
	}
	for i, stop := range b.stops {
		if stop != nil && !stop() {
			b.base = nil // a watched context ended the base (or is ending it)
		}
		b.stops[i] = nil
	}
	b.user, b.watch, b.watched = nil, nil, false
}

// callCtx is a callBound's context for one call: it ends with the bound's
// base and carries the caller's values. Value asks the base first, so the
// context package finds the base's cancelCtx (whose Done is this
// context's): a context derived from it for a call (gRPC derives one per
// call) registers with the base, with no goroutine.
type callCtx struct {
	base context.Context
	user context.Context
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.user.Deadline() }
func (c *callCtx) Done() <-chan struct{}       { return c.base.Done() }
func (c *callCtx) Err() error                  { return c.base.Err() }

func (c *callCtx) Value(key any) any {
	if v := c.base.Value(key); v != nil {
		return v
	}
	return c.user.Value(key)
}

func (c *callCtx) String() string { return "etcd.callCtx" }

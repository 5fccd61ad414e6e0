package fairlock

import (
	"context"
	"time"

	"github.com/fairlock-go/fairlock/internal/core"
)

// Observer receives the events of a client's locks: waits, grants,
// releases, losses, failed renewals and the long-wait / long-hold alerts.
// Set one with WithObserver; package observe has a log/slog one.
//
// Observe is called on one goroutine per client, in the order the events
// happened, never on the lock path: a lock call puts the event in a buffer
// of 1024 and goes on. When the observer falls behind and the buffer is
// full, new events are dropped and an EventsDropped event later says how
// many. A panic in Observe is recovered and that event dropped; the locks
// never see it. Close delivers the events of the holds it ended, waiting for
// the observer at most the cleanup timeout; events after Close are dropped.
//
// Without an observer nothing is built, no goroutine or timer runs, and a
// lock call allocates exactly what it allocates without this feature.
type Observer interface {
	Observe(Event)
}

// Event is one observation; which fields are set depends on its Kind.
type Event struct {
	Kind     EventKind
	At       time.Time // when it happened (local clock)
	Name     string    // the lock's name (its Redis key)
	Owner    string    // the owner id, "<client-uuid>:<thread-id>" for a lock
	LockKind string    // "reentrant", "fair", "rwlock", "semaphore", ...
	// Duration: Granted, the time from the call's start to the grant;
	// WaitEnded, the wait; Released and Lost, the hold's length (first grant
	// to its end); LongWait and LongHold, the wait or hold so far.
	Duration time.Duration
	Waited   bool   // Granted: a WaitStarted preceded it
	Reentry  bool   // Granted: a re-entry of a current hold (no new hold starts)
	Err      error  // Lost, RenewFailed, WaitEnded: why
	Dropped  uint64 // EventsDropped: how many events were dropped since the last report
	// Ahead (WaitStarted on a fair lock or the fair semaphore): how many
	// waiters were ahead of this one when its wait started, read by the
	// attempt that queued it (so the queue's length at join is Ahead + 1
	// when it joined at the tail); -1 when unknown (another lock kind, or
	// a queue that cannot tell: see Position.Ahead).
	Ahead int
	// Handoff (Granted after a wait): the time from the wake-up that
	// preceded the grant (the release's message, as this waiter got it) to
	// the grant; 0 when the grant did not follow a wake-up (the first
	// attempt, or a poll when its sleep ended).
	Handoff time.Duration
}

// EventKind says what an Event reports.
type EventKind uint8

// String is the kind's name in snake case ("wait_started", "granted", ...),
// "unknown" for a value that is not one of the kinds.
func (k EventKind) String() string { return core.EventKind(k).String() }

// The kinds of Event. Per lock and owner they come in this order: a
// WaitStarted (when the first attempt failed and the call waits), then one
// Granted or WaitEnded; a hold starts with a Granted whose Reentry is false
// and ends with exactly one Released or Lost.
const (
	// WaitStarted: an acquisition's first attempt did not get the lock,
	// and it waits.
	WaitStarted EventKind = iota + 1
	// Granted: an acquisition got the lock; Duration is the time from the
	// call's start, Waited says whether WaitStarted preceded it, Reentry
	// whether it added to a hold the owner had.
	Granted
	// WaitEnded: a wait (WaitStarted) ended without the lock; Err says why
	// (nil: the wait ran out).
	WaitEnded
	// Released: a hold ended by its release; Duration is its length.
	Released
	// Lost: a hold ended without a release (Err matches ErrLost or
	// ErrClosed); Duration is its length.
	Lost
	// RenewFailed: a watchdog renewal got no answer; the hold goes on
	// until its validity runs out.
	RenewFailed
	// LongWait: a wait reached the WithLongWaitAlert threshold and goes on.
	LongWait
	// LongHold: a hold reached the WithLongHoldAlert threshold and goes on.
	LongHold
	// EventsDropped: Dropped events were dropped (the observer was slow).
	EventsDropped
)

// ObserverFunc makes an Observer of a function.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// WithObserver makes the client report its locks' events to o (nil: none,
// the default).
func WithObserver(o Observer) Option {
	return func(c *core.Config) {
		c.Observer = nil
		if o != nil {
			c.Observer = coreObserver{o}
		}
	}
}

// coreObserver hands the session's events to the user's Observer.
type coreObserver struct{ o Observer }

func (c coreObserver) Observe(e core.Event) {
	c.o.Observe(Event{
		Kind: EventKind(e.Kind), At: e.At, Name: e.Name, Owner: e.Owner, LockKind: e.LockKind,
		Duration: e.Duration, Waited: e.Waited, Reentry: e.Reentry, Err: e.Err, Dropped: e.Dropped,
		Ahead: e.Ahead, Handoff: e.Handoff,
	})
}

// WithLongWaitAlert makes the observer get a LongWait event when an
// acquisition has waited d and still waits (once per acquisition; Quartz
// warns at 30 s). A timer runs per wait only when this is set and an
// observer is set. 0, the default, turns it off; a negative d makes
// NewClient fail with ErrInvalidValue.
func WithLongWaitAlert(d time.Duration) Option {
	return func(c *core.Config) {
		if d < 0 {
			invalid(c, "WithLongWaitAlert", d, "give a positive threshold, or 0 to turn the alert off")
			return
		}
		c.LongWait = d
	}
}

// WithLongHoldAlert makes the observer get a LongHold event when a hold has
// lasted d and goes on (once per hold, from its first grant). A timer runs
// per hold only when this is set and an observer is set. 0, the default,
// turns it off; a negative d makes NewClient fail with ErrInvalidValue.
func WithLongHoldAlert(d time.Duration) Option {
	return func(c *core.Config) {
		if d < 0 {
			invalid(c, "WithLongHoldAlert", d, "give a positive threshold, or 0 to turn the alert off")
			return
		}
		c.LongHold = d
	}
}

// Tracer starts a span around each acquisition (op "acquire": every Lock,
// TryLock, TryLockFor, Acquire) and each release (op "release": Unlock,
// Release) of a client's locks, with the caller's ctx; the call runs on the
// ctx Start returns, so the Redis commands of a traced go-redis client nest
// under the span. Package otelobserve has an OpenTelemetry one.
//
// Start is called with the caller's ctx when the call begins, and end once
// when it returns: ok says whether the lock was acquired (for a release,
// whether it succeeded), err is the call's error.
type Tracer interface {
	Start(ctx context.Context, s Span) (context.Context, func(ok bool, err error))
}

// Span says what a span is about.
type Span struct {
	Op       string // "acquire" or "release"
	Name     string // the lock's name (its Redis key)
	Owner    string // the owner id
	LockKind string // "reentrant", "fair", "rwlock", "semaphore", ...
}

// WithTracer makes the client start a span around each acquisition and
// release through t (nil: none, the default, at no cost).
func WithTracer(t Tracer) Option {
	return func(c *core.Config) {
		c.Tracer = nil
		if t != nil {
			c.Tracer = coreTracer{t}
		}
	}
}

// coreTracer hands the session's spans to the user's Tracer.
type coreTracer struct{ t Tracer }

func (c coreTracer) Start(ctx context.Context, s core.Span) (context.Context, func(ok bool, err error)) {
	return c.t.Start(ctx, Span(s))
}

package fairlock

import (
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
type Observer = core.Observer

// Event is one observation; which fields are set depends on its Kind.
type Event = core.Event

// EventKind says what an Event reports.
type EventKind = core.EventKind

// The kinds of Event. Per lock and owner they come in this order: a
// WaitStarted (when the first attempt failed and the call waits), then one
// Granted or WaitEnded; a hold starts with a Granted whose Reentry is false
// and ends with exactly one Released or Lost.
const (
	// WaitStarted: an acquisition's first attempt did not get the lock,
	// and it waits.
	WaitStarted = core.WaitStarted
	// Granted: an acquisition got the lock; Duration is the time from the
	// call's start, Waited says whether WaitStarted preceded it, Reentry
	// whether it added to a hold the owner had.
	Granted = core.Granted
	// WaitEnded: a wait (WaitStarted) ended without the lock; Err says why
	// (nil: the wait ran out).
	WaitEnded = core.WaitEnded
	// Released: a hold ended by its release; Duration is its length.
	Released = core.Released
	// Lost: a hold ended without a release (Err matches ErrLost or
	// ErrClosed); Duration is its length.
	Lost = core.Lost
	// RenewFailed: a watchdog renewal got no answer; the hold goes on
	// until its validity runs out.
	RenewFailed = core.RenewFailed
	// LongWait: a wait reached the WithLongWaitAlert threshold and goes on.
	LongWait = core.LongWait
	// LongHold: a hold reached the WithLongHoldAlert threshold and goes on.
	LongHold = core.LongHold
	// EventsDropped: Dropped events were dropped (the observer was slow).
	EventsDropped = core.EventsDropped
)

// ObserverFunc makes an Observer of a function.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// WithObserver makes the client report its locks' events to o (nil: none,
// the default).
func WithObserver(o Observer) Option { return func(c *core.Config) { c.Observer = o } }

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
type Tracer = core.Tracer

// Span says what a span is about: Op, the lock's Name, Owner and LockKind.
type Span = core.Span

// WithTracer makes the client start a span around each acquisition and
// release through t (nil: none, the default, at no cost).
func WithTracer(t Tracer) Option { return func(c *core.Config) { c.Tracer = t } }

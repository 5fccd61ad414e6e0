package core

import (
	"sync/atomic"
	"time"

	"github.com/fairlock-go/fairlock/internal/watchdog"
)

// Observer receives the events of a client's locks (package fairlock
// re-exports it with WithObserver). Observe is called from one goroutine
// per client, never from the lock path itself: the lock path puts the event
// in a buffer (obsBuffer events) and goes on; when the buffer is full the
// event is dropped and counted (an EventsDropped event reports the count
// later). A panic in Observe is recovered and the event dropped: the locks
// do not notice.
type Observer interface {
	Observe(Event)
}

// EventKind says what happened.
type EventKind uint8

const (
	// WaitStarted: an acquisition's first attempt did not get the lock and
	// it waits (Wait != 0). Not reported for an acquisition that gets the
	// lock at once or makes a single attempt.
	WaitStarted EventKind = iota + 1
	// Granted: an acquisition got the lock. Duration: from the call's start
	// to the grant (the wait, including the first attempt's round trip).
	// Waited: a WaitStarted was reported for it. Reentry: it added to a
	// hold the owner already had (no new hold starts).
	Granted
	// WaitEnded: an acquisition for which WaitStarted was reported returned
	// without the lock (the wait ran out, ctx ended, Close, an error in
	// Err). Duration: how long it waited.
	WaitEnded
	// Released: a hold ended by its release (the last Unlock, ForceUnlock
	// by its handle). Duration: the hold's length, first grant to release.
	Released
	// Lost: a hold ended without a release: Err matches ErrLost (lease ran
	// out, key deleted, Redis lost it) or ErrClosed (the client was closed
	// while it was held). Duration: the hold's length.
	Lost
	// RenewFailed: a watchdog renewal of the hold got no answer (Err says
	// why); the hold goes on until its validity runs out.
	RenewFailed
	// LongWait: a wait has lasted the WithLongWaitAlert threshold and goes
	// on (once per acquisition). Duration: the wait so far.
	LongWait
	// LongHold: a hold has lasted the WithLongHoldAlert threshold and goes
	// on (once per hold). Duration: the hold so far.
	LongHold
	// EventsDropped: Dropped events were dropped since the last report
	// because the observer did not keep up. Only Kind, At, Dropped are set.
	EventsDropped
)

var kindNames = [...]string{"", "wait_started", "granted", "wait_ended", "released", "lost", "renew_failed", "long_wait", "long_hold", "events_dropped"}

func (k EventKind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one observation. Which fields are set depends on Kind.
type Event struct {
	Kind     EventKind
	At       time.Time // when it happened (local clock)
	Name     string    // the lock's name (its Redis key)
	Owner    string    // the owner id, "<client-uuid>:<thread-id>" for a lock
	LockKind string    // "reentrant", "fair", "rwlock", "semaphore", ...
	Duration time.Duration
	Waited   bool   // Granted: a WaitStarted preceded it
	Reentry  bool   // Granted: a re-entry of a current hold
	Err      error  // Lost, RenewFailed, WaitEnded
	Dropped  uint64 // EventsDropped
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

// obsBuffer is how many events wait for the observer before new ones are
// dropped.
const obsBuffer = 1024

// observer delivers a session's events to its Observer on one goroutine.
type observer struct {
	o       Observer
	ch      chan Event
	stop    chan struct{}
	done    chan struct{}
	dropped atomic.Uint64
}

func newObserver(o Observer) *observer {
	ob := &observer{o: o, ch: make(chan Event, obsBuffer), stop: make(chan struct{}), done: make(chan struct{})}
	go ob.run()
	return ob
}

// emit queues e without blocking; the caller checked s.obs != nil (events
// are built only when an observer is set).
func (ob *observer) emit(e Event) {
	select {
	case ob.ch <- e:
	default:
		ob.dropped.Add(1)
	}
}

func (ob *observer) run() {
	defer close(ob.done)
	for {
		select {
		case e := <-ob.ch:
			ob.deliver(e)
		case <-ob.stop:
			for {
				select {
				case e := <-ob.ch:
					ob.deliver(e)
				default:
					ob.reportDropped()
					return
				}
			}
		}
	}
}

func (ob *observer) deliver(e Event) {
	ob.call(e)
	ob.reportDropped()
}

func (ob *observer) reportDropped() {
	if n := ob.dropped.Swap(0); n > 0 {
		ob.call(Event{Kind: EventsDropped, At: time.Now(), Dropped: n})
	}
}

// call runs the observer; a panic drops the event.
func (ob *observer) call(e Event) {
	defer func() { _ = recover() }()
	ob.o.Observe(e)
}

// close delivers what is queued and stops, waiting at most d for a slow
// observer (events emitted later are not delivered).
func (ob *observer) close(d time.Duration) {
	close(ob.stop)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ob.done:
	case <-t.C:
	}
}

// Observing reports whether the session has an observer.
func (s *Session) Observing() bool { return s.obs != nil }

// KindNamer is an engine that names its lock kind for the observer.
type KindNamer interface{ LockKind() string }

// lockKind names m's kind for an event: the engine's name, else one read
// from the watchdog kind.
func (m *Mutex) lockKind() string {
	if k, ok := m.E.(KindNamer); ok {
		return k.LockKind()
	}
	switch m.WatchKind {
	case watchdog.KindLock:
		if m.Queue {
			return "fair"
		}
		return "reentrant"
	case KindRW:
		return "rwlock"
	case KindSemaphore:
		return "semaphore"
	case KindFairSemaphore:
		return "fair_semaphore"
	case KindSeats:
		return "seats"
	}
	return "lock"
}

// event builds an event of m (only called when an observer is set).
func (m *Mutex) event(k EventKind, d time.Duration, err error) Event {
	return Event{Kind: k, At: time.Now(), Name: m.Keys.Name, Owner: m.Owner, LockKind: m.lockKind(), Duration: d, Err: err}
}

package multi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Seats is a handle on a set of seats of one venue, held all at once and
// fairly (docs/design.md, "The fair multi-seat hold"). An acquisition joins
// the queue of every seat in one script, so all queues see requests in one
// total order, and it is granted all the seats at once when it heads every
// queue it is in and every seat is free: for each seat, requests naming it
// are granted in arrival order, and two requests naming the same seats in
// opposite orders cannot deadlock.
//
// The names must share one hash tag (the venue: "{venue}:12A",
// "{venue}:12B"), so that every key is in one cluster slot. Each Acquire is
// one hold with a fresh owner; holds have the fair lock's promises (wake-up
// channel per waiter, head grace, latches, a lease on the server's clock,
// watchdog renewal, Done/Err/ValidUntil, a fencing token).
//
// A seat is not a lock: a fair or reentrant lock on a seat's name does not
// exclude the seat (an acquisition refuses a seat whose name is a held
// lock, ErrSeatsMixed; the locks do not check the seats).
//
// It is safe for concurrent use and cheap to make (NewSeats talks to
// nobody). On a zero Seats every call returns an error matching
// fairlock.ErrInvalidValue.
type Seats struct {
	s     *core.Session
	names []string
	k     wire.SeatsKeys
}

// The refusals of the multi-seat hold, matched with errors.Is.
var (
	// ErrSeatsCrossSlot: the names are not all in one cluster slot.
	ErrSeatsCrossSlot = errors.New("fairlock: seats: the names are in different cluster slots (give them one hash tag: {venue}:12A)")
	// ErrSeatsVenue: the names are in one slot but do not share one hash tag.
	ErrSeatsVenue = errors.New("fairlock: seats: the names do not share one hash tag (the venue)")
	// ErrSeatsMixed: a seat's name is also the name of a held lock.
	ErrSeatsMixed = wire.ErrSeatsMixed
)

// defaultSeatsGrace is the head grace of a client whose grace is off: the
// seats have no grace-off mode (it exists for Redisson's Java clients).
const defaultSeatsGrace = 5000

// NewSeats returns a handle on the seats named (1 to 64 distinct names
// sharing one hash tag). Names are validated as lock names; names in
// different slots are refused with ErrSeatsCrossSlot, names in one slot
// with different tags with ErrSeatsVenue. The order given does not matter.
func NewSeats(c *fairlock.Client, names ...string) (*Seats, error) {
	s := core.Of(c)
	if s == nil {
		return nil, fmt.Errorf("%w: nil client", fairlock.ErrInvalidValue)
	}
	if len(names) == 0 || len(names) > wire.SeatsMax {
		return nil, fmt.Errorf("%w: %d seats (1 to %d)", fairlock.ErrInvalidValue, len(names), wire.SeatsMax)
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	for i, n := range sorted {
		if err := wire.ValidateName(n); err != nil {
			return nil, err
		}
		if i > 0 && n == sorted[i-1] {
			return nil, fmt.Errorf("%w: seat %q named twice", fairlock.ErrInvalidValue, n)
		}
		if core.Slot(n) != core.Slot(sorted[0]) {
			return nil, fmt.Errorf("%w: %q (slot %d) and %q (slot %d)", ErrSeatsCrossSlot, sorted[0], core.Slot(sorted[0]), n, core.Slot(n))
		}
		if wire.Venue(n) != wire.Venue(sorted[0]) {
			return nil, fmt.Errorf("%w: %q and %q", ErrSeatsVenue, sorted[0], n)
		}
	}
	s.RegisterKind(core.KindSeats, renewSeats)
	return &Seats{s: s, names: sorted, k: wire.SeatsKeysFor(wire.Venue(sorted[0]))}, nil
}

// A hold's watchdog entry is named by its venue's holds hash; the renewal
// finds the leases beside it.
const (
	seatsHoldsPrefix = "fairlock_seats:"
	seatsLeasePrefix = "fairlock_seats_lease:"
)

func renewSeats(ctx context.Context, s *core.Session, names, owners []string, leaseMs int64) ([]wire.RenewStatus, error) {
	ks := make([]wire.SeatsKeys, len(names))
	for i, n := range names {
		ks[i] = wire.SeatsKeys{Holds: n, Leases: seatsLeasePrefix + strings.TrimPrefix(n, seatsHoldsPrefix)}
	}
	return s.SeatsScripts().RenewEach(ctx, s.RDB, ks, owners, leaseMs)
}

// Names are the seats, sorted.
func (h *Seats) Names() []string {
	if h == nil {
		return nil
	}
	return slices.Clone(h.names)
}

var errZeroSeats = fmt.Errorf("%w: zero multi.Seats (use NewSeats)", fairlock.ErrInvalidValue)

// Acquire takes every seat at once, waiting in their queues until granted
// or ctx ends. Lease 0: the watchdog keeps the hold; a positive lease (at
// least 10 ms) ends it that long after the grant, on the server's clock.
//
// It returns a SeatHold and a nil error, or an error and no seats: one
// matching fairlock.ErrCanceled and ctx.Err() when ctx ended (every queue
// is left and anything a late copy took is given back, in the
// background), fairlock.ErrClosed after Close, ErrSeatsMixed.
func (h *Seats) Acquire(ctx context.Context, lease time.Duration) (*SeatHold, error) {
	return h.acquire(ctx, core.Forever, lease)
}

// TryAcquire takes every seat at once, waiting at most wait (0: one
// attempt that never queues, granted only when nobody waits for any of the
// seats and all are free). It returns a nil SeatHold and a nil error when
// the wait ran out, and follows Acquire's rules otherwise.
func (h *Seats) TryAcquire(ctx context.Context, wait, lease time.Duration) (*SeatHold, error) {
	if wait < 0 {
		return nil, fmt.Errorf("%w: wait %v", fairlock.ErrInvalidValue, wait)
	}
	return h.acquire(ctx, wait, lease)
}

func (h *Seats) acquire(ctx context.Context, wait, lease time.Duration) (*SeatHold, error) {
	if h == nil || h.s == nil {
		return nil, errZeroSeats
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", fairlock.ErrInvalidValue)
	}
	if lease < 0 {
		return nil, fmt.Errorf("%w: lease %v", fairlock.ErrInvalidValue, lease)
	}
	owner := wire.Owner(h.s.ID, h.s.NewThreadID())
	queue := wait != 0
	e := &seatsEngine{s: h.s, k: h.k, seats: h.names}
	m, err := core.NewHold(h.s, h.k.Holds, owner, e, core.KindSeats, queue)
	if err != nil {
		return nil, err
	}
	var token int64
	ok, err := m.Acquire(ctx, core.AcquireOpts{Lease: lease, Wait: wait, Queue: queue, Token: &token})
	if err != nil || !ok {
		return nil, err
	}
	return &SeatHold{m: m, token: token, names: h.names}, nil
}

// SeatHold is one grant of a set of seats, held until Release, the end of
// its lease (an explicit lease, or the watchdog's when renewals fail), or
// Close. Its methods are safe for concurrent use.
type SeatHold struct {
	m     *core.Mutex
	token int64
	names []string
}

// Names are the seats held, sorted.
func (p *SeatHold) Names() []string { return slices.Clone(p.names) }

// Token is the grant's fencing token: the venue's counter, INCRed by every
// grant, so for each seat its holders' tokens increase (use with fence).
func (p *SeatHold) Token() int64 { return p.token }

// Release gives every seat back (latched: a retry counts once). It returns
// an error matching fairlock.ErrNotHeld when the hold had already ended.
func (p *SeatHold) Release(ctx context.Context) error { return p.m.Unlock(ctx) }

// Done is closed when the hold ends.
func (p *SeatHold) Done() <-chan struct{} { return p.m.Done() }

// Err is nil while the hold lasts or after Release; it matches
// fairlock.ErrLost when the hold was lost, fairlock.ErrClosed after Close.
func (p *SeatHold) Err() error { return p.m.Err() }

// ValidUntil is the local instant until which the hold is valid (zero once
// it ended).
func (p *SeatHold) ValidUntil() time.Time { return p.m.ValidUntil() }

// seatsEngine runs the seats scripts for one acquisition (core.Engine and
// core.Voider). Its holds are fields of the venue's holds hash, the hold's
// name: core's replica check (HEXISTS/HINCRBY 0) fits as it is.
type seatsEngine struct {
	s     *core.Session
	k     wire.SeatsKeys
	seats []string
}

func (e *seatsEngine) args(a wire.Args) wire.SeatsArgs {
	grace := e.s.GraceMs()
	if grace <= 0 {
		grace = defaultSeatsGrace
	}
	return wire.SeatsArgs{Owner: a.Owner, Seats: e.seats, LeaseMs: a.LeaseMs, GraceMs: grace,
		AcquireID: a.AcquireID, LatchMs: a.LatchMs, PubCmd: a.PubCmd}
}

func (e *seatsEngine) Try(ctx context.Context, a wire.Args, queue bool) (bool, int64, error) {
	sa := e.args(a)
	sa.Queue = queue
	r, err := e.s.SeatsScripts().Acquire(ctx, e.s.RDB, e.k, sa)
	if err != nil {
		return false, 0, err
	}
	if r.Granted {
		return true, r.Token, nil
	}
	return false, r.SleepMs, nil
}

func (e *seatsEngine) GiveUp(ctx context.Context, a wire.Args) error {
	_, err := e.s.SeatsScripts().Leave(ctx, e.s.RDB, e.k, e.args(a))
	return err
}

func (e *seatsEngine) Unlock(ctx context.Context, a wire.Args) (wire.UnlockResult, error) {
	sa := e.args(a)
	sa.ReleaseID = a.RequestID
	ok, err := e.s.SeatsScripts().Release(ctx, e.s.RDB, e.k, sa)
	if ok {
		return wire.Released, err
	}
	return wire.NotHeld, err
}

// ForceUnlock is Unlock: a hold has no forced release.
func (e *seatsEngine) ForceUnlock(ctx context.Context, a wire.Args) (bool, error) {
	r, err := e.Unlock(ctx, a)
	return r == wire.Released, err
}

// WakeChannel is the waiter's own channel: only waiters that can act are
// woken.
func (e *seatsEngine) WakeChannel(owner string) string { return e.k.WaiterChannel(owner) }

// Abandon voids the request (seats_abandon.lua), which gives back seats a
// copy of it was granted: nothing is left for the caller to release.
func (e *seatsEngine) Abandon(ctx context.Context, a wire.Args) (bool, error) {
	_, err := e.s.SeatsScripts().Abandon(ctx, e.s.RDB, e.k, e.args(a))
	return false, err
}

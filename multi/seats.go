package multi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/positionhook"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Seats is a handle on a set of seats held all at once (docs/design.md,
// "The fair multi-seat hold"). It works in one of two modes, fixed by the
// names given to NewSeats (Mode tells which):
//
// OneVenue, when every name carries the same hash tag (the venue:
// "{venue}:12A", "{venue}:12B"), so that every key is in one cluster slot:
// an acquisition joins the queue of every seat in one script, so all
// queues see requests in one total order, and it is granted all the seats
// at once when it heads every queue it is in and every seat is free. For
// each seat, requests naming it are granted in arrival order, and two
// requests naming the same seats in any orders cannot deadlock.
//
// AcrossVenues, when the names do not share one hash tag: the seats are
// grouped by venue, and an acquisition takes the venues' groups one after
// another in one canonical order (by the venue's cluster slot, then its
// name) as a MultiLock of OneVenue holds, giving back what it took when it
// does not get everything. Still all or nothing and without deadlock, and
// a seat is the same seat whichever mode names it; but there is no one
// total order across venues: a request joins a later venue's queues only
// once it holds its earlier venues' seats, so it holds those while it waits
// (docs/design.md, "Across venues: the fallback", says exactly what is
// weaker).
//
// Each acquisition is one hold with a fresh owner; holds have the fair
// lock's promises (wake-up channel per waiter, head grace, latches, a
// lease on the server's clock, watchdog renewal, Done/Err/ValidUntil, a
// fencing token per venue, a queue position callback: AcquireWith).
//
// A seat is not a lock: a fair or reentrant lock on a seat's name does not
// exclude the seat (an acquisition refuses a seat whose name is a held
// lock, ErrSeatsMixed; the locks do not check the seats).
//
// It is safe for concurrent use and cheap to make (NewSeats talks to
// nobody). On a zero Seats every call returns an error matching
// fairlock.ErrInvalidValue.
type Seats struct {
	s      *core.Session
	names  []string
	k      wire.SeatsKeys // OneVenue: the venue's keys
	venues []*Seats       // AcrossVenues: one OneVenue handle per venue
}

// SeatsMode is how a Seats takes its seats (see Seats).
type SeatsMode int

const (
	// OneVenue: every name shares one hash tag; one script joins every
	// queue, and all of them see requests in one total order.
	OneVenue SeatsMode = iota + 1
	// AcrossVenues: the names span several venues (hash tags); each
	// venue's seats are one OneVenue hold, taken venue after venue in the
	// canonical order, as a MultiLock.
	AcrossVenues
)

func (m SeatsMode) String() string {
	switch m {
	case OneVenue:
		return "one venue"
	case AcrossVenues:
		return "across venues"
	}
	return fmt.Sprintf("SeatsMode(%d)", int(m))
}

// The refusals of the multi-seat hold, matched with errors.Is.
var (
	// ErrSeatsMixed: a seat's name is also the name of a held lock.
	ErrSeatsMixed = wire.ErrSeatsMixed
)

// defaultSeatsGrace is the head grace of a client whose grace is off: the
// seats have no grace-off mode (it exists for Redisson's Java clients).
const defaultSeatsGrace = 5000

// NewSeats returns a handle on the seats named: 1 to 64 distinct names, in
// any order. Names are validated as lock names. Names sharing one hash tag
// make a OneVenue handle; names that do not (different tags, or names
// without a tag, each its own venue) make an AcrossVenues handle, whose
// guarantees are weaker (see Seats and Mode). It refuses, with an error
// matching fairlock.ErrInvalidValue, a nil client, no names, too many and a
// name given twice; fairlock.ErrInvalidName for a bad name.
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
	byVenue := map[string][]string{}
	var venues []string
	for i, n := range sorted {
		if err := wire.ValidateName(n); err != nil {
			return nil, core.Errorf(err, "seats")
		}
		if i > 0 && n == sorted[i-1] {
			return nil, fmt.Errorf("%w: seat %q named twice", fairlock.ErrInvalidValue, n)
		}
		v := wire.Venue(n)
		if _, ok := byVenue[v]; !ok {
			venues = append(venues, v)
		}
		byVenue[v] = append(byVenue[v], n)
	}
	s.RegisterKind(core.KindSeats, renewSeats)
	if len(venues) == 1 {
		return &Seats{s: s, names: sorted, k: wire.SeatsKeysFor(venues[0])}, nil
	}
	h := &Seats{s: s, names: sorted}
	for _, v := range venues {
		h.venues = append(h.venues, &Seats{s: s, names: byVenue[v], k: wire.SeatsKeysFor(v)})
	}
	return h, nil
}

// Mode says how the seats are taken: OneVenue (one script, one total order
// over every queue) or AcrossVenues (the canonical-order fallback). Zero
// on a zero Seats.
func (h *Seats) Mode() SeatsMode {
	switch {
	case h == nil || h.s == nil:
		return 0
	case h.venues != nil:
		return AcrossVenues
	}
	return OneVenue
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
	return h.acquire(ctx, core.Forever, lease, nil)
}

// Forever, as SeatsOptions.Wait, waits until the seats are granted or ctx
// ends.
const Forever = core.Forever

// SeatsOptions are the general form of an acquisition (AcquireWith).
type SeatsOptions struct {
	// Lease is the explicit lease; 0: the watchdog keeps the hold.
	Lease time.Duration
	// Wait bounds the wait in the queues; Forever waits until ctx ends; 0
	// makes one attempt that never queues (as TryAcquire's wait 0).
	Wait time.Duration
	// Position, when not nil, is called after every attempt that leaves
	// the caller queued, with its place (fairlock.Position, the type the
	// fair lock and the fair semaphore report): Ahead is how many requests
	// must leave before it heads every queue it is in, the distinct owners
	// ahead of it in any of its seats' queues (exact when read); Joined
	// says it (re)joined the tails; ETA estimates its wait from the rate at
	// which the requests ahead moved. Across venues it is the place in the
	// venue being waited for: each venue after the first starts with
	// Joined. It runs on the waiting goroutine, between attempts: it must
	// return quickly. Asking costs no round trip: the attempt's script
	// walks the caller's queues towards their heads (O(the places ahead)).
	Position func(fairlock.Position)
}

// AcquireWith takes every seat as o says: Acquire and TryAcquire with a
// queue position callback. It returns a nil SeatHold and a nil error when
// o.Wait ran out, and follows Acquire's rules otherwise (and, with a
// bounded o.Wait, TryAcquire's bound).
func (h *Seats) AcquireWith(ctx context.Context, o SeatsOptions) (*SeatHold, error) {
	if o.Wait == Forever {
		return h.acquire(ctx, core.Forever, o.Lease, o.Position)
	}
	return h.tryAcquire(ctx, o.Wait, o.Lease, o.Position)
}

// TryAcquire takes every seat at once, waiting at most wait in their
// queues. A wait of 0 makes one attempt that never queues, granted only
// when nobody waits for any of the seats and all are free: the meaning
// semaphore.Fair's TryAcquire gives it, not fair.Mutex's (whose Wait 0 is
// one queued attempt). It returns a nil SeatHold and a nil error when the
// wait ran out, and follows Acquire's rules otherwise.
//
// The call returns within wait plus one attempt bound (one second), and
// across venues plus one more for the give-back of the venues taken: when
// Redis does not answer by then (stalled, unreachable) it returns an error
// matching ErrNoAnswer and its request is voided and given back in the
// background.
func (h *Seats) TryAcquire(ctx context.Context, wait, lease time.Duration) (*SeatHold, error) {
	return h.tryAcquire(ctx, wait, lease, nil)
}

func (h *Seats) tryAcquire(ctx context.Context, wait, lease time.Duration, position func(fairlock.Position)) (*SeatHold, error) {
	if wait < 0 {
		return nil, fmt.Errorf("%w: wait %v", fairlock.ErrInvalidValue, wait)
	}
	if h.Mode() != OneVenue || ctx == nil {
		return h.acquire(ctx, wait, lease, position) // across venues: the MultiLock bounds it
	}
	bctx, cancel := context.WithDeadlineCause(ctx, time.Now().Add(wait+attemptBound), errBound)
	defer cancel()
	p, err := h.acquire(bctx, wait, lease, position)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(bctx), errBound) {
		return nil, noAnswer(err)
	}
	return p, err
}

func (h *Seats) acquire(ctx context.Context, wait, lease time.Duration, position func(fairlock.Position)) (*SeatHold, error) {
	if h == nil || h.s == nil {
		return nil, errZeroSeats
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", fairlock.ErrInvalidValue)
	}
	if lease < 0 {
		return nil, fmt.Errorf("%w: lease %v", fairlock.ErrInvalidValue, lease)
	}
	if h.venues != nil {
		return h.acquireAcross(ctx, wait, lease, position)
	}
	// wire.Owner's format, without fmt.
	owner := h.s.ID + ":" + strconv.FormatInt(h.s.NewThreadID(), 10)
	queue := wait != 0
	// The engine, the SeatHold and the token live in one allocation.
	a := &seatsAcquisition{e: seatsEngine{s: h.s, k: h.k, seats: h.names}}
	m, err := core.NewHold(h.s, h.k.Holds, owner, &a.e, core.KindSeats, queue)
	if err != nil {
		return nil, err
	}
	m.Label = strings.Join(h.names, ",") // errors name the seats, not the venue's key
	ok, err := m.Acquire(ctx, core.AcquireOpts{Lease: lease, Wait: wait, Queue: queue, Token: &a.p.token, Position: positionhook.ToCore(position)})
	if err != nil || !ok {
		return nil, err
	}
	a.p.m, a.p.names = m, h.names
	return &a.p, nil
}

// seatsAcquisition is what one OneVenue acquisition allocates besides its
// hold.
type seatsAcquisition struct {
	e seatsEngine
	p SeatHold
}

// acquireAcross is an AcrossVenues acquisition: a MultiLock over one
// OneVenue hold per venue, taken in the canonical order (the venue's slot,
// then its holds key, which names the venue), with the MultiLock's rollback
// and restart rules.
func (h *Seats) acquireAcross(ctx context.Context, wait, lease time.Duration, position func(fairlock.Position)) (*SeatHold, error) {
	if lease > 0 && lease < core.MinLease {
		return nil, fmt.Errorf("%w: lease %v is under %v", fairlock.ErrInvalidValue, lease, core.MinLease)
	}
	vms := make([]*venueMember, len(h.venues))
	members := make([]Member, len(h.venues))
	for i, v := range h.venues {
		vms[i] = &venueMember{v: v, position: position}
		members[i] = vms[i]
	}
	l, err := New(members...)
	if err != nil {
		return nil, err
	}
	var ok bool
	switch {
	case wait == core.Forever && lease == 0:
		ok, err = true, l.Lock(ctx)
	case wait == core.Forever:
		ok, err = true, l.LockWithLease(ctx, lease)
	default:
		ok, err = l.TryLockFor(ctx, wait, lease)
	}
	if err != nil || !ok {
		return nil, err
	}
	byName := make(map[string]int64, len(h.names))
	for i, t := range l.Tokens() { // New's order: h.venues
		for _, n := range h.venues[i].names {
			byName[n] = t
		}
	}
	a := &acrossHold{l: l, tokens: make([]int64, len(h.names))}
	for i, n := range h.names {
		a.tokens[i] = byName[n]
	}
	// A venue's hold lost (its lease ran out, Close): the MultiLock keeps
	// the others until Unlock; the SeatHold gives them back at once, as a
	// OneVenue hold loses all its seats at once.
	go func() {
		<-l.Done()
		if l.Err() != nil {
			_ = a.release(cleanupCtx(context.WithoutCancel(ctx)))
		}
	}()
	return &SeatHold{across: a, names: h.names}, nil
}

// venueMember is one venue's seats as a MultiLock member (with tokens): each
// acquisition is a new OneVenue hold, the member's calls are its current
// (or last) hold's.
type venueMember struct {
	v        *Seats
	position func(fairlock.Position) // the acquisition's callback (nil: none)
	mu       sync.Mutex
	h        *SeatHold
}

func (m *venueMember) Name() string { return m.v.k.Holds }

func (m *venueMember) Owner() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.h != nil {
		return m.h.m.Owner
	}
	return m.v.s.ID
}

func (m *venueMember) hold() *SeatHold {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.h
}

func (m *venueMember) get(ctx context.Context, wait, lease time.Duration) (int64, bool, error) {
	h, err := m.v.acquire(ctx, wait, lease, m.position)
	if h == nil {
		return 0, false, err
	}
	m.mu.Lock()
	m.h = h
	m.mu.Unlock()
	return h.token, true, err
}

func (m *venueMember) Lock(ctx context.Context) error {
	_, _, err := m.get(ctx, core.Forever, 0)
	return err
}

func (m *venueMember) LockWithLease(ctx context.Context, lease time.Duration) error {
	_, _, err := m.get(ctx, core.Forever, lease)
	return err
}

func (m *venueMember) TryLock(ctx context.Context) (bool, error) {
	_, ok, err := m.get(ctx, 0, 0)
	return ok, err
}

func (m *venueMember) TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error) {
	_, ok, err := m.get(ctx, wait, lease)
	return ok, err
}

func (m *venueMember) LockAndGetToken(ctx context.Context) (int64, error) {
	t, _, err := m.get(ctx, core.Forever, 0)
	return t, err
}

func (m *venueMember) LockAndGetTokenWithLease(ctx context.Context, lease time.Duration) (int64, error) {
	t, _, err := m.get(ctx, core.Forever, lease)
	return t, err
}

func (m *venueMember) TryLockAndGetToken(ctx context.Context, wait, lease time.Duration) (int64, bool, error) {
	return m.get(ctx, wait, lease)
}

func (m *venueMember) Token(context.Context) (int64, error) {
	if h := m.hold(); h != nil {
		return h.token, nil
	}
	return 0, fmt.Errorf("%w: seats: no hold", fairlock.ErrNotHeld)
}

func (m *venueMember) Unlock(ctx context.Context) error {
	h := m.hold()
	if h == nil {
		return fmt.Errorf("%w: seats: no hold", fairlock.ErrNotHeld)
	}
	return h.Release(ctx)
}

func (m *venueMember) IsHeld(context.Context) (bool, error) {
	h := m.hold()
	if h == nil {
		return false, nil
	}
	select {
	case <-h.Done():
		return false, nil
	default:
		return true, nil
	}
}

func (m *venueMember) Done() <-chan struct{} {
	if h := m.hold(); h != nil {
		return h.Done()
	}
	return closedChan
}

func (m *venueMember) Err() error {
	if h := m.hold(); h != nil {
		return h.Err()
	}
	return nil
}

func (m *venueMember) ValidUntil() time.Time {
	if h := m.hold(); h != nil {
		return h.ValidUntil()
	}
	return time.Time{}
}

// SeatHold is one grant of a set of seats, held until Release, the end of
// its lease (an explicit lease, or the watchdog's when renewals fail), or
// Close. Its methods are safe for concurrent use.
//
// A nil *SeatHold (what TryAcquire returns when its wait runs out) and a
// zero SeatHold hold nothing: Release returns an error matching both
// fairlock.ErrNotHeld and fairlock.ErrInvalidValue (so `defer
// hold.Release(ctx)` after a timeout is harmless), Done is closed, Err nil,
// ValidUntil zero, Token 0, Names and Tokens empty.
type SeatHold struct {
	m      *core.Mutex // OneVenue
	token  int64       // OneVenue
	names  []string
	across *acrossHold // AcrossVenues
}

// acrossHold is an AcrossVenues grant: a MultiLock of OneVenue holds.
type acrossHold struct {
	l      *MultiLock
	tokens []int64 // per name, sorted names' order
	once   sync.Once
	err    error
}

// release unlocks the MultiLock once; later calls report ErrNotHeld.
func (a *acrossHold) release(ctx context.Context) error {
	first := false
	a.once.Do(func() {
		first = true
		a.err = a.l.Unlock(ctx)
	})
	if !first {
		return fmt.Errorf("%w: seats: the hold has ended", fairlock.ErrNotHeld)
	}
	return a.err
}

// Names are the seats held, sorted.
func (p *SeatHold) Names() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.names)
}

// empty reports a nil or zero SeatHold: no grant.
func (p *SeatHold) empty() bool { return p == nil || (p.m == nil && p.across == nil) }

var errNoSeatHold = fmt.Errorf("%w: %w: seats: no hold (a nil or zero SeatHold; TryAcquire returns nil when its wait runs out)", fairlock.ErrNotHeld, fairlock.ErrInvalidValue)

// Token is the grant's fencing token: the venue's counter, INCRed by every
// grant, so for each seat its holders' tokens increase (use with fence).
// Across venues there is no one counter: Token is 0, and Tokens gives each
// seat its venue's token.
func (p *SeatHold) Token() int64 {
	if p.empty() || p.across != nil {
		return 0
	}
	return p.token
}

// Tokens gives, for each seat in Names' order, the fencing token of its
// venue's grant (OneVenue: the same token for every seat). For each seat,
// its holders' tokens increase.
func (p *SeatHold) Tokens() []int64 {
	if p.empty() {
		return nil
	}
	if p.across != nil {
		return slices.Clone(p.across.tokens)
	}
	out := make([]int64, len(p.names))
	for i := range out {
		out[i] = p.token
	}
	return out
}

// Release gives every seat back (latched: a retry counts once). It returns
// an error matching fairlock.ErrNotHeld when the hold had already ended
// (across venues: when a venue's hold had ended, after giving back the
// others).
func (p *SeatHold) Release(ctx context.Context) error {
	if p.empty() {
		return errNoSeatHold
	}
	if p.across != nil {
		return p.across.release(ctx)
	}
	return p.m.Unlock(ctx)
}

// Done is closed when the hold ends (across venues: when any venue's hold
// ends; the other venues' seats are then given back at once).
func (p *SeatHold) Done() <-chan struct{} {
	if p.empty() {
		return closedChan
	}
	if p.across != nil {
		return p.across.l.Done()
	}
	return p.m.Done()
}

// Err is nil while the hold lasts or after Release; it matches
// fairlock.ErrLost when the hold was lost, fairlock.ErrClosed after Close
// (across venues: a *MemberError naming the venue's holds key).
func (p *SeatHold) Err() error {
	if p.empty() {
		return nil
	}
	if p.across != nil {
		return p.across.l.Err()
	}
	return p.m.Err()
}

// ValidUntil is the local instant until which the hold is valid (zero once
// it ended; across venues, the earliest venue's).
func (p *SeatHold) ValidUntil() time.Time {
	if p.empty() {
		return time.Time{}
	}
	if p.across != nil {
		return p.across.l.ValidUntil()
	}
	return p.m.ValidUntil()
}

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

// TryAhead is Try with the caller's queue position (core.AheadTrier).
func (e *seatsEngine) TryAhead(ctx context.Context, a wire.Args) (bool, int64, wire.Ahead, error) {
	sa := e.args(a)
	sa.Queue, sa.Position = true, true
	r, err := e.s.SeatsScripts().Acquire(ctx, e.s.RDB, e.k, sa)
	if err != nil {
		return false, 0, wire.Ahead{Ahead: -1}, err
	}
	if r.Granted {
		return true, r.Token, r.Ahead, nil
	}
	return false, r.SleepMs, r.Ahead, nil
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

package semaphore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/positionhook"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Fair is a handle on a fair semaphore (ours; Redisson has none): a pool of
// permits granted in arrival order. An acquisition asks for n permits and
// waits in one FIFO queue; it is granted when nobody is queued ahead of it
// and n permits are free. A head asking for more permits than are free
// blocks later, smaller requests (the rule of
// golang.org/x/sync/semaphore.Weighted): nobody starves, and a large
// request is not overtaken for ever by small ones.
//
// The queue is the fair lock's (its scalable engine, docs/design.md "The
// fair semaphore"): one wake-up channel per waiter, wait slots, the head
// grace, bounded replies, idempotent acquisition by request id, the direct
// handoff (a release grants the permits to the waiters at the head that
// fit; they return without another round trip), and the same liveness
// bound. Permits' leases end on the Redis server's clock: a
// crashed holder's permits come back when its lease ends.
//
// It is safe for concurrent use and cheap to make (NewFair talks to
// nobody). On a zero Fair every call returns an error matching
// fairlock.ErrInvalidValue. Bad input (n <= 0, a negative lease or wait, a
// nil ctx) returns an error matching fairlock.ErrInvalidValue and sends
// nothing.
type Fair struct {
	s    *core.Session
	name string
	k    wire.SemFairKeys
}

// The fair semaphore's refusals, matched with errors.Is.
var (
	// ErrNotSet: the pool was never set (SetPermits).
	ErrNotSet = wire.ErrSemNotSet
	// ErrTooMany: an acquisition asked for more permits than the pool has
	// (it is refused, not queued: it could never be granted).
	ErrTooMany = wire.ErrSemTooMany
	// ErrNegative: AddPermits would make the pool negative.
	ErrNegative = wire.ErrSemNegative
)

// NewFair returns a handle on the fair semaphore called name. Its pool is
// set by SetPermits; until then acquisitions fail with ErrNotSet.
func NewFair(c *fairlock.Client, name string) (*Fair, error) {
	s := core.Of(c)
	if s == nil {
		return nil, fmt.Errorf("%w: nil client", fairlock.ErrInvalidValue)
	}
	if err := wire.ValidateName(name); err != nil {
		return nil, core.Errorf(err, "")
	}
	s.RegisterKind(core.KindFairSemaphore, renewFair)
	return &Fair{s: s, name: name, k: wire.SemFairKeysFor(name)}, nil
}

// holdersPrefix and leasesPrefix: a hold's watchdog entry is named by its
// semaphore's holders hash; the renewal finds the leases set beside it.
const (
	holdersPrefix = "fairlock_sem:"
	leasesPrefix  = "fairlock_sem_lease:"
)

// renewFair is the watchdog's renewal of fair-semaphore holds
// (sem_fair_renew.lua): names are holders hashes.
func renewFair(ctx context.Context, s *core.Session, names, owners []string, leaseMs int64) ([]wire.RenewStatus, error) {
	ks := make([]wire.SemFairKeys, len(names))
	for i, n := range names {
		ks[i] = wire.SemFairKeys{Holders: n, Leases: leasesPrefix + strings.TrimPrefix(n, holdersPrefix)}
	}
	return s.SemFairScripts().RenewEach(ctx, s.RDB, ks, owners, leaseMs)
}

// Name is the semaphore's name.
func (f *Fair) Name() string {
	if f == nil {
		return ""
	}
	return f.name
}

var errZeroFair = fmt.Errorf("%w: zero semaphore.Fair (use NewFair)", fairlock.ErrInvalidValue)

func (f *Fair) check(ctx context.Context) error {
	if f == nil || f.s == nil {
		return errZeroFair
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", fairlock.ErrInvalidValue)
	}
	return nil
}

// Acquire takes n permits, waiting in the queue until they are granted or
// ctx ends.
//
// With lease 0 the permits are kept by the client's watchdog (they expire
// one client lease after the last renewal: a holder that crashes gives
// them back within that lease); a positive lease (at least 10 ms) makes
// them come back that long after the grant, on the server's clock.
//
// It returns either a Permit with a nil error (the caller holds the
// permits), or an error and no permits: one matching fairlock.ErrCanceled
// and ctx.Err() when ctx ended (the queue place is left and anything a late
// copy of the request took is given back, in the background),
// fairlock.ErrClosed after Close, ErrNotSet, ErrTooMany.
func (f *Fair) Acquire(ctx context.Context, n int, lease time.Duration) (*Permit, error) {
	return f.acquire(ctx, n, core.Forever, lease, nil)
}

// AcquireOptions are the general form of an acquisition (AcquireWith).
type AcquireOptions struct {
	// Lease is the explicit lease; 0: the watchdog keeps the permits.
	Lease time.Duration
	// Wait bounds the wait in the queue; Forever waits until ctx ends; 0
	// makes one attempt that never queues (see TryAcquire for how this
	// differs from the fair lock's wait 0).
	Wait time.Duration
	// Position, when not nil, is called after every attempt that leaves
	// the caller queued, with its place: how many requests are ahead of it
	// (an upper bound when requests ahead of it gave up, see
	// fairlock.Position), whether it (re)joined the tail, and an estimate
	// of its wait from the rate at which the queue ahead moved. It runs on
	// the waiting goroutine, between attempts: it must return quickly.
	// Asking costs one HMGET in the attempt's script, no round trip.
	Position func(fairlock.Position)
}

// Forever, as AcquireOptions.Wait, waits until the permits are granted or
// ctx ends.
const Forever = core.Forever

// AcquireWith takes n permits as o says: Acquire and TryAcquire with a
// queue position callback. It returns a nil Permit and a nil error when
// o.Wait ran out, and follows Acquire's rules otherwise.
func (f *Fair) AcquireWith(ctx context.Context, n int, o AcquireOptions) (*Permit, error) {
	if o.Wait < 0 && o.Wait != Forever {
		return nil, fmt.Errorf("%w: semaphore %q: wait %v is negative (0 makes one attempt, Forever waits until ctx ends)", fairlock.ErrInvalidValue, f.name, o.Wait)
	}
	return f.acquire(ctx, n, o.Wait, o.Lease, o.Position)
}

// TryAcquire takes n permits, waiting in the queue at most wait (0: one
// attempt that never queues, granted only when nobody waits and n permits
// are free). It returns a nil Permit and a nil error when the wait ran out,
// and follows Acquire's rules otherwise.
//
// Wait 0 here and in the fair lock: the fair lock's TryLockFor(ctx, 0,
// lease) makes one queued attempt (as Redisson's tryLock(0, lease)): it
// joins the tail for that attempt and, not granted, leaves at once, a
// second round trip. Who is granted is the same (only when nobody is
// queued ahead and the lock, here n permits, is free); what differs is
// that the fair lock's caller is in the queue for a moment (others see it,
// and a crash in between leaves it queued until it is pruned), while
// TryAcquire(wait 0) writes nothing to the queue.
func (f *Fair) TryAcquire(ctx context.Context, n int, wait, lease time.Duration) (*Permit, error) {
	if wait < 0 {
		return nil, fmt.Errorf("%w: semaphore %q: wait %v is negative (a wait of 0 makes one attempt)", fairlock.ErrInvalidValue, f.name, wait)
	}
	return f.acquire(ctx, n, wait, lease, nil)
}

// acquire runs one acquisition on the library's wait loop: a hold whose
// owner id is fresh ("<client-uuid>:<thread-id>", one per acquisition) and
// whose engine runs the fair semaphore's scripts.
func (f *Fair) acquire(ctx context.Context, n int, wait, lease time.Duration, position func(fairlock.Position)) (*Permit, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	if err := checkAcquire(f.name, n, lease); err != nil {
		return nil, err
	}
	if err := countErr("permits", n); err != nil {
		return nil, err
	}
	// wire.Owner's format, without fmt.
	owner := f.s.ID + ":" + strconv.FormatInt(f.s.NewThreadID(), 10)
	queue := wait != 0
	// The engine, the Permit and the token live in one allocation.
	a := &fairAcquisition{e: fairEngine{s: f.s, k: f.k, n: int64(n)}}
	m, err := core.NewHold(f.s, f.k.Holders, owner, &a.e, core.KindFairSemaphore, queue)
	if err != nil {
		return nil, err
	}
	m.Label = f.name // errors name the semaphore, not its holders key
	ok, err := m.Acquire(ctx, core.AcquireOpts{Lease: lease, Wait: wait, Queue: queue, Token: &a.p.token, Position: positionhook.ToCore(position)})
	if err != nil || !ok {
		return nil, err
	}
	a.p.m, a.p.n = m, n
	return &a.p, nil
}

// fairAcquisition is what one acquisition allocates besides its hold.
type fairAcquisition struct {
	e fairEngine
	p Permit
}

// fairEngine runs the fair semaphore's scripts for one acquisition of n
// permits (core.Engine and core.Voider). Its holds are fields of the
// holders hash, which is the hold's name: core's replica check
// (HEXISTS/HINCRBY 0 on it) fits them as it is.
type fairEngine struct {
	s *core.Session
	k wire.SemFairKeys
	n int64

	// The re-check after subscribing (issue 33): the first definite reply
	// that queued the request arms recheck, with that reply's sleep and
	// when it came; the next Try (core's attempt right after subscribing
	// to the waiter's channel) consumes it.
	mu       sync.Mutex
	armed    bool // a queued reply came; no re-check yet
	rechecks bool // the re-check was made
	sleepMs  int64
	at       time.Time
	id       string // the request the reply was for
}

func (e *fairEngine) args(a wire.Args) wire.SemArgs {
	return wire.SemArgs{Owner: a.Owner, Permits: e.n, LeaseMs: a.LeaseMs, WaitMs: a.WaitMs, GraceMs: a.GraceMs,
		AcquireID: a.AcquireID, LatchMs: a.LatchMs, PubCmd: a.PubCmd}
}

// Try makes one attempt (sem_fair_acquire.lua): acquired, ttlMs is the
// grant's token; otherwise how long to sleep at most.
//
// The re-check (issue 33). The attempt that follows the first one that
// queued the request is core's re-check after subscribing to the waiter's
// channel: it catches a message sent before the subscription. The scripts
// send a waiter a message only as the head or the waiter right behind it,
// or as a grant, which writes the request's latch; so when the waiter is
// queued behind the first two and its request has no latch
// (sem_fair_queued.lua: two reads), no message was lost and the first
// attempt's reply stands (its sleep counted from when it came): the full
// script is not run. Otherwise, and for every later attempt, it is.
func (e *fairEngine) Try(ctx context.Context, a wire.Args, queue bool) (bool, int64, error) {
	if sleep, ok := e.recheck(a, queue); ok {
		still, err := e.s.SemFairScripts().Queued(ctx, e.s.RDB, e.k, wire.SemArgs{Owner: a.Owner, AcquireID: a.AcquireID})
		if err == nil && still {
			return false, sleep, nil
		}
	}
	sa := e.args(a)
	sa.Queue = queue
	r, err := e.s.SemFairScripts().Acquire(ctx, e.s.RDB, e.k, sa)
	if err != nil {
		return false, 0, err
	}
	if r.Granted {
		return true, r.Token, nil
	}
	if queue {
		e.queued(a.AcquireID, r.SleepMs)
	}
	return false, r.SleepMs, nil
}

// queued records a reply that queued request id (the first arms the
// re-check).
func (e *fairEngine) queued(id string, sleepMs int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.armed && !e.rechecks {
		e.armed, e.sleepMs, e.at, e.id = true, sleepMs, time.Now(), id
	}
}

// recheck reports whether this attempt is the re-check (once per
// acquisition, for the request the armed reply was for), and the sleep
// left of that reply (-1 stays -1: no lease will end).
func (e *fairEngine) recheck(a wire.Args, queue bool) (int64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.armed || e.rechecks {
		return 0, false
	}
	e.armed, e.rechecks = false, true
	if !queue || a.AcquireID == "" || a.AcquireID != e.id {
		return 0, false
	}
	if e.sleepMs < 0 {
		return e.sleepMs, true
	}
	return max(1, e.sleepMs-time.Since(e.at).Milliseconds()), true
}

// TryAhead is Try with the caller's queue position (core.AheadTrier).
func (e *fairEngine) TryAhead(ctx context.Context, a wire.Args) (bool, int64, wire.Ahead, error) {
	sa := e.args(a)
	sa.Queue, sa.Position = true, true
	r, err := e.s.SemFairScripts().Acquire(ctx, e.s.RDB, e.k, sa)
	if err != nil {
		return false, 0, wire.Ahead{Ahead: -1}, err
	}
	if r.Granted {
		return true, r.Token, r.Ahead, nil
	}
	return false, r.SleepMs, r.Ahead, nil
}

// GiveUp leaves the queue (sem_fair_leave.lua).
func (e *fairEngine) GiveUp(ctx context.Context, a wire.Args) error {
	_, err := e.s.SemFairScripts().Leave(ctx, e.s.RDB, e.k, e.args(a))
	return err
}

func (e *fairEngine) Unlock(ctx context.Context, a wire.Args) (wire.UnlockResult, error) {
	ok, err := e.s.SemFairScripts().Release(ctx, e.s.RDB, e.k, wire.SemArgs{Owner: a.Owner, ReleaseID: a.RequestID,
		LatchMs: a.LatchMs, GraceMs: a.GraceMs, PubCmd: a.PubCmd})
	if ok {
		return wire.Released, err
	}
	return wire.NotHeld, err
}

// ForceUnlock is Unlock: the fair semaphore has no forced release.
func (e *fairEngine) ForceUnlock(ctx context.Context, a wire.Args) (bool, error) {
	r, err := e.Unlock(ctx, a)
	return r == wire.Released, err
}

// WakeChannel is the waiter's own channel: only the waiters that must act
// are woken.
func (e *fairEngine) WakeChannel(owner string) string { return e.k.WaiterChannel(owner) }

// Handoff (core.HandingOff) is true (issue 33): a release grants the
// permits to the heads that fit directly and publishes the grant
// (sem_fair_release.lua), which the wait loop takes without an attempt and
// claims (its full lease) in the background; the scripts send a waiter
// woken while the head cannot be granted its attempt's reply instead of a
// plain wake-up (wire.Note, res_sem.lua's RES_NOTES), which the wait loop
// takes without an attempt either. A waiter that gives up voids its
// request (sem_fair_abandon.lua: a grant in flight is given back) besides
// leaving the queue.
func (e *fairEngine) Handoff() bool { return true }

// Abandon voids the request (sem_fair_abandon.lua), which gives back the
// permits a copy of it was granted: nothing is left for the caller to
// release.
func (e *fairEngine) Abandon(ctx context.Context, a wire.Args) (bool, error) {
	_, err := e.s.SemFairScripts().Abandon(ctx, e.s.RDB, e.k, e.args(a))
	return false, err
}

func fairCall[T any](f *Fair, ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	if err := f.check(ctx); err != nil {
		var zero T
		return zero, err
	}
	v, err := core.Call(ctx, fn)
	if err != nil {
		err = fmt.Errorf("semaphore %q: %w", f.name, err)
	}
	return v, err
}

// SetPermits sets the pool to n permits (0 <= n <= MaxPermits). Holders keep what they
// hold; a pool shrunk below what is held grants nothing until enough is
// given back. An increase wakes the head of the queue.
func (f *Fair) SetPermits(ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: %d permits", fairlock.ErrInvalidValue, n)
	}
	if err := countErr("permits", n); err != nil {
		return err
	}
	_, err := fairCall(f, ctx, func(ctx context.Context) (int64, error) {
		old, _, err := f.s.SemFairScripts().SetPermits(ctx, f.s.RDB, f.k, int64(n), f.semArgs())
		return old, err
	})
	return err
}

// AddPermits adds delta permits to the pool (negative: removes them) and
// returns the new pool. It fails with ErrNotSet before SetPermits, with
// ErrNegative when the pool would drop below 0, and with an error matching
// fairlock.ErrInvalidValue (a delta beyond ±MaxPermits) or from Redis (a
// pool beyond MaxPermits), the pool left as it was.
func (f *Fair) AddPermits(ctx context.Context, delta int) (int, error) {
	if err := countErr("delta", delta); err != nil {
		return 0, err
	}
	v, err := fairCall(f, ctx, func(ctx context.Context) (int64, error) {
		return f.s.SemFairScripts().AddPermits(ctx, f.s.RDB, f.k, int64(delta), f.semArgs())
	})
	return int(v), err
}

func (f *Fair) semArgs() wire.SemArgs {
	return wire.SemArgs{GraceMs: f.s.GraceMs(), PubCmd: f.s.PubCmd()}
}

// State is what a fair semaphore holds at one moment.
type State struct {
	Pool      int // the pool; -1: not set
	Available int // the pool less the permits of live holds (negative after a shrink; -1: not set)
	Holders   int // live holds
	Queued    int // waiters in the queue
}

// State reads the semaphore (one read-only script).
func (f *Fair) State(ctx context.Context) (State, error) {
	st, err := fairCall(f, ctx, func(ctx context.Context) (wire.SemState, error) {
		return f.s.SemFairScripts().State(ctx, f.s.RDB, f.k)
	})
	return State{Pool: int(st.Pool), Available: int(st.Available), Holders: int(st.Holders), Queued: int(st.Queued)}, err
}

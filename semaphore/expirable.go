// Package semaphore holds distributed semaphores on Redis.
//
// Expirable is Redisson's RPermitExpirableSemaphore, wire-compatible with
// it: a pool of permits, each acquired permit with an id and an optional
// lease after which it comes back to the pool by itself. A Java service
// using Redisson's getPermitExpirableSemaphore(name) and a Go service using
// NewExpirable(client, name) share one pool: the same keys, channel, permit
// ids and stored scores. It is not fair: when permits come back every
// waiter tries again and any may get them.
package semaphore

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Expirable is a handle on a permit-expirable semaphore (Redisson's
// RPermitExpirableSemaphore). It is safe for concurrent use and cheap to
// make (NewExpirable talks to nobody). Make one with NewExpirable: on a
// zero Expirable (or a nil *Expirable) every call returns an error matching
// fairlock.ErrInvalidValue.
//
// Acquire and TryAcquire return a Permit: one acquisition of n permits,
// held like a lock (Done, Err, ValidUntil, Token, Release). Permit ids are
// 32 hex characters (16 random bytes, stored raw, as Redisson shows and
// stores them); the by-id calls (Release, TryRelease, TryReleaseAll,
// UpdateLease, LeaseTime) take them, as Redisson's do, whoever took them (a
// Java client included).
//
// Every call is bounded by its ctx. Bad input (n <= 0, a negative lease or
// wait, an id that is not hex, a nil ctx) returns an error matching
// fairlock.ErrInvalidValue and sends nothing.
type Expirable struct {
	s    *core.Session
	name string
	k    wire.SemKeys
}

// NewExpirable returns a handle on the permit-expirable semaphore called
// name. The semaphore has no permits until TrySetPermits, SetPermits or
// AddPermits gives it some.
func NewExpirable(c *fairlock.Client, name string) (*Expirable, error) {
	s := core.Of(c)
	if s == nil {
		return nil, fmt.Errorf("%w: nil client", fairlock.ErrInvalidValue)
	}
	if err := wire.ValidateName(name); err != nil {
		return nil, core.Errorf(err, "")
	}
	s.RegisterKind(core.KindSemaphore, renewEach)
	return &Expirable{s: s, name: name, k: wire.SemKeysFor(name)}, nil
}

// MaxPermits is the largest count a semaphore call takes (pools, deltas,
// permits asked): 2^53, the largest integer the scripts' Lua numbers
// (doubles) count exactly. A larger count returns an error matching
// fairlock.ErrInvalidValue and sends nothing; the scripts refuse one too
// (and a pool that a call would move beyond it), writing nothing.
const MaxPermits = 1 << 53

// MaxAcquire is the most permits one Expirable acquisition takes: each
// permit has an id of its own, made here and sent with the request (16
// bytes each: 16 MiB at most). More returns an error matching
// fairlock.ErrInvalidValue.
const MaxAcquire = 1 << 20

// countErr refuses a count beyond ±MaxPermits.
func countErr(what string, n int) error {
	if n > MaxPermits || n < -MaxPermits {
		return fmt.Errorf("%w: %s %d is beyond 2^53 (semaphore.MaxPermits)", fairlock.ErrInvalidValue, what, n)
	}
	return nil
}

// renewEach is the watchdog's renewal of permits (sem_renew.lua).
func renewEach(ctx context.Context, s *core.Session, names, owners []string, leaseMs int64) ([]wire.RenewStatus, error) {
	return s.Scripts().SemRenewEach(ctx, s.RDB, names, owners, leaseMs)
}

// Name is the semaphore's name (its pool's key).
func (e *Expirable) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

// maxSleep bounds a waiter's sleep between attempts when no message comes:
// a message lost (a pub/sub reconnect, a Java client's publish to a
// channel a Go waiter subscribed late to) costs at most this.
const maxSleep = 2 * time.Second

var errZero = fmt.Errorf("%w: zero semaphore.Expirable (use NewExpirable)", fairlock.ErrInvalidValue)

func (e *Expirable) check(ctx context.Context) error {
	if e == nil || e.s == nil {
		return errZero
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", fairlock.ErrInvalidValue)
	}
	return nil
}

// Acquire takes n permits, waiting until they are free or ctx ends.
//
// With lease 0 the permits are kept by the client's watchdog: they expire
// one client lease (fairlock.WithLease) after the last renewal, so a
// holder that crashes or loses Redis gives them back within that lease
// (Redisson's permit without a lease never expires, and is lost for good
// when its holder crashes; this package has no way to take such a permit).
// A positive lease (at least 10 ms) makes the permits come back that long
// after they were taken, on the Redis server's clock, renewed by nobody.
//
// The rule when ctx ends: Acquire returns either a Permit with a nil
// error, and then the caller has the permits (even if ctx ended meanwhile:
// the reply came first), or an error matching fairlock.ErrCanceled and
// ctx.Err(), and then the caller has nothing: permits that its request took
// in Redis after it stopped waiting are given back in the background (the
// request's latch also keeps a late copy of it from taking any), so no
// permit is lost. Close ends the wait with fairlock.ErrClosed.
func (e *Expirable) Acquire(ctx context.Context, n int, lease time.Duration) (*Permit, error) {
	return e.acquire(ctx, n, core.Forever, lease)
}

// TryAcquire takes n permits, waiting at most wait for them (0: one
// attempt). It returns a nil Permit and a nil error when the wait ran out,
// and follows Acquire's rules otherwise.
func (e *Expirable) TryAcquire(ctx context.Context, n int, wait, lease time.Duration) (*Permit, error) {
	if wait < 0 {
		return nil, fmt.Errorf("%w: semaphore %q: wait %v is negative (a wait of 0 makes one attempt)", fairlock.ErrInvalidValue, e.name, wait)
	}
	return e.acquire(ctx, n, wait, lease)
}

// acquire runs one acquisition on the library's wait loop: a hold
// (core.NewHold) whose owner is the acquisition's permit ids (wire.SemOwner)
// and whose engine runs the semaphore's scripts.
func (e *Expirable) acquire(ctx context.Context, n int, wait, lease time.Duration) (*Permit, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if err := checkAcquire(e.name, n, lease); err != nil {
		return nil, err
	}
	if n > MaxAcquire {
		return nil, fmt.Errorf("%w: %d permits in one acquisition (at most %d: each has an id)", fairlock.ErrInvalidValue, n, MaxAcquire)
	}
	raw := newIDs(n)
	owner := wire.SemOwner(raw)
	m, err := core.NewHold(e.s, e.name, owner, &engine{s: e.s, k: e.k, ids: raw}, core.KindSemaphore, false)
	if err != nil {
		return nil, err
	}
	var token int64
	ok, err := m.Acquire(ctx, core.AcquireOpts{Lease: lease, Wait: wait, Token: &token})
	if err != nil || !ok {
		return nil, err
	}
	p := &Permit{m: m, ids: strings.Split(owner, ","), token: token, n: n}
	held.add(e.s, e.name, p)
	return p, nil
}

// held are this process's Permits of Expirables, by client, semaphore and
// permit id, so that UpdateLease with a shorter lease cuts a Permit's
// validity at once (its validity must not outlast what Redis keeps).
// Entries of Permits that ended are swept as the map grows.
var held heldPermits

type heldPermits struct {
	mu   sync.Mutex
	m    map[heldKey]*core.Mutex
	next int // sweep ended entries when the map reaches this size
}

type heldKey struct {
	s        *core.Session
	name, id string
}

func (h *heldPermits) add(s *core.Session, name string, p *Permit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[heldKey]*core.Mutex{}
	}
	if len(h.m) >= h.next {
		for k, m := range h.m {
			if m.ValidUntil().IsZero() {
				delete(h.m, k)
			}
		}
		h.next = 2*len(h.m) + 64
	}
	for _, id := range p.ids {
		h.m[heldKey{s, name, id}] = p.m
	}
}

func (h *heldPermits) get(s *core.Session, name, id string) *core.Mutex {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[heldKey{s, name, strings.ToLower(id)}]
}

// newIDs makes n permit ids, raw.
func newIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		var b [16]byte
		_, _ = crand.Read(b[:])
		ids[i] = string(b[:])
	}
	return ids
}

// Permit is one acquisition of permits (of an Expirable or a Fair
// semaphore), held like a lock: until Release, the end of its lease (an
// explicit lease, or the watchdog's when a renewal fails), for an
// Expirable a release of its ids by id (here or by a Java client), or
// Close.
// Its methods are safe for concurrent use. A zero Permit (or a nil
// *Permit) holds nothing: Release and Err return an error matching
// fairlock.ErrInvalidValue, Done a closed channel, ValidUntil the zero
// time, IDs nil, Count and Token 0.
type Permit struct {
	m     *core.Mutex
	ids   []string
	token int64
	n     int
}

var errZeroPermit = fmt.Errorf("%w: zero semaphore.Permit (Acquire returns them)", fairlock.ErrInvalidValue)

// closedDone is the Done channel of a zero Permit.
var closedDone = func() <-chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

func (p *Permit) zero() bool { return p == nil || p.m == nil }

// IDs are the permits' ids (32 hex characters each), as Redisson shows
// them: Expirable's by-id calls and a Java client take them. A Fair
// semaphore's permits have no ids (nil): its holds are one owner each.
func (p *Permit) IDs() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.ids)
}

// Count is how many permits the acquisition took.
func (p *Permit) Count() int {
	if p == nil {
		return 0
	}
	return p.n
}

// Token is the acquisition's fencing token: every acquisition through this
// package gets a larger one than any acquisition of the same semaphore
// before it (a counter of ours, "fairlock_sem_token:{name}", that
// Redisson's acquisitions do not touch).
func (p *Permit) Token() int64 {
	if p == nil {
		return 0
	}
	return p.token
}

// Release gives the permits back (all of them; with retries, as a lock's
// Unlock). It returns an error matching fairlock.ErrNotHeld when one of
// them was no longer held (expired, or released by id): what was left of
// them came back all the same. After Close it returns fairlock.ErrClosed.
// When Redis cannot be reached it returns the error, the permits end (Err
// matching fairlock.ErrLost until the release is confirmed) and stop being
// renewed, and the release is retried in the background until Redis
// confirms it or their lease runs out.
func (p *Permit) Release(ctx context.Context) error {
	if p.zero() {
		return errZeroPermit
	}
	return p.m.Unlock(ctx)
}

// Done returns a channel closed when the permits are no longer held:
// released, lost (see Err), or ended by Close.
func (p *Permit) Done() <-chan struct{} {
	if p.zero() {
		return closedDone
	}
	return p.m.Done()
}

// Err says why the permits are no longer held: nil while held or after
// Release, an error matching fairlock.ErrLost when they were lost (a lease
// ran out, a renewal found them gone), fairlock.ErrClosed when the client
// was closed while they were held (Close gives them back).
func (p *Permit) Err() error {
	if p.zero() {
		return errZeroPermit
	}
	return p.m.Err()
}

// ValidUntil is the local instant until which the permits are held for
// sure (the latest grant's or renewal's send time plus the lease, less a
// drift margin); zero once they are not held.
func (p *Permit) ValidUntil() time.Time {
	if p.zero() {
		return time.Time{}
	}
	return p.m.ValidUntil()
}

// engine runs the semaphore's scripts for one acquisition (core.Engine,
// core.Voider, core.HeldChecker, core.Keeper): ids are its permits, raw.
type engine struct {
	s   *core.Session
	k   wire.SemKeys
	ids []string
	// kept: how long Redis keeps the latest grant regardless of its lease
	// (the keys' TTL; -1: no bound), for core.Keeper.
	kept atomic.Int64
}

func (g *engine) args(a wire.Args) wire.SemAcquireArgs {
	sa := wire.SemAcquireArgs{IDs: g.ids, LeaseMs: a.LeaseMs, NowMs: wire.ServerClock, PubCmd: a.PubCmd}
	if a.AcquireID != "" {
		sa.Request, sa.LatchMs = a.AcquireID, max(a.LatchMs, 1)
	}
	return sa
}

// Try makes one attempt: acquired, ttlMs is the grant's token; otherwise
// the time until the earliest permit expires, at most maxSleep.
func (g *engine) Try(ctx context.Context, a wire.Args, _ bool) (bool, int64, error) {
	ok, n, kept, err := g.s.Scripts().SemAcquireKept(ctx, g.s.RDB, g.k, g.args(a))
	if err != nil || ok {
		g.kept.Store(kept)
		return ok, n, err
	}
	if n < 0 || n > maxSleep.Milliseconds() {
		n = maxSleep.Milliseconds()
	}
	return false, n, nil
}

// GiveUp: the semaphore has no queue.
func (g *engine) GiveUp(context.Context, wire.Args) error { return nil }

func (g *engine) release(ctx context.Context, a wire.Args) (bool, error) {
	return g.s.Scripts().SemReleaseHold(ctx, g.s.RDB, g.k, g.ids, a.RequestID, a.LatchMs, wire.ServerClock, a.PubCmd)
}

func (g *engine) Unlock(ctx context.Context, a wire.Args) (wire.UnlockResult, error) {
	ok, err := g.release(ctx, a)
	if ok {
		return wire.Released, err
	}
	return wire.NotHeld, err
}

func (g *engine) ForceUnlock(ctx context.Context, a wire.Args) (bool, error) {
	return g.release(ctx, a)
}

func (g *engine) WakeChannel(string) string { return g.k.Channel }

// Abandon voids the request (sem_abandon.lua), which gives back whatever a
// copy of it took: nothing is left for the caller to release.
func (g *engine) Abandon(ctx context.Context, a wire.Args) (bool, error) {
	_, err := g.s.Scripts().SemAbandon(ctx, g.s.RDB, g.k, g.args(a))
	return false, err
}

// GrantKeptMs is how long Redis keeps the grant Try just reported
// (core.Keeper): the timeouts set's TTL, inherited from the pool, or -1.
func (g *engine) GrantKeptMs() int64 { return g.kept.Load() }

// KeptMs asks Redis how long the permits are still kept (sem_kept.lua):
// their lease may have been moved by UpdateLease, here or by a Java client.
func (g *engine) KeptMs(ctx context.Context, _ string) (int64, error) {
	return g.s.Scripts().SemKept(ctx, g.s.RDB, g.k, g.ids)
}

func (g *engine) HeldScript(owner string) (*redis.Script, []string, []any) {
	return g.s.Scripts().SemHeld(g.k, owner)
}

// rawIDs decodes permit ids (hex, as Acquire returns them).
func rawIDs(ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no permit ids", fairlock.ErrInvalidValue)
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		b, err := hex.DecodeString(id)
		if err != nil || len(b) == 0 {
			return nil, fmt.Errorf("%w: permit id %q is not hex", fairlock.ErrInvalidValue, id)
		}
		out[i] = string(b)
	}
	return out, nil
}

// call runs f bounded by ctx (as every lock call: core.Call).
func call[T any](e *Expirable, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	v, err := core.Call(ctx, f)
	if err != nil {
		err = fmt.Errorf("semaphore %q: %w", e.name, err)
	}
	return v, err
}

// ErrNotHeld matches the error of Release when a permit was not held:
// released already, expired, or never acquired. It is fairlock.ErrNotHeld.
var ErrNotHeld = fairlock.ErrNotHeld

// TryRelease gives back one permit. It reports whether the permit was held
// and had not expired; a held permit whose lease ran out but that was not
// yet reclaimed goes back to the pool too (and reports false).
func (e *Expirable) TryRelease(ctx context.Context, id string) (bool, error) {
	if err := e.check(ctx); err != nil {
		return false, err
	}
	raw, err := rawIDs([]string{id})
	if err != nil {
		return false, err
	}
	return call(e, ctx, func(ctx context.Context) (bool, error) {
		return e.s.Scripts().SemRelease(ctx, e.s.RDB, e.k, raw[0], wire.ServerClock, e.s.PubCmd())
	})
}

// TryReleaseAll gives back permits all at once or none: it reports how
// many went back, 0 when one of them was not held or had expired (then
// nothing changed).
func (e *Expirable) TryReleaseAll(ctx context.Context, ids []string) (int, error) {
	if err := e.check(ctx); err != nil {
		return 0, err
	}
	raw, err := rawIDs(ids)
	if err != nil {
		return 0, err
	}
	n, err := call(e, ctx, func(ctx context.Context) (int64, error) {
		return e.s.Scripts().SemReleaseMany(ctx, e.s.RDB, e.k, raw, wire.ServerClock, e.s.PubCmd())
	})
	return int(n), err
}

// Release gives back permits: one id as TryRelease, several as
// TryReleaseAll. An id that was not held (or had expired) makes it return
// an error matching ErrNotHeld (Redisson throws).
func (e *Expirable) Release(ctx context.Context, ids ...string) error {
	if len(ids) == 1 {
		ok, err := e.TryRelease(ctx, ids[0])
		if err == nil && !ok {
			err = fmt.Errorf("%w: permit %s of semaphore %q was released already, expired or never acquired", ErrNotHeld, ids[0], e.name)
		}
		return err
	}
	n, err := e.TryReleaseAll(ctx, ids)
	if err == nil && n != len(ids) {
		err = fmt.Errorf("%w: permits %v of semaphore %q: %d of %d released", ErrNotHeld, ids, e.name, n, len(ids))
	}
	return err
}

// TrySetPermits gives the semaphore n permits if it has no pool yet; it
// reports whether it did. n must not be negative.
func (e *Expirable) TrySetPermits(ctx context.Context, n int) (bool, error) {
	if err := e.check(ctx); err != nil {
		return false, err
	}
	if n < 0 {
		return false, fmt.Errorf("%w: %d permits", fairlock.ErrInvalidValue, n)
	}
	if err := countErr("permits", n); err != nil {
		return false, err
	}
	return call(e, ctx, func(ctx context.Context) (bool, error) {
		return e.s.Scripts().SemTrySetPermits(ctx, e.s.RDB, e.k, int64(n), e.s.PubCmd())
	})
}

// SetPermits makes the semaphore's total (available + acquired) n: the
// available count may go below 0 when more than n are held. n must not be
// negative.
func (e *Expirable) SetPermits(ctx context.Context, n int) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%w: %d permits", fairlock.ErrInvalidValue, n)
	}
	if err := countErr("permits", n); err != nil {
		return err
	}
	_, err := call(e, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, e.s.Scripts().SemSetPermits(ctx, e.s.RDB, e.k, int64(n), e.s.PubCmd())
	})
	return err
}

// AddPermits adds n permits to the available count; n may be negative (as
// in Redisson: the count may go below 0). A count that would leave
// ±MaxPermits is refused (ErrInvalidValue in Go, an error from Redis
// when only the sum is out of range), the pool left as it was.
func (e *Expirable) AddPermits(ctx context.Context, n int) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	if err := countErr("delta", n); err != nil {
		return err
	}
	_, err := call(e, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, e.s.Scripts().SemAddPermits(ctx, e.s.RDB, e.k, int64(n), e.s.PubCmd())
	})
	return err
}

func (e *Expirable) counts(ctx context.Context) (wire.SemCounts, error) {
	if err := e.check(ctx); err != nil {
		return wire.SemCounts{}, err
	}
	return call(e, ctx, func(ctx context.Context) (wire.SemCounts, error) {
		return e.s.Scripts().SemCounts(ctx, e.s.RDB, e.k, wire.ServerClock, e.s.PubCmd())
	})
}

// AvailablePermits is the number of permits free now (expired permits
// reclaimed first); 0 for a semaphore with no pool, and below 0 after
// SetPermits or AddPermits took away more than were free.
func (e *Expirable) AvailablePermits(ctx context.Context) (int, error) {
	c, err := e.counts(ctx)
	return int(c.Available), err
}

// AcquiredPermits is the number of permits held now (expired permits
// reclaimed first).
func (e *Expirable) AcquiredPermits(ctx context.Context) (int, error) {
	c, err := e.counts(ctx)
	return int(c.Acquired), err
}

// Permits is the semaphore's total, available + acquired (Redisson's
// getPermits); 0 for a semaphore with no pool.
func (e *Expirable) Permits(ctx context.Context) (int, error) {
	c, err := e.counts(ctx)
	return int(c.Permits()), err
}

// UpdateLease gives a held permit a new lease counted from now (0: it
// never expires). It reports whether the permit was held (not released,
// not expired). A Permit holding it follows the new lease: one of this
// client is cut to a shorter lease at once, and any Permit with an
// explicit lease, when that runs out, asks Redis and goes on for what a
// longer lease (set here or by a Java client) left it. A watchdog-kept
// Permit's next renewal sets the client's lease again.
func (e *Expirable) UpdateLease(ctx context.Context, id string, lease time.Duration) (bool, error) {
	if err := e.check(ctx); err != nil {
		return false, err
	}
	if lease < 0 {
		return false, fmt.Errorf("%w: lease %v", fairlock.ErrInvalidValue, lease)
	}
	raw, err := rawIDs([]string{id})
	if err != nil {
		return false, err
	}
	leaseMs := wire.NoLease
	if lease > 0 {
		leaseMs = max(1, lease.Milliseconds())
	}
	sent := time.Now()
	ok, err := call(e, ctx, func(ctx context.Context) (bool, error) {
		return e.s.Scripts().SemUpdateLease(ctx, e.s.RDB, e.k, raw[0], leaseMs, wire.ServerClock, e.s.PubCmd())
	})
	if err == nil && ok && lease > 0 {
		// A Permit of this client holding the id: Redis ends it by then,
		// so its validity must not outlast that (a longer lease is
		// followed when the Permit's own runs out: core.Keeper).
		if m := held.get(e.s, e.name, id); m != nil {
			m.Bound(sent, leaseMs)
		}
	}
	return ok, err
}

// LeaseTime is a held permit's remaining lease: -1 for a permit with no
// lease (Redisson's -1), or an error matching ErrNotHeld when the permit
// is not held.
func (e *Expirable) LeaseTime(ctx context.Context, id string) (time.Duration, error) {
	if err := e.check(ctx); err != nil {
		return 0, err
	}
	raw, err := rawIDs([]string{id})
	if err != nil {
		return 0, err
	}
	ms, err := call(e, ctx, func(ctx context.Context) (int64, error) {
		return e.s.Scripts().SemLeaseTime(ctx, e.s.RDB, e.k, raw[0], wire.ServerClock, e.s.PubCmd())
	})
	switch {
	case err != nil:
		return 0, err
	case ms == 0:
		return 0, fmt.Errorf("%w: permit %s of semaphore %q", ErrNotHeld, id, e.name)
	case ms < 0:
		return -1, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// checkAcquire refuses n < 1, a negative lease and an explicit lease under
// core.MinLease, naming the semaphore and the value.
func checkAcquire(name string, n int, lease time.Duration) error {
	switch {
	case n < 1:
		return fmt.Errorf("%w: semaphore %q: %d permits asked (at least 1)", fairlock.ErrInvalidValue, name, n)
	case lease < 0 || (lease > 0 && lease < core.MinLease):
		return fmt.Errorf("%w: semaphore %q: lease %v (a lease of 0 lets the watchdog keep the permits; an explicit lease is at least %v)",
			fairlock.ErrInvalidValue, name, lease, core.MinLease)
	}
	return nil
}

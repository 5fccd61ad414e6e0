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
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/pubsub"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Expirable is a handle on a permit-expirable semaphore (Redisson's
// RPermitExpirableSemaphore). It is safe for concurrent use and cheap to
// make (NewExpirable talks to nobody); permits belong to whoever has their
// ids, not to a handle. Make one with NewExpirable: on a zero Expirable
// every call returns an error matching fairlock.ErrInvalidValue.
//
// Permit ids are 32 hex characters (16 random bytes, stored raw, as
// Redisson shows and stores them). A lease of 0 takes a permit that never
// expires (Redisson's -1); a positive lease makes the permit come back to
// the pool that long after it was taken, on the Redis server's clock.
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
		return nil, err
	}
	return &Expirable{s: s, name: name, k: wire.SemKeysFor(name)}, nil
}

// Name is the semaphore's name (its pool's key).
func (e *Expirable) Name() string { return e.name }

// maxSleep bounds a waiter's sleep between attempts when no message comes:
// a message lost (a pub/sub reconnect, a Java client's publish to a
// channel a Go waiter subscribed late to) costs at most this.
const maxSleep = 2 * time.Second

// Retry backoff after a transient error.
const (
	retryMin = 25 * time.Millisecond
	retryMax = time.Second
)

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

// Acquire takes n permits, waiting until they are free or ctx ends. A
// lease of 0 takes permits that never expire. It returns the permits' ids.
//
// The rule when ctx ends: Acquire returns either the ids with a nil error,
// and then the caller has the permits (even if ctx ended meanwhile: the
// reply came first), or an error matching fairlock.ErrCanceled and
// ctx.Err(), and then the caller has nothing: permits that its request took
// in Redis after it stopped waiting are given back in the background (the
// request's latch also keeps a late copy of it from taking any), so no
// permit is lost. Close ends the wait with fairlock.ErrClosed.
func (e *Expirable) Acquire(ctx context.Context, n int, lease time.Duration) ([]string, error) {
	return e.acquire(ctx, n, -1, lease)
}

// TryAcquire takes n permits, waiting at most wait for them (0: one
// attempt). It returns nil ids and a nil error when the wait ran out, and
// follows Acquire's rule when ctx ends first.
func (e *Expirable) TryAcquire(ctx context.Context, n int, wait, lease time.Duration) ([]string, error) {
	if wait < 0 {
		return nil, fmt.Errorf("%w: wait %v", fairlock.ErrInvalidValue, wait)
	}
	return e.acquire(ctx, n, wait, lease)
}

func (e *Expirable) acquire(ctx context.Context, n int, wait, lease time.Duration) ([]string, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if n <= 0 || lease < 0 {
		return nil, fmt.Errorf("%w: %d permits, lease %v", fairlock.ErrInvalidValue, n, lease)
	}
	if err := ctx.Err(); err != nil {
		return nil, core.Canceled(err)
	}
	if !e.s.Begin() {
		return nil, fairlock.ErrClosed
	}
	defer e.s.End()
	leaseMs := wire.NoLease
	if lease > 0 {
		leaseMs = max(1, lease.Milliseconds())
	}
	var deadline time.Time
	if wait >= 0 {
		deadline = time.Now().Add(wait)
	}
	expired := func() bool { return !deadline.IsZero() && !time.Now().Before(deadline) }
	var w *pubsub.Waiter
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	backoff := retryMin
	var lastErr error
	for {
		ids, waitMs, err := e.attempt(ctx, n, leaseMs)
		sleep := maxSleep
		switch {
		case err == nil && ids != nil:
			return ids, nil
		case ctx.Err() != nil || e.s.Closed():
			return nil, e.ended(ctx, lastErr)
		case err != nil && core.Transient(err):
			lastErr = err
			sleep = backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, retryMax)
		case err != nil:
			return nil, fmt.Errorf("semaphore %q: acquire: %w", e.name, err)
		default:
			lastErr = nil
			backoff = retryMin
			if waitMs > 0 {
				sleep = min(sleep, time.Duration(waitMs)*time.Millisecond)
			}
		}
		if expired() {
			if lastErr != nil {
				return nil, fmt.Errorf("semaphore %q: acquire: %w", e.name, lastErr)
			}
			return nil, nil
		}
		if w == nil && lastErr == nil {
			w, err = e.subscribe(ctx, deadline)
			switch {
			case err == nil:
				continue // try again at once: permits may have come back meanwhile
			case ctx.Err() != nil || e.s.Closed():
				return nil, e.ended(ctx, nil)
			case expired():
				return nil, nil
			case !core.Transient(err):
				return nil, fmt.Errorf("semaphore %q: subscribe: %w", e.name, err)
			}
			lastErr = err
			w = nil
		}
		if !deadline.IsZero() {
			sleep = min(sleep, time.Until(deadline))
		}
		timer.Reset(max(sleep, 0))
		var wake <-chan struct{}
		if w != nil {
			wake = w.C()
		}
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, e.ended(ctx, lastErr)
		case <-e.s.Closing():
			return nil, fairlock.ErrClosed
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// ended is the error of a wait ended by ctx or Close.
func (e *Expirable) ended(ctx context.Context, last error) error {
	if ctx.Err() == nil && e.s.Closed() {
		return fairlock.ErrClosed
	}
	if last != nil {
		return fmt.Errorf("%w: %w", core.Canceled(ctx.Err()), last)
	}
	return core.Canceled(ctx.Err())
}

func (e *Expirable) subscribe(ctx context.Context, deadline time.Time) (*pubsub.Waiter, error) {
	sctx, unbind := e.s.Bind(ctx)
	defer unbind()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadline(sctx, deadline)
		defer cancel()
	}
	return e.s.Hub.Subscribe(sctx, e.k.Channel)
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

type acquireReply struct {
	ok     bool
	waitMs int64
}

// attempt sends one acquisition request with fresh ids. When its outcome
// is unknown (the call failed, or ctx or Close ended it before the reply)
// the request is given up in the background (sem_abandon.lua): permits it
// took come back and a late copy takes none.
func (e *Expirable) attempt(ctx context.Context, n int, leaseMs int64) ([]string, int64, error) {
	a := wire.SemAcquireArgs{
		IDs: newIDs(n), LeaseMs: leaseMs, NowMs: wire.ServerClock,
		LatchMs: e.s.Config.LatchTTL.Milliseconds(), PubCmd: e.s.PubCmd(),
	}
	bctx, unbind := e.s.Bind(ctx)
	r, err := core.Call(bctx, func(ctx context.Context) (acquireReply, error) {
		ok, w, err := e.s.Scripts().SemAcquire(ctx, e.s.RDB, e.k, a)
		return acquireReply{ok, w}, err
	})
	unbind()
	switch {
	case errors.Is(err, wire.ErrAbandoned), errors.Is(err, wire.ErrGrantOver):
		return nil, 0, nil // cannot happen with fresh ids; nothing held
	case err != nil && !core.IsScriptError(err):
		e.abandon(a)
		return nil, 0, err
	case err != nil:
		return nil, 0, err
	case !r.ok:
		return nil, r.waitMs, nil
	}
	out := make([]string, n)
	for i, id := range a.IDs {
		out[i] = hex.EncodeToString([]byte(id))
	}
	return out, 0, nil
}

// abandon gives up a request in the background, retried until Redis
// answers, for as long as a copy of it could still take permits (the
// latch's lifetime) and the session lives.
func (e *Expirable) abandon(a wire.SemAcquireArgs) {
	until := time.Now().Add(e.s.Config.LatchTTL)
	e.s.Cleanup(until, func(ctx context.Context) error {
		_, err := e.s.Scripts().SemAbandon(ctx, e.s.RDB, e.k, a.IDs, a.LatchMs, a.PubCmd)
		return err
	})
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

// call runs f bounded by ctx and the session's Close.
func call[T any](e *Expirable, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	bctx, unbind := e.s.Bind(ctx)
	defer unbind()
	v, err := core.Call(bctx, f)
	if err != nil && ctx.Err() == nil && e.s.Closed() {
		return v, fairlock.ErrClosed
	}
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
	_, err := call(e, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, e.s.Scripts().SemSetPermits(ctx, e.s.RDB, e.k, int64(n), e.s.PubCmd())
	})
	return err
}

// AddPermits adds n permits to the available count; n may be negative (as
// in Redisson: the count may go below 0).
func (e *Expirable) AddPermits(ctx context.Context, n int) error {
	if err := e.check(ctx); err != nil {
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
// not expired).
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
	return call(e, ctx, func(ctx context.Context) (bool, error) {
		return e.s.Scripts().SemUpdateLease(ctx, e.s.RDB, e.k, raw[0], leaseMs, wire.ServerClock, e.s.PubCmd())
	})
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

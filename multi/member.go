package multi

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/rwlock"
)

// Member is a lock handle that a MultiLock or a RedLock holds: every lock
// handle of this module is one (*reentrant.Mutex, *fair.Mutex,
// *fenced.Mutex, and either half of an rwlock, *rwlock.Lock), through the
// calls of fairlock.Handle. A member is used only through these calls: its
// holds, validity, Done and Err are its own, as documented there.
type Member interface {
	Name() string
	Owner() string
	Lock(ctx context.Context) error
	LockWithLease(ctx context.Context, lease time.Duration) error
	TryLock(ctx context.Context) (bool, error)
	TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error)
	Unlock(ctx context.Context) error
	IsHeld(ctx context.Context) (bool, error)
	Done() <-chan struct{}
	Err() error
	ValidUntil() time.Time
}

// tokener is a member with fencing tokens (fairlock.FencedHandle: the
// fenced and fair locks).
type tokener interface {
	LockAndGetToken(ctx context.Context) (int64, error)
	LockAndGetTokenWithLease(ctx context.Context, lease time.Duration) (int64, error)
	TryLockAndGetToken(ctx context.Context, wait, lease time.Duration) (int64, bool, error)
	Token(ctx context.Context) (int64, error)
}

// MemberError is an error of one member: Index is its position in the list
// given to New or NewRedLock, Name and Owner its lock name and owner id.
// errors.Is and errors.As see through it to the member's own error (for
// example fairlock.ErrLost, fairlock.ErrNotHeld).
type MemberError struct {
	Index int
	Name  string
	Owner string
	Err   error
}

func (e *MemberError) Error() string {
	if e == nil {
		return "multi: <nil MemberError>"
	}
	return fmt.Sprintf("multi: member %d (%q, owner %s): %v", e.Index, e.Name, e.Owner, e.Err)
}

func (e *MemberError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// member is one validated member.
type member struct {
	m     Member
	idx   int    // position in the caller's list
	name  string // lock name
	slot  int    // cluster slot of the name
	rank  int    // 0: an rwlock's write half; 1: anything else (see order)
	tok   tokener
	fair  bool   // a fair lock: a wait of 0 queues, so one-shot attempts use TryLock
	owner string // owner id
}

func (mb *member) errf(err error) error {
	if err == nil {
		return nil
	}
	return &MemberError{Index: mb.idx, Name: mb.name, Owner: mb.owner, Err: err}
}

// isNil reports a nil member, typed or not.
func isNil(m Member) bool {
	if m == nil {
		return true
	}
	v := reflect.ValueOf(m)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// validate checks a member list and returns the members in the caller's
// order. It refuses an empty list, a nil member and a zero handle (one not
// made by its package's New: its Name is "").
func validate(members []Member) ([]*member, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("%w: multi: no members", fairlock.ErrInvalidValue)
	}
	out := make([]*member, len(members))
	for i, m := range members {
		if isNil(m) {
			return nil, fmt.Errorf("%w: multi: member %d is nil", fairlock.ErrInvalidValue, i)
		}
		name := m.Name()
		if name == "" {
			return nil, fmt.Errorf("%w: multi: member %d is a zero lock handle (make one with its package's New)", fairlock.ErrInvalidValue, i)
		}
		mb := &member{m: m, idx: i, name: name, slot: core.Slot(name), rank: 1, owner: m.Owner()}
		if rw, ok := m.(*rwlock.Lock); ok && rw.IsWrite() {
			mb.rank = 0
		}
		if t, ok := m.(tokener); ok {
			mb.tok = t
		}
		_, mb.fair = m.(*fair.Mutex)
		out[i] = mb
	}
	return out, nil
}

// clientID is the client part of an owner id "<client-uuid>:<thread-id>".
func clientID(owner string) string {
	id, _, _ := strings.Cut(owner, ":")
	return id
}

// mode is how a member is taken.
type mode int

const (
	once    mode = iota // one attempt, no wait
	bounded             // wait up to wait
	forever             // until ctx ends
)

// take acquires mb as md says, with lease (0: the watchdog's). It returns
// the acquisition's fencing token when the member has them. ok with a
// non-nil err means the member was taken but reading its token failed: the
// caller holds it and must give it back.
func (mb *member) take(ctx context.Context, md mode, wait, lease time.Duration) (tok int64, ok bool, err error) {
	m, t := mb.m, mb.tok
	switch md {
	case once:
		// A fair lock's TryLockFor(0) queues once; TryLock never queues
		// (Redisson's tryLock()), so a fair member without a lease uses it.
		if t != nil && !(mb.fair && lease == 0) {
			return t.TryLockAndGetToken(ctx, 0, lease)
		}
		if lease > 0 {
			ok, err = m.TryLockFor(ctx, 0, lease)
		} else {
			ok, err = m.TryLock(ctx)
		}
		if ok && err == nil && t != nil {
			// The holder's token: nobody else can take the lock while we
			// hold it, so the counter is ours.
			tok, err = t.Token(ctx)
		}
		return tok, ok, err
	case bounded:
		if t != nil {
			return t.TryLockAndGetToken(ctx, wait, lease)
		}
		ok, err = m.TryLockFor(ctx, wait, lease)
		return 0, ok, err
	default:
		switch {
		case t != nil && lease > 0:
			tok, err = t.LockAndGetTokenWithLease(ctx, lease)
		case t != nil:
			tok, err = t.LockAndGetToken(ctx)
		case lease > 0:
			err = m.LockWithLease(ctx, lease)
		default:
			err = m.Lock(ctx)
		}
		return tok, err == nil, err
	}
}

// attemptBound is how long past its wait a timed call of this package
// (MultiLock.TryLockFor and TryLock, Seats.TryAcquire) waits for a member
// that does not answer (a stalled or unreachable Redis), and how long a
// timed call's give-back of what it took may take before it goes on in the
// background (the member's handle retries it). TryLock, which has no wait,
// gives each member one attemptBound.
const attemptBound = time.Second

// ErrNoAnswer reports a member (or a venue) that did not answer within a
// call's bound, Redis stalled or unreachable: a timed acquisition
// (MultiLock.TryLockFor and TryLock, Seats.TryAcquire) past its wait plus
// one attempt bound (one second), or a RedLock release past its attempt
// timeout. What the call took is given back; what could not be given back
// yet, the member's handle gives back in the background.
var ErrNoAnswer = errors.New("multi: no answer in time (Redis stalled or unreachable)")

// errBound is the cause of a timed call's own deadline.
var errBound = errors.New("multi: the call's bound passed")

// bound is ctx for one member's step of an acquisition in mode md: until
// callEnd for a timed wait, attemptBound for one attempt, ctx itself for
// Lock. Its cause is errBound when the bound ends it.
func bound(ctx context.Context, md mode, callEnd time.Time) (context.Context, context.CancelFunc) {
	switch md {
	case bounded:
		return context.WithDeadlineCause(ctx, callEnd, errBound)
	case once:
		return context.WithTimeoutCause(ctx, attemptBound, errBound)
	}
	return ctx, func() {}
}

// noAnswer is the error of a member cut by its call's bound; err (the
// member's error, which matches ErrCanceled although the caller's ctx did
// not end) is kept as text only.
func noAnswer(err error) error {
	return fmt.Errorf("%w (%v)", ErrNoAnswer, err)
}

// giveBackCtx is the context of an acquisition's give-back of what it took:
// attemptBound for a timed call whose ctx is live, else cleanupCtx(ctx).
func giveBackCtx(ctx context.Context, md mode) (context.Context, context.CancelFunc) {
	if md != forever && ctx.Err() == nil {
		return context.WithTimeout(context.WithoutCancel(ctx), attemptBound)
	}
	return cleanupCtx(ctx), func() {}
}

// cleanupCtx is a context that has already ended, carrying ctx's values: a
// member's Unlock on it runs on a fresh context bounded by the member's
// client's cleanup timeout (fairlock.WithCleanupTimeout), exactly as the
// library's own cleanup, whatever ctx's state.
func cleanupCtx(ctx context.Context) context.Context {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cancel()
	return c
}

// releaseAll unlocks every member of ms concurrently with ctx and returns,
// in ms's order, each one's error (nil: released, or not held any more:
// fairlock.ErrNotHeld is reported as nil when notHeldOK).
func releaseAll(ctx context.Context, ms []*member, notHeldOK bool) []error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, mb := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := mb.m.Unlock(ctx)
			if notHeldOK && errors.Is(err, fairlock.ErrNotHeld) {
				err = nil
			}
			errs[i] = mb.errf(err)
		}()
	}
	wg.Wait()
	return errs
}

// canceled is the error of a call whose ctx ended: it matches
// fairlock.ErrCanceled and ctx.Err(), and wraps cause (the member error
// that saw it), if any.
func canceled(ctx context.Context, cause error) error {
	if errors.Is(cause, fairlock.ErrCanceled) && errors.Is(cause, ctx.Err()) {
		return cause
	}
	if cause != nil {
		return fmt.Errorf("%w: %w: %w", fairlock.ErrCanceled, ctx.Err(), cause)
	}
	return fmt.Errorf("%w: %w", fairlock.ErrCanceled, ctx.Err())
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// jitter is a random duration in [lo, hi).
func jitter(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo)
}

// anyClosed returns the index of the first channel of chans found closed
// without blocking, or -1.
func anyClosed(chans []<-chan struct{}) int {
	for i, c := range chans {
		select {
		case <-c:
			return i
		default:
		}
	}
	return -1
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// acquiring is a one-slot semaphore that serialises the acquisitions and
// releases of one MultiLock or RedLock (the state they change is one
// hold), ending the wait for it with ctx.
type acquiring chan struct{}

func (a acquiring) enter(ctx context.Context) error {
	select {
	case a <- struct{}{}:
		return nil
	case <-ctx.Done():
		return canceled(ctx, nil)
	}
}

func (a acquiring) leave() { <-a }

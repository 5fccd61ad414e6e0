package multi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
)

// RedLock is one lock over N independent Redis deployments (Redlock, as
// Redisson's deprecated RedissonRedLock): one handle per deployment, each
// made from its own fairlock.Client, all on the same name. It is held when
// a majority of the members (N/2+1) granted it and the time that took left
// some validity: validity = lease − elapsed − drift, drift = lease/100 +
// 2 ms, elapsed counted from before the first request of the round.
//
// Each round sends one attempt to every member at once, each bounded by
// the attempt timeout; a round that does not win a majority in time gives
// back what it took, everywhere, and the next round starts after a random
// pause, until the wait or ctx ends.
//
// RedLock does not make a paused holder safe: a process paused (GC,
// SIGSTOP) past its validity, or a clock that jumps, can let two owners
// believe they hold it. Use fencing tokens (Tokens) checked by the
// resource; see docs/design.md, "Package multi".
//
// Make one with NewRedLock. On a zero or nil RedLock every call that talks
// to Redis (Lock, LockWithLease, TryLock, TryLockFor, Unlock) returns an
// error matching fairlock.ErrInvalidValue at once; Done is closed, Err nil,
// ValidUntil zero, Quorum 0, Tokens and Granted nil.
type RedLock struct {
	members []*member
	quorum  int
	attempt time.Duration // 0: by lease (attemptTimeout)
	pauseLo time.Duration
	pauseHi time.Duration

	busy acquiring

	mu      sync.Mutex
	h       *redHold
	last    *redHold
	pending map[*member]chan struct{} // releases of the last Unlock still running: closed when done

	noValidity bool // test hook: a broken variant that ignores the validity rule
}

// redHold is one hold of a RedLock.
type redHold struct {
	granted   []*member
	tokens    []int64 // the caller's order; 0 for members not granted
	lease     time.Duration
	valid     time.Time // explicit lease: start + lease − drift
	done      chan struct{}
	ended     bool
	err       error
	releasing bool
	stop      chan struct{}
}

// RedLockOption configures a RedLock.
type RedLockOption func(*RedLock)

// WithAttemptTimeout bounds each member's attempt in a round (Redlock's
// "small compared with the lease": a member that does not answer must not
// eat the validity). Default: a tenth of the lease, between 50 ms and 1 s
// (1 s for the watchdog lease).
func WithAttemptTimeout(d time.Duration) RedLockOption { return func(r *RedLock) { r.attempt = d } }

// WithRetryPause sets the random pause between rounds, uniform in
// [lo, hi). Default 50 ms to 250 ms.
func WithRetryPause(lo, hi time.Duration) RedLockOption {
	return func(r *RedLock) { r.pauseLo, r.pauseHi = lo, hi }
}

// NewRedLock returns a RedLock over members: one lock handle per Redis
// deployment, each from its own fairlock.Client, all on one name (any lock
// kind; a fenced or fair member gives tokens). It refuses (ErrInvalidValue)
// no members, a nil or zero member, members on different names and two
// members of one Client. Two Clients on the same deployment cannot be told
// apart: don't (a majority would then not be a majority of deployments).
func NewRedLock(members []Member, opts ...RedLockOption) (*RedLock, error) {
	ms, err := validate(members)
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	for _, mb := range ms {
		if mb.name != ms[0].name {
			return nil, fmt.Errorf("%w: multi: RedLock members on different names (%q, member %d: %q)", fairlock.ErrInvalidValue, ms[0].name, mb.idx, mb.name)
		}
		id := clientID(mb.owner)
		if j, ok := seen[id]; ok {
			return nil, fmt.Errorf("%w: multi: RedLock members %d and %d share a Client (one member per deployment)", fairlock.ErrInvalidValue, j, mb.idx)
		}
		seen[id] = mb.idx
	}
	r := &RedLock{members: ms, quorum: len(ms)/2 + 1, pauseLo: 50 * time.Millisecond, pauseHi: 250 * time.Millisecond, busy: make(acquiring, 1)}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: multi: option %d is nil", fairlock.ErrInvalidValue, i)
		}
		o(r)
	}
	if r.attempt < 0 || r.pauseLo < 0 || r.pauseHi < r.pauseLo {
		return nil, fmt.Errorf("%w: multi: attempt timeout %v, retry pause [%v, %v)", fairlock.ErrInvalidValue, r.attempt, r.pauseLo, r.pauseHi)
	}
	return r, nil
}

// Quorum is how many members must grant: N/2+1 (0 on a zero RedLock).
func (r *RedLock) Quorum() int {
	if r.zero() {
		return 0
	}
	return r.quorum
}

var errZeroRedLock = fmt.Errorf("%w: zero multi.RedLock (use NewRedLock)", fairlock.ErrInvalidValue)

// zero reports a nil RedLock or one not made by NewRedLock.
func (r *RedLock) zero() bool { return r == nil || len(r.members) == 0 || r.busy == nil }

// check refuses a zero RedLock and a nil ctx.
func (r *RedLock) check(ctx context.Context) error {
	if r.zero() {
		return errZeroRedLock
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", fairlock.ErrInvalidValue)
	}
	return nil
}

// Drift is the clock-drift allowance subtracted from a lease: lease/100 +
// 2 ms (Redlock's rule; the same as every handle's ValidUntil).
func Drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// attemptTimeout is the bound of one member's attempt.
func (r *RedLock) attemptTimeout(lease time.Duration) time.Duration {
	if r.attempt > 0 {
		return r.attempt
	}
	if lease <= 0 {
		return time.Second
	}
	return min(max(lease/10, 50*time.Millisecond), time.Second)
}

// Lock acquires the RedLock with the watchdog lease (every member's client
// renews its member), trying rounds until one wins or ctx ends (an error
// matching fairlock.ErrCanceled and ctx.Err()).
func (r *RedLock) Lock(ctx context.Context) error {
	_, err := r.acquire(ctx, -1, 0)
	return err
}

// LockWithLease is Lock with an explicit lease: the RedLock is valid for
// lease − elapsed − drift from its winning round, and no watchdog renews it.
// A lease of 0 is Lock's (the watchdog lease), as in TryLockFor; a negative
// lease, or one under 10 ms, is refused at once (fairlock.ErrInvalidValue).
func (r *RedLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	if lease < 0 {
		return fmt.Errorf("%w: multi: RedLock.LockWithLease: lease %v is negative (0 is the watchdog lease)", fairlock.ErrInvalidValue, lease)
	}
	_, err := r.acquire(ctx, -1, lease)
	return err
}

// TryLock makes one round.
func (r *RedLock) TryLock(ctx context.Context) (bool, error) { return r.acquire(ctx, 0, 0) }

// TryLockFor tries rounds for up to wait (at least one), with lease (0: the
// watchdog's); false with a nil error when no round won in time.
//
// Every acquisition (Lock, LockWithLease, TryLock, TryLockFor) ends at once
// with an error that no later round could clear: a lease under 10 ms
// (fairlock.ErrInvalidValue), or a round in which a member reported its
// Client closed (fairlock.ErrClosed) or refused its arguments
// (fairlock.ErrInvalidValue, fairlock.ErrInvalidName), joined as
// *MemberError. A member that does not answer, or refuses because the lock
// is held, only makes the round lose.
func (r *RedLock) TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if err := r.check(ctx); err != nil {
		return false, err
	}
	if wait < 0 || lease < 0 {
		return false, fmt.Errorf("%w: wait %v, lease %v", fairlock.ErrInvalidValue, wait, lease)
	}
	return r.acquire(ctx, wait, lease)
}

// acquire runs rounds until one wins, wait runs out (wait -1: never) or ctx
// ends.
func (r *RedLock) acquire(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if err := r.check(ctx); err != nil {
		return false, err
	}
	if lease > 0 && lease < core.MinLease {
		return false, fmt.Errorf("%w: lease %v is under %v", fairlock.ErrInvalidValue, lease, core.MinLease)
	}
	if err := r.busy.enter(ctx); err != nil {
		return false, err
	}
	defer r.busy.leave()
	r.mu.Lock()
	held := r.h != nil
	r.mu.Unlock()
	if held {
		return false, fmt.Errorf("%w: multi: this RedLock is held (a RedLock is not reentrant)", fairlock.ErrInvalidValue)
	}
	deadline := time.Now().Add(wait)
	var lastErr error
	for first := true; ; first = false {
		timeout := r.attemptTimeout(lease)
		if wait >= 0 && !first {
			timeout = min(timeout, time.Until(deadline))
		}
		h, err := r.round(ctx, timeout, lease)
		if h != nil {
			r.mu.Lock()
			r.h = h
			r.mu.Unlock()
			go r.watch(h)
			return true, nil
		}
		if err != nil {
			lastErr = err
		}
		if ctx.Err() != nil {
			return false, canceled(ctx, lastErr)
		}
		if permanent(err) {
			// A closed Client or a refused argument never clears: no
			// later round can do better.
			return false, err
		}
		if wait == 0 {
			return false, nil
		}
		pause := jitter(r.pauseLo, r.pauseHi)
		if wait > 0 {
			left := time.Until(deadline)
			if left <= 0 {
				return false, nil
			}
			pause = min(pause, left)
		}
		if !sleep(ctx, pause) {
			return false, canceled(ctx, lastErr)
		}
		if wait > 0 && !time.Now().Before(deadline) {
			return false, nil
		}
	}
}

// permanent reports an error of a round that no later round can clear: a
// member's Client closed, or a member refusing its arguments.
func permanent(err error) bool {
	return errors.Is(err, fairlock.ErrClosed) || errors.Is(err, fairlock.ErrInvalidValue) || errors.Is(err, fairlock.ErrInvalidName)
}

// round sends one attempt to every member at once and waits for every
// reply (each bounded by timeout). It returns the hold when a majority
// granted with validity left, and otherwise gives back what was granted
// and returns the members' errors joined (nil when they only refused).
func (r *RedLock) round(ctx context.Context, timeout, lease time.Duration) (*redHold, error) {
	type result struct {
		tok int64
		ok  bool
		err error
	}
	res := make([]result, len(r.members))
	start := time.Now()
	var wg sync.WaitGroup
	r.mu.Lock()
	pending := make([]chan struct{}, len(r.members))
	for i, mb := range r.members {
		pending[i] = r.pending[mb]
	}
	r.mu.Unlock()
	for i, mb := range r.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if p := pending[i]; p != nil {
				// The last Unlock's release of this member is still
				// running: the member is asked once it is done, within
				// this attempt's bound.
				select {
				case <-p:
					r.mu.Lock()
					if r.pending[mb] == p {
						delete(r.pending, mb)
					}
					r.mu.Unlock()
				case <-actx.Done():
					res[i] = result{err: fmt.Errorf("%w: multi: the last Unlock's release of this member is still running", ErrNoAnswer)}
					return
				}
			}
			tok, ok, err := mb.take(actx, once, 0, lease)
			res[i] = result{tok, ok, err}
		}()
	}
	wg.Wait()
	h := &redHold{tokens: make([]int64, len(r.members)), lease: lease}
	var errs []error
	var extra []*member // granted, but its token could not be read: given back
	for i, mb := range r.members {
		switch {
		case res[i].ok && res[i].err == nil:
			h.granted = append(h.granted, mb)
			h.tokens[i] = res[i].tok
		case res[i].ok:
			extra = append(extra, mb)
		}
		if res[i].err != nil {
			errs = append(errs, mb.errf(res[i].err))
		}
	}
	if lease > 0 {
		h.valid = start.Add(lease - Drift(lease))
	}
	if len(h.granted) >= r.quorum && (r.noValidity || time.Now().Before(r.validUntil(h))) {
		if len(extra) > 0 {
			_ = r.release(ctx, lease, extra)
		}
		h.done, h.stop = make(chan struct{}), make(chan struct{})
		return h, nil
	}
	// Not won (too few grants, or the validity used up): give back
	// everything granted. A member that did not answer in time needs
	// nothing: its handle voids the request it gave up (a late copy of it
	// does nothing) and gives back a hold it may have left.
	_ = r.release(ctx, lease, append(h.granted, extra...))
	return nil, errors.Join(errs...)
}

// validUntil is the hold's validity: the instant after which fewer than a
// quorum of its members are known to be held (the quorum-th latest member
// ValidUntil), and with an explicit lease no later than the round's start
// + lease − drift.
func (r *RedLock) validUntil(h *redHold) time.Time {
	vs := make([]time.Time, 0, len(h.granted))
	for _, mb := range h.granted {
		vs = append(vs, mb.m.ValidUntil()) // zero when lost: sorts first
	}
	if len(vs) < r.quorum {
		return time.Time{}
	}
	slices.SortFunc(vs, func(a, b time.Time) int { return a.Compare(b) })
	v := vs[len(vs)-r.quorum]
	if !h.valid.IsZero() && h.valid.Before(v) {
		v = h.valid
	}
	return v
}

// watch ends hold h (Done closed, Err matching ErrLost) when its validity
// passes or fewer than a quorum of its members are still held.
func (r *RedLock) watch(h *redHold) {
	ended := make(chan *member, len(h.granted))
	for _, mb := range h.granted {
		d := mb.m.Done()
		go func() {
			select {
			case <-d:
				ended <- mb
			case <-h.stop:
			}
		}()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var lost []error
	left := len(h.granted)
	for {
		v := r.validUntil(h)
		if d := time.Until(v); d > 0 && left >= r.quorum {
			timer.Reset(d)
		} else {
			why := fmt.Errorf("%w: multi: RedLock %q: %d of %d members held, quorum %d, validity ended", fairlock.ErrLost, r.members[0].name, left, len(r.members), r.quorum)
			r.lose(h, errors.Join(append([]error{why}, lost...)...))
			return
		}
		select {
		case mb := <-ended:
			left--
			err := mb.m.Err()
			if err == nil {
				err = fmt.Errorf("%w: released outside the RedLock", fairlock.ErrLost)
			}
			lost = append(lost, mb.errf(err))
		case <-timer.C:
		case <-h.stop:
			return
		}
	}
}

// lose ends h as lost with err, unless it ended already or is being released.
func (r *RedLock) lose(h *redHold, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.ended || h.releasing {
		return
	}
	h.ended, h.err = true, err
	close(h.done)
}

// Unlock releases every member granted (at once), ignoring members that are
// no longer held (a member lost does not make the release fail; Err says if
// the RedLock was lost). It returns the other errors joined; the RedLock's
// hold ends anyway. Each member's release is bounded by the attempt timeout
// (WithAttemptTimeout), as a round's attempts are, whatever ctx: Unlock
// returns within it even when a deployment is stalled, and a release not
// confirmed by then (its error says so) is retried by the member's own
// handle in the background. ErrNotHeld when nothing is held.
func (r *RedLock) Unlock(ctx context.Context) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	h := r.h
	if h != nil {
		h.releasing = true
	}
	r.mu.Unlock()
	if h == nil {
		return fmt.Errorf("%w: multi: this RedLock holds nothing", fairlock.ErrNotHeld)
	}
	err := r.unlockMembers(ctx, h)
	r.mu.Lock()
	if !h.ended {
		h.ended = true
		close(h.done)
	}
	close(h.stop)
	r.h, r.last = nil, h
	r.mu.Unlock()
	return err
}

// unlockMembers releases h's members at once and waits for them at most
// the attempt timeout: a member's Unlock cut by it still finishes its own
// work (bounded by its client's cleanup timeout) in the background, and
// the next acquisition waits for that (pending).
func (r *RedLock) unlockMembers(ctx context.Context, h *redHold) error {
	timeout := r.attemptTimeout(h.lease)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	errs := make([]error, len(h.granted))
	dones := make([]chan struct{}, len(h.granted))
	all := make(chan struct{})
	var wg sync.WaitGroup
	for i, mb := range h.granted {
		dones[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(dones[i])
			err := mb.m.Unlock(rctx)
			if errors.Is(err, fairlock.ErrNotHeld) {
				err = nil
			}
			errs[i] = mb.errf(err)
		}()
	}
	go func() {
		wg.Wait()
		cancel()
		close(all)
	}()
	t := time.NewTimer(timeout + 50*time.Millisecond)
	defer t.Stop()
	select {
	case <-all:
		return errors.Join(errs...)
	case <-t.C:
	}
	out := make([]error, len(h.granted))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, mb := range h.granted {
		select {
		case <-dones[i]:
			out[i] = errs[i]
		default:
			if r.pending == nil {
				r.pending = map[*member]chan struct{}{}
			}
			r.pending[mb] = dones[i]
			out[i] = mb.errf(fmt.Errorf("%w: multi: the release is not confirmed within the attempt timeout %v; the member's handle goes on with it in the background", ErrNoAnswer, timeout))
		}
	}
	return errors.Join(out...)
}

// release unlocks ms at once, each bounded by the attempt timeout of lease
// whatever ctx's state (not held counts as released). A release not
// confirmed in time is retried by the member's own handle in the
// background (its Unlock says so), never sent again from here: a second
// release could free a later hold of the same handle.
func (r *RedLock) release(ctx context.Context, lease time.Duration, ms []*member) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.attemptTimeout(lease))
	defer cancel()
	return errors.Join(releaseAll(rctx, ms, true)...)
}

// Done returns a channel closed when the current hold ends: Unlock, or the
// loss of the RedLock (its validity passed, or fewer than a quorum of its
// members are still held); Err then says why. Closed when nothing is held.
func (r *RedLock) Done() <-chan struct{} {
	if r.zero() {
		return closedChan
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h != nil {
		return r.h.done
	}
	return closedChan
}

// Err is nil while held and after a release; after a loss, an error
// matching fairlock.ErrLost that says why, joined with the lost members'
// errors (*MemberError).
func (r *RedLock) Err() error {
	if r.zero() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.h != nil:
		return r.h.err
	case r.last != nil:
		return r.last.err
	}
	return nil
}

// ValidUntil is the local instant until which a quorum of members is known
// to be held: with an explicit lease at most the winning round's start +
// lease − drift; with the watchdog lease it moves with the members'
// renewals. Zero when nothing is held or the hold has ended.
func (r *RedLock) ValidUntil() time.Time {
	if r.zero() {
		return time.Time{}
	}
	r.mu.Lock()
	h := r.h
	r.mu.Unlock()
	if h == nil {
		return time.Time{}
	}
	select {
	case <-h.done:
		return time.Time{}
	default:
	}
	return r.validUntil(h)
}

// Tokens returns the fencing tokens of the current hold, one per member in
// the order given to NewRedLock: the member's token when it granted and has
// tokens (fenced, fair), else 0. Tokens of different deployments are
// separate sequences: a resource keeps one fence per deployment (see
// docs/design.md). Nil when nothing is held.
func (r *RedLock) Tokens() []int64 {
	if r.zero() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == nil {
		return nil
	}
	return slices.Clone(r.h.tokens)
}

// Granted reports, per member in the order given to NewRedLock, whether it
// granted the current hold. Nil when nothing is held.
func (r *RedLock) Granted() []bool {
	if r.zero() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == nil {
		return nil
	}
	out := make([]bool, len(r.members))
	for _, mb := range r.h.granted {
		out[mb.idx] = true
	}
	return out
}

package multi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/rwlock"
)

// MultiLock holds several locks at once, all or nothing (Redisson's
// RedissonMultiLock): Lock, TryLock and TryLockFor return holding every
// member or none of them, and Unlock releases every member.
//
// Members are always taken in one canonical order, whatever order they
// were given in: by the cluster slot of their name, then by name, and the
// write half of an rwlock before the read half of the same one. Every
// MultiLock on overlapping names therefore waits for its members in the
// same order, so two MultiLocks can never each hold a lock the other waits
// for: no deadlock, however the callers list the names (Redisson's takes
// them in the caller's order, and two callers listing the same locks in
// opposite orders deadlock until their waits end). The guarantee covers
// locks taken through MultiLocks; a caller that already holds a lock when it
// calls Lock (outside this MultiLock) can still deadlock with another.
//
// A MultiLock is one owner per member handle, as the handles are: it
// re-enters (Lock on a held MultiLock re-enters every member; as many
// Unlocks release it). Goroutines that must exclude each other need their
// own MultiLocks over their own handles.
//
// Make one with New. On a zero or nil MultiLock every call that talks to
// Redis (Lock, LockWithLease, TryLock, TryLockFor, Unlock, IsHeld) returns
// an error matching fairlock.ErrInvalidValue at once; Done is closed, Err
// nil, ValidUntil zero, Tokens and Members empty.
type MultiLock struct {
	byIdx   []*member // the caller's order
	members []*member // canonical order

	mu   sync.Mutex
	h    *multiHold // current hold (nil: none)
	last *multiHold // the hold that ended last (Err after it)

	// Test hooks: deliberately broken variants that the tests show caught.
	callerOrder bool // take members in the caller's order (no canonical order)
	noRollback  bool // leave the members taken when an acquisition fails
	ignoreLoss  bool // Done closes only on Unlock
}

// multiHold is one hold of a MultiLock: from the acquisition that found it
// free to the Unlock that released it.
type multiHold struct {
	count     int // acquisitions not yet unlocked (re-entries)
	done      chan struct{}
	ended     bool  // done closed
	err       error // why it ended (nil: released)
	releasing bool  // the last Unlock is running: member ends are releases
	stop      chan struct{}
	tokens    []int64 // caller's order; the latest acquisition's
}

// New returns a MultiLock over members, any lock handles of this module
// (see Member), in any order. It refuses (ErrInvalidValue) no members, a
// nil or zero member, and two members with one name, except the two halves
// of one rwlock (same owner), which are taken write half first: the writer
// may take read holds, but a read hold blocks its own owner's writer, so the
// other order would wait for itself. Members may belong to different
// Clients (Redis deployments): the order depends only on names.
// New does not talk to Redis.
func New(members ...Member) (*MultiLock, error) {
	ms, err := validate(members)
	if err != nil {
		return nil, err
	}
	sorted := slices.Clone(ms)
	slices.SortStableFunc(sorted, compareMembers)
	for i := 1; i < len(sorted); i++ {
		a, b := sorted[i-1], sorted[i]
		if a.name != b.name {
			continue
		}
		if a.rank == 0 && b.rank == 1 && isRWHalf(b) && halfBase(a.owner) == b.owner {
			continue // the two halves of one rwlock, write first
		}
		return nil, fmt.Errorf("%w: multi: members %d and %d are both on lock %q (a MultiLock holds each lock once; only the two halves of one rwlock may share a name)",
			fairlock.ErrInvalidValue, a.idx, b.idx, a.name)
	}
	return &MultiLock{byIdx: ms, members: sorted}, nil
}

// compareMembers is the canonical order: slot, name, write half first.
func compareMembers(a, b *member) int {
	return cmp.Or(cmp.Compare(a.slot, b.slot), cmp.Compare(a.name, b.name), cmp.Compare(a.rank, b.rank))
}

func isRWHalf(mb *member) bool {
	_, ok := mb.m.(*rwlock.Lock)
	return ok
}

// halfBase is the read half's owner id of a write half's owner id.
func halfBase(writeOwner string) string { return writeOwner[:len(writeOwner)-len(":write")] }

// Members returns the members in the order they are taken.
func (l *MultiLock) Members() []Member {
	if l.zero() {
		return nil
	}
	out := make([]Member, len(l.members))
	for i, mb := range l.order() {
		out[i] = mb.m
	}
	return out
}

var errZeroMulti = fmt.Errorf("%w: zero multi.MultiLock (use New)", fairlock.ErrInvalidValue)

// zero reports a nil MultiLock or one not made by New.
func (l *MultiLock) zero() bool { return l == nil || len(l.members) == 0 }

// check refuses a zero MultiLock and a nil ctx.
func (l *MultiLock) check(ctx context.Context) error {
	if l.zero() {
		return errZeroMulti
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", fairlock.ErrInvalidValue)
	}
	return nil
}

func (l *MultiLock) order() []*member {
	if l.callerOrder {
		return l.byIdx
	}
	return l.members
}

// Lock acquires every member, waiting as long as ctx allows, with the
// watchdog lease. Members are taken one by one in the canonical order, each
// waiting until it is acquired (a fair member queues with its default
// slot). If a member already taken is lost meanwhile, what was taken is
// given back and the acquisition starts again from the first member. If ctx
// ends first, Lock gives back what it took and returns an error matching
// fairlock.ErrCanceled and ctx.Err(). Another error of a member ends the
// call the same way, returning a *MemberError.
func (l *MultiLock) Lock(ctx context.Context) error {
	_, err := l.acquire(ctx, forever, 0, 0)
	return err
}

// LockWithLease is Lock with an explicit lease for every member (no
// watchdog). Each member's lease starts at its own acquisition, so the
// MultiLock's validity (ValidUntil) is the first member's; a member taken
// earlier whose lease runs out before the last is taken makes the
// acquisition start again. A lease of 0 is Lock's (the watchdog keeps
// every member), as in TryLockFor; a negative lease is refused with
// fairlock.ErrInvalidValue, and so is one under 10 ms, by the members.
func (l *MultiLock) LockWithLease(ctx context.Context, lease time.Duration) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if lease < 0 {
		return fmt.Errorf("%w: multi: LockWithLease: lease %v is negative (0 lets the watchdog keep every member)", fairlock.ErrInvalidValue, lease)
	}
	_, err := l.acquire(ctx, forever, 0, lease)
	return err
}

// TryLock makes one attempt on each member in the canonical order (each
// member's TryLock: a fair member never queues) and stops at the first that
// is not free, giving back what it took: false with a nil error. Each
// member's attempt is bounded by one attempt bound (one second): a member
// that does not answer by then (Redis stalled or unreachable) ends the call
// with an error matching ErrNoAnswer, and the give-back of what was taken
// is bounded the same way (a release not confirmed then goes on in the
// member's handle, in the background).
func (l *MultiLock) TryLock(ctx context.Context) (bool, error) {
	return l.acquire(ctx, once, 0, 0)
}

// TryLockFor waits up to wait for every member (Redisson's tryLock(wait,
// lease)). Members are taken in the canonical order, each waiting for what
// is left of wait (a fair member uses that as its wait slot); a member not
// acquired in time gives back those taken and the call reports false with a
// nil error; a member taken earlier that is lost meanwhile (its lease ran
// out) makes the acquisition start again from the first member while wait
// lasts. A wait of 0 makes one attempt on each member (with lease 0, each
// member's TryLock; otherwise TryLockFor(0, lease)). A lease of 0 lets the
// watchdog keep every member; a positive one is each member's lease.
//
// The call returns within wait plus one attempt bound (one second), plus
// one more for the give-back of what it took: a member that has not
// answered by then (Redis stalled or unreachable, or its handle still
// giving back an earlier acquisition) ends the call with an error matching
// ErrNoAnswer, not a false that would hide the outage. A give-back not
// confirmed in its bound goes on in the member's handle, in the background
// (a member whose server stalls between granting and the give-back adds
// its client's cleanup timeout: its Unlock, cut mid-call, finishes on a
// fresh context).
func (l *MultiLock) TryLockFor(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if wait < 0 || lease < 0 {
		return false, fmt.Errorf("%w: wait %v, lease %v", fairlock.ErrInvalidValue, wait, lease)
	}
	if wait == 0 {
		return l.acquire(ctx, once, 0, lease)
	}
	return l.acquire(ctx, bounded, wait, lease)
}

// errHeldLost cancels a member's wait when a member taken before it ended.
var errHeldLost = errors.New("multi: a member already taken was lost")

// acquire is every acquisition: members in order, as md says.
func (l *MultiLock) acquire(ctx context.Context, md mode, wait, lease time.Duration) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	l.mu.Lock()
	if h := l.h; h != nil && h.ended && h.err != nil {
		l.mu.Unlock()
		return false, fmt.Errorf("%w: multi: the current hold was lost (%v); Unlock it before acquiring again", fairlock.ErrLost, h.err)
	}
	l.mu.Unlock()
	var deadline, callEnd time.Time
	if md == bounded {
		deadline = time.Now().Add(wait)
		callEnd = deadline.Add(attemptBound)
	}
	order := l.order()
	for {
		tokens := make([]int64, len(l.byIdx))
		var held []*member
		var dones []<-chan struct{}
		var failErr error
		restart := false
		for _, mb := range order {
			w := time.Duration(0)
			if md == bounded {
				if w = time.Until(deadline); w <= 0 {
					break // the wait ran out: not acquired
				}
			}
			bctx, cancel := bound(ctx, md, callEnd)
			tok, ok, lost, err := l.step(bctx, mb, md, w, lease, dones)
			cut := ctx.Err() == nil && errors.Is(context.Cause(bctx), errBound)
			cancel()
			if ok {
				held = append(held, mb)
				dones = append(dones, mb.m.Done())
				tokens[mb.idx] = tok
			}
			if err != nil {
				if ctx.Err() != nil {
					failErr = canceled(ctx, mb.errf(err))
				} else if lost {
					restart = true
				} else if cut {
					failErr = mb.errf(noAnswer(err))
				} else {
					failErr = mb.errf(err)
				}
				break
			}
			if !ok {
				break
			}
			if anyClosed(dones) >= 0 {
				restart = true
				break
			}
		}
		if failErr == nil && !restart && len(held) == len(order) {
			if anyClosed(dones) < 0 && time.Now().Before(minValid(held)) {
				l.started(held, dones, tokens)
				return true, nil
			}
			restart = true
		}
		// Not acquired: give back what was taken, on a fresh bounded
		// context whatever ctx's state (a timed call's give-back by
		// attemptBound). A release not confirmed is retried by the
		// member's own handle (as its Unlock says), which its next
		// acquisition waits for.
		if !l.noRollback && len(held) > 0 {
			gctx, cancel := giveBackCtx(ctx, md)
			releaseAll(gctx, held, true)
			cancel()
		}
		if failErr != nil {
			return false, failErr
		}
		if ctx.Err() != nil {
			return false, canceled(ctx, nil)
		}
		if !restart || md == once || (md == bounded && !time.Now().Before(deadline)) {
			return false, nil
		}
		// A member taken earlier was lost while a later one was awaited:
		// start again from the first (Redisson restarts after a failure
		// while the wait lasts), after a short random pause.
		if !sleep(ctx, jitter(5*time.Millisecond, 25*time.Millisecond)) {
			return false, canceled(ctx, nil)
		}
	}
}

// step takes one member as md says; while it waits, the members already
// taken (dones) are watched, and the wait is ended if one of them ends
// (lost reports that).
func (l *MultiLock) step(ctx context.Context, mb *member, md mode, wait, lease time.Duration, dones []<-chan struct{}) (tok int64, ok, lost bool, err error) {
	if md == once || len(dones) == 0 {
		tok, ok, err = mb.take(ctx, md, wait, lease)
		return tok, ok, false, err
	}
	sctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cases := make([]reflect.SelectCase, 0, len(dones)+1)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(stop)})
		for _, d := range dones {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(d)})
		}
		if i, _, _ := reflect.Select(cases); i > 0 {
			cancel(errHeldLost)
		}
	}()
	tok, ok, err = mb.take(sctx, md, wait, lease)
	close(stop)
	wg.Wait()
	lost = errors.Is(context.Cause(sctx), errHeldLost)
	cancel(nil)
	return tok, ok, lost, err
}

// minValid is the earliest ValidUntil of ms (zero if one has none).
func minValid(ms []*member) time.Time {
	var v time.Time
	for i, mb := range ms {
		u := mb.m.ValidUntil()
		if u.IsZero() {
			return time.Time{}
		}
		if i == 0 || u.Before(v) {
			v = u
		}
	}
	return v
}

// started records a successful acquisition: a new hold, or a re-entry of
// the current one.
func (l *MultiLock) started(held []*member, dones []<-chan struct{}, tokens []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.h; h != nil {
		h.count++
		h.tokens = tokens
		return
	}
	h := &multiHold{count: 1, done: make(chan struct{}), stop: make(chan struct{}), tokens: tokens}
	l.h = h
	if l.ignoreLoss {
		return
	}
	for i, mb := range held {
		go func(mb *member, d <-chan struct{}) {
			select {
			case <-d:
				l.memberEnded(h, mb)
			case <-h.stop:
			}
		}(mb, dones[i])
	}
}

// memberEnded ends hold h because mb's hold ended other than by this
// MultiLock's Unlock: lost (its Err), or released through the member's own
// handle, which ends the MultiLock's hold as a loss too.
func (l *MultiLock) memberEnded(h *multiHold, mb *member) {
	err := mb.m.Err()
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.ended || h.releasing {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: %q was released outside the MultiLock", fairlock.ErrLost, mb.name)
	}
	h.err = mb.errf(err)
	h.ended = true
	close(h.done)
}

// Unlock releases one hold of every member (Redisson's unlock: every member,
// not stopping at the first error). It returns the members' errors joined
// (each a *MemberError; fairlock.ErrNotHeld for a member this owner no
// longer holds), and nil when every member was released. Each member's
// Unlock releases one count of that member, once: a release Redis did not
// confirm (unreachable) is retried by the member's own handle in the
// background, as its Unlock says, and never sent again by the MultiLock (a
// second release of one count would free a member a re-entered MultiLock
// still holds). The MultiLock's hold ends with the last Unlock whatever the
// errors. As each member's Unlock, it runs to completion on a fresh context
// bounded by the member's cleanup timeout when ctx ends.
func (l *MultiLock) Unlock(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	h := l.h
	if h == nil {
		l.mu.Unlock()
		return fmt.Errorf("%w: multi: this MultiLock holds nothing", fairlock.ErrNotHeld)
	}
	last := h.count == 1
	if last {
		h.releasing = true
	}
	l.mu.Unlock()
	err := errors.Join(releaseAll(ctx, l.order(), false)...)
	l.mu.Lock()
	defer l.mu.Unlock()
	h.count--
	if h.count == 0 {
		if !h.ended {
			h.ended = true
			close(h.done)
		}
		close(h.stop)
		l.h, l.last = nil, h
	}
	return err
}

// IsHeld reports whether this MultiLock's owners hold every member.
func (l *MultiLock) IsHeld(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	for _, mb := range l.order() {
		ok, err := mb.m.IsHeld(ctx)
		if err != nil || !ok {
			return false, mb.errf(err)
		}
	}
	return true, nil
}

// Done returns a channel that is closed when the current hold ends: the last
// Unlock, or the end of any member's hold other than by this MultiLock (a
// member lost: its lease ran out, it was force-unlocked, Redis lost it; or
// released through its own handle). Err then says which member. When
// nothing is held the channel is already closed. After a loss the other
// members are still held: call Unlock to release them.
func (l *MultiLock) Done() <-chan struct{} {
	if l.zero() {
		return closedChan
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h != nil {
		return l.h.done
	}
	return closedChan
}

// Err is nil while the MultiLock is held and after a release; after the
// loss of a member it is a *MemberError naming it and matching
// fairlock.ErrLost (or fairlock.ErrClosed when its client was closed).
func (l *MultiLock) Err() error {
	if l.zero() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.h != nil:
		return l.h.err
	case l.last != nil:
		return l.last.err
	}
	return nil
}

// ValidUntil is the earliest ValidUntil of the members: the local instant
// until which every member is known to be held (see fairlock.Handle's
// ValidUntil). Zero when nothing is held or the hold has ended.
func (l *MultiLock) ValidUntil() time.Time {
	if l.zero() {
		return time.Time{}
	}
	l.mu.Lock()
	h := l.h
	l.mu.Unlock()
	if h == nil {
		return time.Time{}
	}
	select {
	case <-h.done:
		return time.Time{}
	default:
	}
	return minValid(l.members)
}

// Tokens returns the fencing tokens of the latest acquisition, one per
// member in the order given to New: the member's token for a fenced or fair
// lock, 0 for a member without tokens. Nil when nothing is held.
func (l *MultiLock) Tokens() []int64 {
	if l.zero() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return nil
	}
	return slices.Clone(l.h.tokens)
}

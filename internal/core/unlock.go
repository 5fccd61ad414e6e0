package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// unlockRetries is how many times an unlock is sent when Redis does not
// answer; the latch makes a repeat return the first outcome.
const unlockRetries = 3

// Unlock releases one hold. When ctx has ended, before or during the call,
// it still runs to completion on a fresh context bounded by CleanupTime. It
// returns ErrNotHeld when the owner does not hold the lock, and changes
// nothing then.
func (m *Mutex) Unlock(ctx context.Context) error {
	if t := m.S.Config.Tracer; t != nil && ctx != nil {
		sctx, end := t.Start(ctx, m.span("release"))
		err := m.unlock(sctx)
		end(err == nil, err)
		return m.closed("unlock", err)
	}
	return m.closed("unlock", m.unlock(ctx))
}

func (m *Mutex) unlock(ctx context.Context) error {
	if ctx == nil {
		return errNilCtx
	}
	if err := m.lostAlready(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), m.S.Config.CleanupTime)
		defer cancel()
	}
	// A give-back still running (of an acquisition that returned without
	// the lock, or of a lost hold's field) is this handle's, not the
	// caller's hold: it is waited for, so that Unlock does not release what
	// the caller was told it does not hold (it then returns ErrNotHeld).
	// When ctx ends first, the unlock is sent anyway.
	_ = m.settle(ctx)
	m.mu.Lock()
	h := m.cur
	leaseMs := m.S.Config.Lease.Milliseconds()
	if h != nil {
		leaseMs = h.leaseMs
	}
	obs := h != nil && m.S.obs != nil
	if obs {
		h.unlocking++
	}
	m.mu.Unlock()
	a := m.unlockArgs(leaseMs)
	res, err := m.sendUnlock(ctx, a)
	switch {
	case err == nil:
		err = m.unlocked(h, res)
	case isScriptError(err):
		err = Errorf(err, "unlock %q", m.userName())
	default:
		m.unconfirmed(h, a, err)
		err = Errorf(err, "unlock %q not confirmed (it is retried in the background)", m.userName())
	}
	if obs {
		m.unlockDone(h)
	}
	return err
}

// lostAlready is Unlock's answer when the handle holds nothing and its last
// hold ended lost (Done closed, Err matching ErrLost, not withdrawn): the
// caller was told the hold is gone, and what may be left of it in Redis is
// released by the give-back that the loss started (every count, in the
// background, bounded by the lease and the latch). So Unlock returns at once
// with an error matching both ErrNotHeld (the owner holds nothing: the
// contract of an Unlock without a hold) and ErrLost (why: the hold's Err)
// (issue 30: it used to wait for that give-back, 11-33 s with Redis down),
// sending nothing: an unlock sent now
// could only release what the give-back is to release, or another handle's
// hold of the same owner. nil when Unlock goes on as usual.
func (m *Mutex) lostAlready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil || m.last == nil || !errors.Is(m.last.err, ErrLost) {
		return nil
	}
	return fmt.Errorf("%w: %q by %s: the hold was already reported lost (what is left of it is released in the background): %w",
		ErrNotHeld, m.Keys.Name, m.Owner, m.last.err)
}

// unconfirmed runs after the unlock a of hold h (nil: none) got no reply:
// Redis may or may not have run it (a primary that died took it with it).
// The caller asked to give the hold up, so the handle stops believing in it
// and the release is made in the background, first with a itself (its
// request id makes it count once if the first did arrive), until Redis
// confirms it or the lease and the latch have run out. The hold is not
// renewed meanwhile: a watchdog renewing a hold its owner has unlocked would
// keep it (and a semaphore's permits) from everyone else for as long as the
// client lives. Redisson's unlock likewise stops the renewal whatever the
// unlock's outcome.
//
// Unlocking the last count ends the hold as lost (Done closed, Err matching
// ErrLost); the background release's confirmation withdraws the loss (Err
// nil), as for a release that raced a renewal. Unlocking one count of
// several keeps the hold, one count fewer. The handle's next acquisition or
// Unlock waits for the background release first (settle).
func (m *Mutex) unconfirmed(h *hold, a wire.Args, cause error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h == nil || m.cur != h {
		return
	}
	if m.holds > 1 {
		// h is passed on: the background releases of one hold's counts run
		// side by side, and whichever of them frees the lock in Redis is
		// the confirmed release of h.
		m.holds--
		m.giveBackFrom(a, time.Now(), h, 1)
		return
	}
	m.endLocked(h, fmt.Errorf("%w: %q: the unlock was not confirmed (%w); the release is retried in the background", ErrLost, m.userName(), cause))
	m.giveBackFrom(a, time.Now(), h, allCounts)
}

// unlockDone reports a loss of h held back while this unlock was in flight
// and not withdrawn by its confirmed release.
func (m *Mutex) unlockDone(h *hold) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h.unlocking--
	if h.unlocking == 0 && h.lostPending {
		h.lostPending = false
		m.S.obs.emit(m.event(Lost, h.heldFor, h.err))
	}
}

// unlocked applies the reply of this handle's unlock to its hold h (nil:
// none): one hold fewer, the hold released, or not held (the hold, if any,
// ends as lost).
func (m *Mutex) unlocked(h *hold, res wire.UnlockResult) error {
	switch res {
	case wire.StillHeld:
		m.mu.Lock()
		if m.holds > 1 {
			m.holds--
		}
		m.mu.Unlock()
		return nil
	case wire.Released:
		m.released(h)
		return nil
	}
	if h != nil {
		m.end(h, fmt.Errorf("%w: %q: not held at unlock", ErrLost, m.userName()))
	}
	if m.S.Closed() {
		return ErrClosed
	}
	return fmt.Errorf("%w: %q by %s", ErrNotHeld, m.userName(), m.Owner)
}

// released ends hold h after Redis confirmed its release. The lock was held
// until then, so a loss reported meanwhile (a renewal racing the unlock and
// finding the key already gone, or the validity timer firing during the
// call) is withdrawn: Err is nil after a clean unlock.
func (m *Mutex) released(h *hold) {
	if h == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == h {
		m.endLocked(h, nil)
		return
	}
	m.withdrawLossLocked(h)
}

// withdrawLossLocked withdraws the loss of h, ended before Redis confirmed
// its release (Err nil). Called with m.mu held.
func (m *Mutex) withdrawLossLocked(h *hold) {
	if m.last == h && errors.Is(h.err, ErrLost) {
		h.err = nil
		if h.lostPending {
			h.lostPending = false
			m.S.obs.emit(m.event(Released, h.heldFor, nil))
		}
	}
}

// closeHold ends the current hold because the session is closing (Done
// closed, Err matching ErrClosed) and releases every hold of it in Redis,
// best effort, within ctx.
func (m *Mutex) closeHold(ctx context.Context) {
	m.mu.Lock()
	h, n := m.cur, m.holds
	leaseMs := m.S.Config.Lease.Milliseconds()
	if h != nil {
		leaseMs = h.leaseMs
	}
	m.endLocked(h, fmt.Errorf("%w: %q: the client was closed while the lock was held", ErrClosed, m.userName()))
	m.mu.Unlock()
	if h == nil {
		return
	}
	for range max(n, 1) {
		a := m.unlockArgs(leaseMs)
		a.NowMs = m.S.WallMs()
		res, err := call(ctx, func(ctx context.Context) (wire.UnlockResult, error) { return m.E.Unlock(ctx, a) })
		if err != nil || res != wire.StillHeld {
			return
		}
	}
}

// notSent reports an error that proves a command never reached Redis (no
// connection could be made), so it cannot have changed anything.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return strings.Contains(err.Error(), "failed to dial")
}

// isTryAgain reports Redis's TRYAGAIN: a multi-key command during a slot
// migration, refused before anything ran.
func isTryAgain(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "TRYAGAIN")
}

func isScriptError(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	return errors.As(err, &re)
}

// sendUnlock runs the unlock script with a, retried: through a slot
// migration (TRYAGAIN: nothing ran), and when ctx ends during the call, once
// more on a fresh context bounded by the cleanup timeout (the same request
// id makes a repeat return the first outcome). A script error is final.
func (m *Mutex) sendUnlock(ctx context.Context, a wire.Args) (wire.UnlockResult, error) {
	var res wire.UnlockResult
	var err error
	fresh := false
	for try := 0; try < unlockRetries; try++ {
		a.NowMs = m.S.WallMs()
		args := a // the call may outlive this try: it gets its own copy
		res, err = callC(ctx, m.S.how(ctx), nil, func(ctx context.Context) (wire.UnlockResult, error) { return m.E.Unlock(ctx, args) })
		if isTryAgain(err) && ctx.Err() == nil {
			// A slot migration: nothing ran. Wait for it, within ctx.
			try--
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		if err == nil || isScriptError(err) {
			break
		}
		if ctx.Err() != nil {
			if fresh {
				break
			}
			// ctx ended during the call: finish on a fresh context. The
			// same request id makes a repeat return the first outcome.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), m.S.Config.CleanupTime)
			defer cancel()
			fresh = true
		}
	}
	return res, err
}

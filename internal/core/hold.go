package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// granted records an acquisition sent at sent: the first starts a hold
// (watchdog or lease timer), a re-entry adds to it. It reports false,
// recording nothing, when the session was closed meanwhile.
func (m *Mutex) granted(sent time.Time, leaseMs int64, watchdogKept bool, q *acquisition) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.cur
	reentry := h != nil
	if h == nil {
		if !m.S.track(m) {
			return false
		}
		h = &hold{m: m}
		m.cur = h
		if m.S.obs != nil {
			if l := m.last; l != nil && l.lostPending {
				// The previous hold's loss, held back for an unlock
				// still in flight, is reported before this hold starts.
				l.lostPending = false
				m.S.obs.emit(m.event(Lost, l.heldFor, l.err))
			}
			h.start = time.Now()
			if d := m.S.Config.LongHold; d > 0 {
				h.long = time.AfterFunc(d, h.longHold)
			}
		}
	}
	if m.S.obs != nil {
		// Under m.mu: the grant is reported before the hold's end can be.
		q.waitOver()
		e := m.event(Granted, time.Since(q.t0), nil)
		e.Waited, e.Reentry = q.waited, reentry
		if !q.woke.IsZero() {
			e.Handoff = time.Since(q.woke)
		}
		m.S.obs.emit(e)
	}
	m.holds++
	// The key's TTL was set to leaseMs when Redis ran this acquisition:
	// its validity replaces the earlier one (a re-entry can shorten an
	// explicit lease), except where the kind's re-entry keeps the longer
	// TTL (ReentryKeepsLonger: the hold, and the lease it was valid by,
	// stay the longer ones; issue 30).
	if v := validity(sent, leaseMs); !reentry || !m.ReentryKeepsLonger || v.After(h.validUntil) {
		h.leaseMs = leaseMs
		h.validUntil = v
	}
	if watchdogKept && !h.watchdog {
		h.watchdog = true
		h.wd = m.S.Watchdog.AddKind(m.Keys.Name, m.Owner, m.WatchKind, h)
	}
	if h.timer == nil {
		h.timer = time.AfterFunc(time.Until(h.validUntil), h.expire)
	} else {
		h.timer.Reset(time.Until(h.validUntil))
	}
	return true
}

// longHold reports that h has lasted the long-hold threshold, if it goes on.
func (h *hold) longHold() {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == h {
		m.S.obs.emit(m.event(LongHold, time.Since(h.start), nil))
	}
}

// RenewFailed is the watchdog's report that a renewal of h got no answer.
func (h *hold) RenewFailed(err error) {
	m := h.m
	if m.S.obs == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == h {
		m.S.obs.emit(m.event(RenewFailed, time.Since(h.start), err))
	}
}

// expire runs when the validity timer fires: the hold ends as lost unless a
// renewal moved its validity on.
func (h *hold) expire() {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != h {
		return
	}
	if d := time.Until(h.validUntil); d > 0 {
		h.timer.Reset(d)
		return
	}
	if k, ok := m.E.(Keeper); ok && !h.watchdog {
		if !h.rechecking {
			h.rechecking = true
			go m.recheck(h, k)
		}
		return
	}
	m.expireLocked(h)
}

// recheck asks Redis, when h's explicit lease ran out on the local clock,
// whether the grant's end was moved (Keeper: the permit-expirable
// semaphore's updateLeaseTime, by any client): h goes on, valid for what
// Redis keeps (at most a client lease, then asked again, so a later move or
// a release by id is seen within one), or ends as before.
func (m *Mutex) recheck(h *hold, k Keeper) {
	cfg := &m.S.Config
	ctx, cancel := context.WithTimeout(m.S.bgCtx, max(cfg.CleanupTime, time.Second))
	sent := time.Now()
	ms, err := k.KeptMs(ctx, m.Owner)
	cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	h.rechecking = false
	if m.cur != h {
		return
	}
	// What the lease first sent leaves is at most its drift margin: more
	// than twice that, and the end was moved.
	moved := Drift(time.Duration(h.leaseMs)*time.Millisecond) * 2
	if err == nil && (ms < 0 || time.Duration(ms)*time.Millisecond > moved) {
		keep := cfg.Lease.Milliseconds()
		if ms >= 0 && ms < keep {
			keep = ms
		}
		if v := validity(sent, keep); time.Now().Before(v) {
			h.validUntil, h.leaseMs = v, keep
			h.timer.Reset(time.Until(v))
			return
		}
	}
	if d := time.Until(h.validUntil); d > 0 {
		h.timer.Reset(d) // a renewal moved it meanwhile
		return
	}
	m.expireLocked(h)
}

// expireLocked ends h as lost, its validity over, and gives it back.
func (m *Mutex) expireLocked(h *hold) {
	why := "its lease ran out"
	if h.watchdog {
		why = "no renewal was confirmed before its lease ran out"
	}
	m.endLocked(h, fmt.Errorf("%w: %q: %s", ErrLost, m.userName(), why))
	m.giveBackLocked(h.leaseMs, h.validUntil.Add(Drift(time.Duration(h.leaseMs)*time.Millisecond)))
}

// giveBackLocked runs after a hold ended as lost on the local clock while
// its owner's field may still be in Redis (a renewal whose reply came late
// kept it): the owner gave the hold up, so its field is released in the
// background, every count of it, or the handle's next acquisition would
// re-enter it (Redis count 2, local count 1) and its one Unlock would leave
// the lock held. That next acquisition waits for the give-back (settle).
// A renewal that lands later finds no field and does nothing.
//
// The give-back starts at from, when the lease last sent has run out on
// the local clock (the validity, which takes the drift off, ended before):
// a hold whose lease simply ran out is not released before its lease, as
// Redis would not have expired it sooner.
func (m *Mutex) giveBackLocked(leaseMs int64, from time.Time) {
	m.giveBackFrom(m.unlockArgs(leaseMs), from, nil, allCounts)
}

// allCounts is giveBackFrom's "every count": a bound, not a limit met in
// practice.
const allCounts = 1 << 16

// giveBackFrom is giveBackLocked with the first unlock's arguments a,
// releasing at most most counts. When h is not nil and these counts free
// the lock in Redis, that is h's confirmed release: it withdraws h's loss
// once h has ended (a hold still current is left alone).
func (m *Mutex) giveBackFrom(a wire.Args, from time.Time, h *hold, most int) {
	cfg := &m.S.Config
	n := 0
	work := func(ctx context.Context) error {
		if d := time.Until(from); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		for ; n < most; n++ {
			a.NowMs = m.S.WallMs()
			ua := a
			res, err := call(ctx, func(ctx context.Context) (wire.UnlockResult, error) { return m.E.Unlock(ctx, ua) })
			if err != nil && !permanent(err) {
				return err // sent again with the same request id: its latch makes it count once
			}
			if err != nil || res != wire.StillHeld {
				if err == nil && res == wire.Released && h != nil {
					m.mu.Lock()
					m.withdrawLossLocked(h)
					m.mu.Unlock()
				}
				return nil
			}
			a.RequestID = RequestID()
		}
		return nil
	}
	done := m.S.runCleanup(time.Now().Add(max(cfg.Lease, cfg.LatchTTL)), false, work)
	m.settling = append(m.settling, done)
}

// Renewed is the watchdog's report that a renewal sent at sent was confirmed.
func (h *hold) Renewed(sent time.Time) {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != h {
		return
	}
	if v := validity(sent, m.S.Config.Lease.Milliseconds()); v.After(h.validUntil) {
		h.validUntil = v
	}
}

// ValidUntil is the local instant until which the hold is valid.
func (h *hold) ValidUntil() time.Time {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return h.validUntil
}

// Lost is the watchdog's report that h's lock is gone.
func (h *hold) Lost(reason error) {
	h.m.end(h, fmt.Errorf("%w: %q: %w", ErrLost, h.m.userName(), reason))
}

// end finishes hold h (if still current) with err: nil for a release.
func (m *Mutex) end(h *hold, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endLocked(h, err)
}

func (m *Mutex) endLocked(h *hold, err error) {
	if m.cur != h || h == nil {
		return
	}
	m.cur = nil
	m.last = h
	m.holds = 0
	if h.wd != nil {
		m.S.Watchdog.Remove(h.wd)
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	if m.S.obs != nil {
		if h.long != nil {
			h.long.Stop()
		}
		switch {
		case err == nil:
			m.S.obs.emit(m.event(Released, time.Since(h.start), nil))
		case h.unlocking > 0 && errors.Is(err, ErrLost):
			// An unlock is in flight: a renewal that found the key
			// gone may have raced it, and its confirmed release then
			// withdraws the loss (released). Reported when it returns.
			h.lostPending, h.heldFor = true, time.Since(h.start)
		default:
			m.S.obs.emit(m.event(Lost, time.Since(h.start), err))
		}
	}
	h.err = err
	h.ended = true
	if h.done != nil {
		close(h.done)
	}
	m.S.untrack(m)
}

// ValidUntil is the local instant until which the current hold is valid:
// the latest acquisition's or confirmed renewal's send time plus the lease,
// less the drift margin. Zero when the handle holds nothing.
func (m *Mutex) ValidUntil() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return time.Time{}
	}
	return m.cur.validUntil
}

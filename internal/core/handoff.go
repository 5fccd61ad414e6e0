package core

import (
	"context"
	"fmt"
	"time"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// Direct handoff (issue 23; the scalable fair engine, HandingOff). The
// release script grants the free lock to the live head of the queue itself
// and publishes wire.Grant on the head's channel; the head's acquisition
// returns on that message without running a script, then claims the grant
// (sets its full lease) in the background.
//
// Validity. The grant set the key's TTL to Grant.TTLMs when the release ran,
// and every grant to a request happened after the request's first attempt
// was sent (a grant needs the request's note in the queue, written by one of
// its attempts). So the hold is valid until that send + TTLMs − drift on the
// local clock, whatever the Redis clock says: a safe underestimate, with no
// clock offset to bound. Not the send of the last attempt whose reply said
// "queued": a grant message delayed past its grant's expiry (a stalled
// pub/sub connection) could then come after a later re-join by the same
// request and be taken for a grant made after it.
//
// When less than half of the grant's TTL remains by that rule (a long wait),
// the message is not taken as the hold: the acquisition runs its script
// instead, whose copy of the request finds the latch 'granted:<token>',
// claims the grant (sets the full lease) and replies held once; its
// validity then counts from that attempt's send, as any take's.
//
// The claim. When the grant's TTL is shorter than the hold's lease (the
// watchdog's, or a longer explicit one), the hold's owner renews the key to
// its full lease in the background, retried until the grant's validity
// ends; its confirmation moves the validity to the claim's send + lease −
// drift. The claim starts a third of the way into what is left of the
// grant's validity, and only if the hold is still current then: a short
// hold (released before) costs no claim at all, which is one script less
// per handoff (issue 23), and two thirds of the validity remain for the
// claim's retries. A claim that finds the lock gone ends the
// hold as lost. A head that never claims (dead) holds the lock no longer than
// the grant's TTL, min(lease, 2 graces): then the key expires and the next
// waiter, woken by the release as the new head, takes it.

// takeGrant handles a grant message p on the waiter's channel. It reports
// true when the hold has started from it; false with a nil error when the
// message is not for this request, or too late to vouch for (the caller
// then runs the script).
func (q *acquisition) takeGrant(p string) (bool, error) {
	m := q.m
	g, ok := wire.ParseGrant(p)
	if !ok || !q.handoff || g.RequestID != q.a.AcquireID || q.reqSent.IsZero() {
		return false, nil
	}
	from := q.reqSent
	until := validity(from, g.TTLMs)
	enough := func() bool { return time.Until(until) >= time.Duration(g.TTLMs)*time.Millisecond/2 }
	if !enough() {
		// Too little left to vouch for: the script claims the grant and
		// replies held.
		return false, nil
	}
	if m.S.ackCanWait() {
		// A replica's acknowledgement of the grant (written by the
		// releaser's script), as after a take (replicas.go).
		id := q.a.AcquireID
		q.suspect = true // the grant is the request's: leaving gives it back
		if err := q.confirm(); err != nil {
			return false, err
		}
		if q.a.AcquireID != id || !enough() {
			return false, nil // lost during the wait, or too late now
		}
	}
	m.mu.Lock()
	busy := m.cur != nil
	m.mu.Unlock()
	if busy {
		return false, nil // a hold of this owner is current: the script re-enters as it would
	}
	leaseMs, kept := m.leaseFor(q.o.Lease)
	q.a.LeaseMs = leaseMs
	if !m.granted(from, g.TTLMs, kept, q) {
		m.undo(q.a) // closed meanwhile
		return false, ErrClosed
	}
	if q.o.Token != nil {
		*q.o.Token = g.Token
	}
	q.suspect = false
	m.claim(leaseMs, g.TTLMs, until)
	return true, nil
}

// claim sets the current hold's key to its full lease (leaseMs) in the
// background, retried until the grant's validity (until) ends; it starts a
// third of the way to until, if the hold is still current then. ttlMs: the
// grant's TTL; a lease no longer than it needs no claim.
func (m *Mutex) claim(leaseMs, ttlMs int64, until time.Time) {
	if leaseMs <= ttlMs {
		return // the grant set the hold's whole lease
	}
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	if h == nil {
		return
	}
	time.AfterFunc(time.Until(until)/3, func() {
		m.mu.Lock()
		current := m.cur == h
		m.mu.Unlock()
		if current && !m.S.closed.Load() {
			m.claimNow(h, leaseMs, until)
		}
	})
}

// claimNow is claim's renewal of hold h.
func (m *Mutex) claimNow(h *hold, leaseMs int64, until time.Time) {
	m.S.runCleanup(until, false, func(ctx context.Context) error {
		ctx, cancel := context.WithDeadline(ctx, until)
		defer cancel()
		sent := time.Now()
		held, err := m.S.reassert(ctx, m.WatchKind, m.Keys.Name, m.Owner, leaseMs)
		if err != nil {
			return err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.cur != h {
			return nil // released (or lost) meanwhile
		}
		if !held {
			m.endLocked(h, fmt.Errorf("%w: %q: the lock was gone when its grant was claimed", ErrLost, m.userName()))
			return nil
		}
		h.leaseMs = leaseMs
		if v := validity(sent, leaseMs); v.After(h.validUntil) {
			h.validUntil = v
			if h.timer != nil {
				h.timer.Reset(time.Until(v))
			}
		}
		return nil
	})
}

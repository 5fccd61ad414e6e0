package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fairlock-go/fairlock/internal/pubsub"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Acquire acquires the lock as o says. It reports false with a nil error when
// the wait ran out; a wait ended by ctx returns an error matching both
// ErrCanceled and ctx.Err(); one ended by Close returns ErrClosed.
//
// A Redis call that fails with a transient error (transient.go: a timeout,
// a reset or refused connection, LOADING, TRYAGAIN, CLUSTERDOWN, READONLY,
// MASTERDOWN, BUSY) is part of waiting: it is sent again with capped,
// jittered backoff, with the same request id, so the waiter keeps its queue
// place, until the wait or ctx ends, or Redis has not answered for the
// outage budget (Config.OutageBudget). Only the end of the wait, a
// permanent error, the outage budget or Close ends the call; its error then
// wraps the last Redis error (ErrUnavailable: the budget, or the bound).
//
// It returns as soon as ctx ends (its calls run bounded by ctx, call.go),
// and a timed call (o.Wait >= 0) within o.Wait + the attempt timeout
// whatever ctx is (bound.go).
// Whenever it returns without the lock, the owner holds nothing it did not
// hold before and is no longer queued, or will not be once the give-back
// that then runs in the background is done: the handle's next acquisition
// waits for it, and Close waits for it (bounded by CleanupTime).
func (m *Mutex) Acquire(ctx context.Context, o AcquireOpts) (bool, error) {
	if t := m.S.Config.Tracer; t != nil && ctx != nil {
		sctx, end := t.Start(ctx, m.span("acquire"))
		ok, err := m.acquire(sctx, o)
		end(ok, err)
		return ok, m.closed("acquire", err)
	}
	ok, err := m.acquire(ctx, o)
	return ok, m.closed("acquire", err)
}

func (m *Mutex) acquire(ctx context.Context, o AcquireOpts) (bool, error) {
	if ctx == nil {
		return false, errNilCtx
	}
	if o.Lease < 0 || o.Slot < 0 || (o.Wait < 0 && o.Wait != Forever) {
		return false, fmt.Errorf("%w: lease %v, wait %v, slot %v", ErrInvalidValue, o.Lease, o.Wait, o.Slot)
	}
	if o.Lease > 0 && o.Lease < MinLease {
		return false, fmt.Errorf("%w: lease %v is under %v: no reply comes back within it", ErrInvalidValue, o.Lease, MinLease)
	}
	if err := ctx.Err(); err != nil {
		return false, canceled(err)
	}
	if !m.S.begin() {
		return false, ErrClosed
	}
	defer m.S.end()
	start := time.Now()
	var end time.Time // a timed call's bound (bound.go); zero: none
	if o.Wait >= 0 {
		end = start.Add(o.Wait + m.S.attempt)
	}
	settleUntil := end
	if budget := m.S.Config.OutageBudget; end.IsZero() && budget > 0 {
		settleUntil = start.Add(budget)
	}
	if err := m.settleBy(ctx, settleUntil); errors.Is(err, ErrClosed) {
		return false, ErrClosed
	} else if errors.Is(err, errSettleBound) {
		// The give-back must come first (it could release a new hold, or
		// leave the new wait's queue place): none is attempted.
		return false, fmt.Errorf("fairlock: acquire %q: %w", m.Keys.Name,
			m.S.unavailable(fmt.Sprintf("the give-back of an earlier call of this handle is still pending after %v (it goes on in the background)",
				time.Since(start).Round(time.Millisecond)), nil))
	} else if err != nil {
		return false, canceled(err)
	}
	q := m.newAcquisition(ctx, o, start, end)
	if !end.IsZero() {
		var cancel context.CancelFunc
		q.cctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	// A subscription to the wake channel that is live already (another
	// waiter's, or one kept from this owner's last wait: pubsub.Linger) is
	// joined before the first attempt: every release after that attempt
	// reaches this waiter, so it waits on the attempt's reply at once,
	// with no subscription round and no re-check.
	w := m.S.Hub.Attach(m.E.WakeChannel(m.Owner), m.Queue) // a fair waiter's channel carries notes
	defer func() {
		switch {
		case w == nil:
		case m.Queue:
			w.Close() // the owner's own channel: kept for its next wait (Linger)
		default:
			// A channel every waiter shares (a reentrant lock's): not
			// kept, or this client would receive its own releases on it
			// (issue 33: the alternation's reentrant handoff 1.79 ->
			// 1.70 of the floor; the next wait subscribes while the lock
			// is held, off the handoff).
			w.CloseNow()
		}
	}()
	ok, ttl, err := q.try()
	if err != nil || ok {
		return q.result(ok, err)
	}
	if q.expired() {
		return q.giveUp(nil)
	}
	q.pos.report()
	if m.S.obs != nil {
		q.waitStarted()
	}
	recheck := w == nil
	if w == nil {
		if w, err = q.subscribe(); err != nil || w == nil {
			return q.giveUp(err)
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if recheck {
			ok, ttl, err = q.try()
			if err != nil || ok {
				return q.result(ok, err)
			}
			if q.expired() {
				return q.giveUp(nil)
			}
			q.pos.report()
		}
		recheck = true
		due := time.Now().Add(q.sleepFor(ttl))
		timer.Reset(time.Until(due))
	wait:
		for {
			select {
			case <-w.C():
				if m.S.obs != nil {
					q.woke = time.Now()
				}
				if p, ok := w.Grant(); ok {
					if ok, err := q.takeGrant(p); ok || err != nil {
						return q.result(ok, err)
					}
					// not ours, or too late to vouch for: the script decides
				}
				if p, ok := w.Note(); ok {
					if n, ok := wire.ParseNote(p); ok {
						// The reply an attempt would get, without the
						// attempt: sleep no later than it says.
						if d := q.sleepFor(n.SleepMs); time.Now().Add(d).Before(due) {
							due = time.Now().Add(d)
							timer.Reset(d)
						}
						q.noted(n)
						continue
					}
				}
				break wait
			case <-timer.C:
				q.woke = time.Time{}
				break wait
			case <-ctx.Done():
				return q.giveUp(nil)
			case <-q.closing:
				return q.giveUp(nil)
			}
		}
	}
}

// noted reports the place a Note gave (wire.Note; -1: none), as an
// attempt's reply would be.
func (q *acquisition) noted(n wire.Note) {
	if q.pos == nil || n.Ahead < 0 {
		return
	}
	q.pos.have, q.pos.ahead, q.pos.at = true, wire.Ahead{Ahead: n.Ahead}, time.Now()
	q.pos.report()
}

// MinLease is the shortest explicit lease an acquisition accepts: a shorter
// one runs out before any reply can come back (the validity takes a drift
// margin of 1% + 2 ms off every lease).
const MinLease = 10 * time.Millisecond

// Retry backoff after a transient error: doubled from retryMin up to
// retryMax, each sleep a random 50-100% of it.
const (
	retryMin = 25 * time.Millisecond
	retryMax = time.Second
)

// acquisition is one Acquire call: its request (one request id while its
// copies may reach Redis) and the state of its wait.
type acquisition struct {
	m       *Mutex
	ctx     context.Context
	cctx    context.Context // the Redis calls' ctx: ctx, bounded by end (and by the outage budget during an outage)
	closing <-chan struct{}
	end     time.Time // a timed call's bound, deadline + attempt timeout (bound.go); zero: none
	// outageSince is the send of the first attempt of the current run of
	// attempts that got no definite answer (zero: none).
	outageSince time.Time
	o           AcquireOpts
	a           wire.Args
	deadline    time.Time // zero: wait until ctx ends

	// suspect: an attempt may have left a copy of the request that reaches
	// Redis later (it failed, or lasted long enough for go-redis to time
	// out and resend). Leaving without the lock then voids the request.
	suspect bool
	// ambSince is the send time of the earliest attempt of this request id
	// whose outcome is unknown (zero: none). A copy of it may have taken
	// the lock when it reached Redis, no earlier than it was sent, and a
	// later attempt then gets that grant back from the latch: its validity
	// counts from here, not from the later send.
	ambSince time.Time
	// reqSent is the send time of the first attempt of this request id
	// (zero: none yet). Every direct handoff to this request happened
	// after it (handoff.go).
	reqSent time.Time
	// handoff: the engine's release grants the lock to the live head
	// directly (the scalable fair engine); a waiter then gives up with
	// abandon (the grant may be in flight).
	handoff bool
	late    int   // replies that came after the lease they were sent with
	keptMs  int64 // > 0: Redis keeps the grant this long, less than its lease (Keeper)
	lastErr error // the last transient Redis error

	pos *positionTrack // nil: no position callback (position.go)

	// Set only when the session has an observer (observe.go).
	t0     time.Time  // the call's start
	waited bool       // WaitStarted was reported
	woke   time.Time  // the wake-up before the current attempt (zero: none)
	alert  *waitAlert // the LongWait timer; nil: none
}

// waitAlert reports a long wait once, unless the wait ended first.
type waitAlert struct {
	mu   sync.Mutex
	over bool
	t    *time.Timer
}

// waitStarted reports the start of the wait, and starts the long-wait
// timer when the alert is set.
func (q *acquisition) waitStarted() {
	m := q.m
	q.waited = true
	e := m.event(WaitStarted, 0, nil)
	e.Ahead = -1
	if q.pos != nil {
		e.Ahead = q.pos.first
	}
	m.S.obs.emit(e)
	if d := m.S.Config.LongWait; d > 0 {
		al := &waitAlert{}
		q.alert = al
		al.mu.Lock()
		defer al.mu.Unlock()
		al.t = time.AfterFunc(d-time.Since(q.t0), func() {
			al.mu.Lock()
			defer al.mu.Unlock()
			if !al.over {
				al.over = true
				m.S.obs.emit(m.event(LongWait, time.Since(q.t0), nil))
			}
		})
	}
}

// waitOver stops the long-wait timer: no LongWait after this.
func (q *acquisition) waitOver() {
	if al := q.alert; al != nil {
		al.mu.Lock()
		al.over = true
		al.t.Stop()
		al.mu.Unlock()
	}
}

func (m *Mutex) newAcquisition(ctx context.Context, o AcquireOpts, start, end time.Time) *acquisition {
	cfg := &m.S.Config
	q := &acquisition{
		m: m, ctx: ctx, cctx: ctx, o: o, end: end,
		closing: m.S.closeCtx.Done(),
		a: wire.Args{
			Owner:     m.Owner,
			WaitMs:    cfg.WaitSlot.Milliseconds(),
			GraceMs:   m.S.GraceMs(),
			PubCmd:    m.S.PubCmd(),
			AcquireID: RequestID(),
			LatchMs:   cfg.LatchTTL.Milliseconds(),
		},
	}
	if o.Slot > 0 {
		q.a.WaitMs = max(1, o.Slot.Milliseconds())
	}
	if h, ok := m.E.(HandingOff); ok && o.Queue {
		q.handoff = h.Handoff()
	}
	if o.Wait >= 0 {
		q.deadline = start.Add(o.Wait)
	}
	if m.S.obs != nil {
		q.t0 = time.Now()
	}
	if o.Queue && (o.Position != nil || m.S.obs != nil) {
		// an observer gets the position at the start of a wait
		// (WaitStarted's Ahead) without a callback
		q.pos = &positionTrack{fn: o.Position, first: -1}
	}
	return q
}

func (q *acquisition) expired() bool {
	return !q.deadline.IsZero() && !time.Now().Before(q.deadline)
}

// newRequest starts a new request id: the earlier one's copies can no
// longer take the lock (its grant is over, or it was voided).
func (q *acquisition) newRequest() {
	q.a.AcquireID = RequestID()
	q.ambSince = time.Time{}
	q.reqSent = time.Time{}
}

// try makes attempts until one gets a definite answer: sent again after a
// transient error, with backoff, while the wait and ctx last.
func (q *acquisition) try() (bool, int64, error) {
	backoff := retryMin
	budget := q.m.S.Config.OutageBudget
	for {
		sent := time.Now()
		ok, ttl, err := q.boundedAttempt()
		if err == nil {
			q.lastErr = nil // a definite answer: Redis is reachable
			q.outageSince = time.Time{}
		}
		if err == nil || !transient(err) {
			return ok, ttl, err
		}
		if q.expired() {
			return false, 0, q.m.S.unavailable("no answer before the wait ran out", err)
		}
		q.lastErr = err
		if q.outageSince.IsZero() {
			q.outageSince = sent
		}
		if out := time.Since(q.outageSince); budget > 0 && out >= budget {
			return false, 0, q.m.S.unavailable(fmt.Sprintf("no answer for %v (outage budget %v)",
				out.Round(time.Millisecond), budget), err)
		}
		if !q.pause(backoff/2 + rand.N(backoff/2+1)) {
			return false, 0, err
		}
		backoff = min(2*backoff, retryMax)
	}
}

// boundedAttempt is attempt with its Redis calls bounded: by the call's end
// (a timed call), or during an outage by the end of the outage budget. A
// call cut by that bound (its ctx ended, the caller's did not) returns an
// error matching ErrUnavailable that wraps the last Redis error.
func (q *acquisition) boundedAttempt() (bool, int64, error) {
	base := q.cctx
	budget := q.m.S.Config.OutageBudget
	if q.end.IsZero() && !q.outageSince.IsZero() && budget > 0 {
		var cancel context.CancelFunc
		q.cctx, cancel = context.WithDeadline(base, q.outageSince.Add(budget))
		defer func() { cancel(); q.cctx = base }()
	}
	ok, ttl, err := q.attempt()
	if err != nil && q.ctx.Err() == nil && q.cctx.Err() != nil &&
		(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		what := fmt.Sprintf("no answer within the call's bound (wait %v + attempt timeout %v)", max(q.o.Wait, 0), q.m.S.attempt)
		if q.end.IsZero() {
			what = fmt.Sprintf("no answer for %v (outage budget %v)", time.Since(q.outageSince).Round(time.Millisecond), budget)
		}
		return false, 0, q.m.S.unavailable(what, q.lastErr)
	}
	return ok, ttl, err
}

// pause sleeps d, at most until the wait's deadline; false when ctx ended
// or the session closed first.
func (q *acquisition) pause(d time.Duration) bool {
	if !q.deadline.IsZero() {
		d = min(d, time.Until(q.deadline))
	}
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-q.ctx.Done():
	case <-q.closing:
	}
	return false
}

// attempt sends the request once. Acquired, it waits for a replica's
// acknowledgement and starts (or adds to) the hold.
func (q *acquisition) attempt() (bool, int64, error) {
	m := q.m
	q.a.NowMs = m.S.WallMs()
	leaseMs, kept := m.leaseFor(q.o.Lease)
	q.a.LeaseMs = leaseMs
	sent := time.Now()
	if q.reqSent.IsZero() {
		q.reqSent = sent
	}
	// A re-entry sets the key's TTL to its lease whether or not its reply
	// comes back: the current hold is valid no longer than that.
	m.bound(sent, leaseMs)
	args := q.a // the call may outlive this attempt: it gets its own copy
	var ok bool
	var ttl int64
	var err error
	var at AheadTrier
	if q.pos != nil {
		at, _ = m.E.(AheadTrier)
	}
	if at != nil {
		type okAhead struct {
			ok    bool
			ahead wire.Ahead
		}
		var r okAhead
		r, ttl, err = call2(q.cctx, m.S.how(q.cctx), q.closing, func(ctx context.Context) (okAhead, int64, error) {
			ok, ttl, ahead, err := at.TryAhead(ctx, args)
			return okAhead{ok, ahead}, ttl, err
		})
		ok = r.ok
		if err == nil && !ok {
			q.pos.have, q.pos.ahead, q.pos.at = true, r.ahead, sent
		}
	} else {
		ok, ttl, err = call2(q.cctx, m.S.how(q.cctx), q.closing, func(ctx context.Context) (bool, int64, error) {
			return m.E.Try(ctx, args, q.o.Queue)
		})
	}
	if (err != nil && !isScriptError(err)) || time.Since(sent) >= m.S.resendAfter {
		if q.pos != nil {
			q.pos.lost = true // a copy of the request may reach Redis later and join again
		}
		q.suspect = true
		if q.ambSince.IsZero() {
			q.ambSince = sent
		}
	}
	if err != nil && !isScriptError(err) {
		m.S.connError()
	}
	if errors.Is(err, wire.ErrGrantOver) {
		// An earlier copy of this request was granted and that hold is
		// already over: nothing to undo; go on with a new id.
		q.newRequest()
		return false, 0, nil
	}
	if err == nil && !ok && q.handoff {
		// Queued: a release may grant this request the lock at any
		// moment, before its message reaches us. Leaving must then void
		// the request (abandon: a grant already made is given back, a
		// later one is refused) rather than only leave the queue.
		q.suspect = true
	}
	if err != nil || !ok {
		return false, ttl, err
	}
	from := sent
	if !q.ambSince.IsZero() && q.ambSince.Before(sent) {
		from = q.ambSince
	}
	if err := q.confirm(); err != nil || q.a.AcquireID != args.AcquireID {
		return false, 0, err
	}
	q.keptMs = 0
	if k, ok := m.E.(Keeper); ok {
		// Redis keeps the grant for less than the lease (the keys' TTL):
		// the validity must not outlast it.
		if kept := k.GrantKeptMs(); kept >= 0 && kept < leaseMs {
			leaseMs, q.keptMs = kept, kept
		}
	}
	if !time.Now().Before(validity(from, leaseMs)) {
		return q.lateReply(ttl, kept)
	}
	return q.start(from, ttl, kept)
}

// confirm waits for a replica's acknowledgement of the acquisition
// (replicas.go). An error is handled as an ambiguous attempt, whose cleanup
// undoes the hold; a hold found gone is not an error: the acquisition goes
// on with a new request id (this one's latch says granted).
func (q *acquisition) confirm() error {
	m := q.m
	if !m.S.ackCanWait() {
		return nil
	}
	err := callErr(q.cctx, m.S.how(q.cctx), q.closing, func(ctx context.Context) error {
		if hc, ok := m.E.(HeldChecker); ok {
			sc, keys, args := hc.HeldScript(m.Owner)
			return m.S.confirm(ctx, m.Keys.Name, heldCheck{sc, keys, args})
		}
		return m.S.ConfirmAcquire(ctx, m.Keys.Name, m.Owner)
	})
	switch {
	case errors.Is(err, errLostDuringAck):
		q.newRequest()
		return nil
	case err != nil:
		q.suspect = true // the request holds the lock: leaving gives it back
		return err
	}
	return nil
}

// start records the acquisition as a hold valid from from.
func (q *acquisition) start(from time.Time, token int64, kept bool) (bool, int64, error) {
	m := q.m
	leaseMs := q.a.LeaseMs
	if q.keptMs > 0 && q.keptMs < leaseMs {
		leaseMs = q.keptMs
	}
	if !m.granted(from, leaseMs, kept, q) {
		m.undo(q.a) // closed meanwhile
		return false, 0, ErrClosed
	}
	if q.o.Token != nil {
		*q.o.Token = token
	}
	q.late = 0
	return true, 0, nil
}

// lateReply handles a grant whose reply came after its lease (counted from
// its send) ran out: the hold may still be in Redis, but its validity
// cannot be vouched for. The lease is set again by a renewal, and the hold
// counts from that renewal's send, so the waiter keeps the turn it was
// given. When the renewal's reply is late too, the lease is shorter than a
// round trip: the hold is given back, and a second time in one call ends it
// with an error (a 1 ms lease would otherwise take and give back the lock
// for ever).
func (q *acquisition) lateReply(token int64, kept bool) (bool, int64, error) {
	m := q.m
	q.late++
	if q.late == 1 {
		sent := time.Now()
		held, err := callC(q.cctx, m.S.how(q.cctx), q.closing, func(ctx context.Context) (bool, error) {
			return m.S.reassert(ctx, m.WatchKind, m.Keys.Name, m.Owner, q.a.LeaseMs)
		})
		switch {
		case err == nil && held && time.Now().Before(validity(sent, q.a.LeaseMs)):
			return q.start(sent, token, kept)
		case err == nil && !held:
			q.newRequest() // gone already: nothing to give back
			q.suspect = false
			return false, 0, nil
		}
	}
	m.undo(q.a)
	q.newRequest()
	q.suspect = false
	if q.late >= 2 {
		return false, 0, fmt.Errorf("%w: the lease %v ran out twice before Redis's reply came back", ErrInvalidValue,
			time.Duration(q.a.LeaseMs)*time.Millisecond)
	}
	return false, 0, nil
}

// subscribe starts listening for wake-ups, retrying transient errors like an
// attempt. A nil waiter with a nil error: the wait ran out meanwhile.
func (q *acquisition) subscribe() (*pubsub.Waiter, error) {
	m := q.m
	backoff := retryMin
	for {
		subCtx, unbind := m.S.bind(q.ctx) // Close ends the subscription
		if !q.deadline.IsZero() {
			var cancel context.CancelFunc
			subCtx, cancel = context.WithDeadline(subCtx, q.deadline)
			defer cancel()
		}
		w, err := m.S.Hub.Subscribe(subCtx, m.E.WakeChannel(m.Owner))
		unbind()
		switch {
		case err == nil:
			return w, nil
		case q.ctx.Err() != nil || m.S.Closed() || q.expired():
			return nil, nil // the wait ran out, or ctx or Close ended it
		case !transient(err):
			return nil, fmt.Errorf("subscribe: %w", err)
		}
		q.lastErr = err
		if !q.pause(backoff/2 + rand.N(backoff/2+1)) {
			return nil, nil
		}
		backoff = min(2*backoff, retryMax)
	}
}

// sleepFor is how long to sleep before the next attempt when no wake-up
// comes: until the lock's lease (or, queued behind a free lock, the head's
// deadline) runs out, since a message can be missed. ttl < 0 means a lock
// with no expiry: only a message frees it, but re-check once a lease anyway.
// A reply beyond any sensible wait (a corrupted deadline) is clamped: at
// most the longer of the lease and the slot.
func (q *acquisition) sleepFor(ttl int64) time.Duration {
	cfg := &q.m.S.Config
	longest := max(cfg.Lease, cfg.WaitSlot, q.o.Slot)
	sleep := time.Duration(min(ttl, longest.Milliseconds())) * time.Millisecond
	if ttl < 0 {
		sleep = cfg.Lease
	}
	if !q.deadline.IsZero() {
		sleep = min(sleep, time.Until(q.deadline))
	}
	return max(sleep, 0)
}

// result ends the call after an attempt that acquired or failed.
func (q *acquisition) result(ok bool, err error) (bool, error) {
	if err != nil {
		return q.giveUp(err)
	}
	return ok, nil
}

// giveUp ends the call without the lock: the request is voided and the queue
// left (cleanup), then the error says why (err: the last error, nil when
// the wait ran out or ctx or Close ended it).
func (q *acquisition) giveUp(err error) (bool, error) {
	ok, err := q.leave(err)
	if q.waited {
		q.waitOver()
		m := q.m
		m.S.obs.emit(m.event(WaitEnded, time.Since(q.t0), err))
	}
	return ok, err
}

func (q *acquisition) leave(err error) (bool, error) {
	m := q.m
	until := q.end
	if errors.Is(err, ErrUnavailable) {
		// Redis did not answer within the call's bound: its give-back
		// goes on in the background, the caller does not wait for it.
		until = time.Now()
	}
	// What ended the wait is what it was when the wait ended, read before
	// the give-back: a give-back that cannot reach Redis may run on until
	// the ctx ends, and a wait Close ended still returns ErrClosed.
	userErr, closed := q.ctx.Err(), m.S.Closed()
	m.cleanup(q.ctx, q.a, q.o.Queue, q.suspect, q.o.Slot, until)
	if err == nil || (userErr != nil && errors.Is(err, userErr)) {
		err = q.lastErr // a wait that ended during a Redis outage says so
	}
	switch {
	case errors.Is(err, ErrClosed) || (userErr == nil && closed):
		return false, ErrClosed
	case userErr != nil && err != nil:
		return false, fmt.Errorf("%w: %w", canceled(userErr), err)
	case userErr != nil:
		return false, canceled(userErr)
	case err != nil:
		return false, Errorf(err, "acquire %q", m.userName())
	}
	return false, nil
}

package core

import (
	"sync/atomic"
	"time"

	"github.com/fairlock-go/fairlock/internal/pubsub"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// An armed attempt (issue 33): a waiter whose attempt would run on a worker
// (its ctx can end, call.go) hands that worker the wait for its wake-up
// before it sleeps. The worker receives the wake-up from the hub's reader,
// sends the attempt at once and hands its reply back; the waiter's goroutine
// only waits for that reply, its timer, its ctx or Close. A woken attempt
// then costs the goroutine hand-offs of an attempt made inline (the reader →
// the worker → the waiter) instead of the reader → the waiter → the worker →
// the waiter.
//
// Nothing else changes: the attempt is the one the waiter would have sent
// on that wake-up (same arguments, prepared when the wake-up arrives), its
// reply goes through the same handling (attempted, tryFrom: retries, the
// outage budget, the give-back), and a ctx or Close that ends while it is in
// flight ends the call at once, as for any attempt (the reply is then
// unknown: the request is voided by the give-back).
//
// Only engines whose wake-ups always ask for an attempt are armed (not the
// direct handoff's, whose grant and sleep messages are read by the waiter),
// and only when the attempt would not run inline anyway.

// armed is one armed attempt. state: armWaiting until the worker takes a
// wake-up (armStarted) or the waiter cancels (armCanceled), whichever comes
// first.
type armed struct {
	state atomic.Int32
	stop  chan struct{}    // closed by cancel
	res   chan armedResult // the reply; room for one

	// Written by the worker before it moves state to armStarted; read by
	// the waiter only after it saw armStarted.
	args wire.Args
	sent time.Time
	kept bool
	woke time.Time
}

const (
	armWaiting int32 = iota
	armStarted
	armCanceled
)

type armedResult struct {
	r   tried
	ttl int64
	err error
}

// armable reports whether the next wake-up's attempt is to be armed.
func (q *acquisition) armable() bool {
	return !q.handoff && q.outageSince.IsZero() && !q.m.S.inline(q.cctx)
}

// arm hands a worker the wait for w's next wake-up and the attempt it asks
// for. The waiter must not read w.C() until the armed attempt is over (its
// reply taken, or cancel).
func (q *acquisition) arm(w *pubsub.Waiter) *armed {
	m := q.m
	ar := &armed{stop: make(chan struct{}), res: make(chan armedResult, 1)}
	base, ctx, send := q.a, q.cctx, q.sender()
	m.S.work.run(func() {
		select {
		case <-w.C():
		case <-ar.stop:
			return
		}
		woke := time.Now()
		args, sent, kept := q.prepare(base)
		ar.args, ar.sent, ar.kept, ar.woke = args, sent, kept, woke
		if !ar.state.CompareAndSwap(armWaiting, armStarted) {
			// The waiter stopped waiting meanwhile: the wake-up is not
			// used here, so it is handed on (a wake-up is never lost).
			w.PassOn()
			return
		}
		if err := ctx.Err(); err != nil {
			ar.res <- armedResult{err: err} // as callC: not sent
			return
		}
		m.bound(sent, args.LeaseMs)
		r, ttl, err := send(ctx, args)
		ar.res <- armedResult{r, ttl, err}
	})
	return ar
}

// cancel stops the armed attempt if its wake-up has not come: true then.
// False: the attempt was sent (or is being sent); its reply comes on res.
func (ar *armed) cancel() bool {
	if ar.state.CompareAndSwap(armWaiting, armCanceled) {
		close(ar.stop)
		return true
	}
	return false
}

// armedTry handles the armed attempt's reply as try does an attempt's
// (retrying a transient error, bounded as boundedAttempt is).
func (q *acquisition) armedTry(ar *armed, res armedResult) (bool, int64, error) {
	return q.tryFrom(func() (bool, int64, error) {
		q.sent = ar.sent
		return q.bounded(q.attempted(ar.args, ar.sent, ar.kept, res.r, res.ttl, res.err))
	})
}

// armedWait waits for the reply of an armed attempt that was sent, as
// callC waits for a call: until the reply, the end of the call's ctx, or
// Close, whose errors then stand for the reply (the attempt's outcome is
// unknown).
func (q *acquisition) armedWait(ar *armed) armedResult {
	select {
	case res := <-ar.res:
		return res
	case <-q.cctx.Done():
		return armedResult{err: q.cctx.Err()}
	case <-q.closing:
		return armedResult{err: ErrClosed}
	}
}

package propertytests

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// The liveness property, stated once (issue 12): a live waiter W that is at
// the head of the fair queue while the lock is free takes it within
//
//	the lease of the last hold it saw  (a lost wake-up costs at most one lease:
//	                                    the waiter re-checks when that lease ends)
//	+ 1 s                              (client, network and scheduling slack)
//	+ 2 x head grace                   (generous: a fault-free run needs no grace)
//	+ 2 x head grace per dead waiter ahead of it (each dead head is pruned once
//	                                    it has been the head of a free lock for
//	                                    one grace; noticing that costs another)
//
// "Free for W" is when the lock is not held (released, or its lease ran out)
// and every waiter that joined before W has left the queue: it took the lock
// and gave it up, it gave up waiting, or it was dead (it is then counted
// above). A grace that is off (Redisson's behaviour) counts as 0; tests
// make no dead waiters then, since a dead waiter then blocks for its whole
// slot (minutes), as in Redisson.
func livenessBound(lastLease, grace time.Duration, deadAhead int) time.Duration {
	g := max(grace, 0)
	return lastLease + time.Second + 2*g + time.Duration(deadAhead)*2*g
}

// The record of real calls the property is checked against. Every time is
// this process's monotonic clock; each event of Redis is known only to lie
// between the start and the end of the call that caused it, so the checks
// only report what is certain whichever instant in those intervals Redis
// acted at:
//
//   - join: a waiting acquisition call is queued once a waiting script's
//     reply that is not a grant has come back (both engines' waiting scripts
//     leave the caller queued whenever they do not grant, as Redisson's
//     tryLock with a wait does). A go-redis hook (replyHook) sees the replies
//     of the calls made with an attempt's context;
//   - grant: the script reply that granted (its call's start: the earliest
//     the grant and the lease can have started) and the acquisition call's
//     return;
//   - give-up: the earliest moment the attempt may have left the queue
//     (its context cancelled, or its wait ran out) and the call's return;
//   - release: the Unlock call's start and end; a lease end is the grant
//     plus the lease passed (no Unlock is made for those holds).
type attempt struct {
	n         int    // arrival index, in the order the test started them
	owner     string // owner id
	label     string // for messages
	dead      bool   // a waiter whose client died: it queued once and does nothing more
	queues    bool   // a waiting acquisition (Lock, TryLockFor, ...), not TryLock
	reent     bool   // a re-entry by the holder: no new hold
	cancelled bool   // its context was cancelled by the test
	lease     time.Duration
	wait      time.Duration // the wait bound; 0 for none
	slot      time.Duration // the wait slot it queued with; 0: long (never runs out in a test)

	start      time.Time // the acquisition call was made (at or before its first script call)
	joinStart  time.Time // the call that queued it: start
	joinAt     time.Time // ... and reply
	grantStart time.Time // the call that granted: start
	end        time.Time // the acquisition call returned (zero while it runs)
	granted    bool
	err        error
	leftFrom   time.Time // a waiter that gave up: the earliest it may have left the queue
	relStart   time.Time // the hold's Unlock (last hold): start
	relEnd     time.Time // ... and end
	done       chan struct{}
}

// history is the record of one run.
type history struct {
	mu       sync.Mutex
	t0       time.Time
	grace    time.Duration // the head grace the clients were given (negative: off)
	watchdog time.Duration // the watchdog lease of holds without an explicit lease
	attempts []*attempt
	log      []string
}

func newHistory(grace, watchdog time.Duration) *history {
	return &history{t0: time.Now(), grace: grace, watchdog: watchdog}
}

func (h *history) at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%.3fs", t.Sub(h.t0).Seconds())
}

func (h *history) logf(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, fmt.Sprintf("%9.3fs ", time.Since(h.t0).Seconds())+fmt.Sprintf(format, args...))
}

// begin records a new attempt: the caller then makes the call with ctx
// (withAttempt) so that the reply hook sees its replies.
func (h *history) begin(a *attempt) *attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.n = len(h.attempts)
	a.start = time.Now()
	a.done = make(chan struct{})
	h.attempts = append(h.attempts, a)
	h.log = append(h.log, fmt.Sprintf("%9.3fs #%d %s starts", time.Since(h.t0).Seconds(), a.n, a.label))
	return a
}

// queued records the reply that queued a (only the first counts).
func (h *history) queued(a *attempt, start, end time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.joinAt.IsZero() && a.queues && a.end.IsZero() {
		a.joinStart, a.joinAt = start, end
		h.log = append(h.log, fmt.Sprintf("%9.3fs #%d %s queued", end.Sub(h.t0).Seconds(), a.n, a.label))
	}
}

// granting records the reply that granted a.
func (h *history) granting(a *attempt, start time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.end.IsZero() {
		a.grantStart = start
	}
}

// finish records the acquisition call's return.
func (h *history) finish(a *attempt, ok bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.end = time.Now()
	a.granted = ok && err == nil
	a.err = err
	if a.granted && a.grantStart.IsZero() {
		a.grantStart = a.start
	}
	if !a.granted && a.leftFrom.IsZero() {
		a.leftFrom = a.start
		if a.wait > 0 {
			a.leftFrom = a.start.Add(a.wait)
		}
		a.leftFrom = minTime(a.leftFrom, a.end)
	}
	what := "gave up"
	if a.granted {
		what = "granted"
	}
	if err != nil {
		what += fmt.Sprintf(" (%v)", err)
	}
	h.log = append(h.log, fmt.Sprintf("%9.3fs #%d %s %s", a.end.Sub(h.t0).Seconds(), a.n, a.label, what))
	close(a.done)
}

// cancelling records that a's context is about to be cancelled: it may
// leave the queue from now on.
func (h *history) cancelling(a *attempt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.end.IsZero() && a.leftFrom.IsZero() {
		a.leftFrom = time.Now()
	}
	h.log = append(h.log, fmt.Sprintf("%9.3fs #%d %s cancelled", time.Since(h.t0).Seconds(), a.n, a.label))
}

// releasing and released bracket the Unlock that ends a's hold.
func (h *history) releasing(a *attempt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.relStart = time.Now()
}

func (h *history) released(a *attempt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.relEnd = time.Now()
	h.log = append(h.log, fmt.Sprintf("%9.3fs #%d %s released", a.relEnd.Sub(h.t0).Seconds(), a.n, a.label))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// never is a time after every real one.
var never = time.Unix(math.MaxInt32, 0)

// expiryTolerance covers Redis expiring a key by its own clock, in whole
// milliseconds, against this process's clock.
const expiryTolerance = 20 * time.Millisecond

// holdEnds is when a's hold ended: at the earliest and at the latest.
func (h *history) holdEnds(a *attempt) (lo, hi time.Time) {
	switch {
	case !a.relEnd.IsZero():
		return a.relStart, a.relEnd
	case !a.relStart.IsZero():
		return a.relStart, never
	case a.lease > 0:
		return a.grantStart.Add(a.lease - expiryTolerance), a.end.Add(a.lease + expiryTolerance)
	}
	return never, never // held by the watchdog until Unlock
}

// leaseOf is the lease of a's hold as a waiter sees it: the explicit lease,
// or the watchdog lease.
func (h *history) leaseOf(a *attempt) time.Duration {
	if a.lease > 0 {
		return a.lease
	}
	return h.watchdog
}

// holds are the attempts that took the lock (re-entries excluded).
func (h *history) holds() []*attempt {
	var hs []*attempt
	for _, a := range h.attempts {
		if a.granted && !a.reent {
			hs = append(hs, a)
		}
	}
	return hs
}

// leaves is when queued attempt a left the queue, at the latest (never
// while it waits). A dead waiter leaves when the lock is free for it (its
// cost is in the bound), known once free has been computed for it.
func (h *history) leaves(a *attempt, free map[*attempt]time.Time) time.Time {
	switch {
	case a.granted || (!a.dead && !a.end.IsZero()):
		return a.end
	case a.dead:
		if f, ok := free[a]; ok {
			return f
		}
	}
	return never
}

// ahead reports whether v may have joined the queue before w did.
func ahead(v, w *attempt) bool {
	return v != w && !v.joinAt.IsZero() && v.joinStart.Before(w.joinAt)
}

// freeFor computes, for every queued attempt, when the lock became free for
// it (never when it has not yet), given what is known at now, and how many
// dead waiters were ahead of it then, and the lease of the last hold before.
func (h *history) freeFor(now time.Time) (free map[*attempt]time.Time, dead map[*attempt]int, lease map[*attempt]time.Duration) {
	free = map[*attempt]time.Time{}
	dead = map[*attempt]int{}
	lease = map[*attempt]time.Duration{}
	var queued []*attempt
	for _, a := range h.attempts {
		if !a.joinAt.IsZero() {
			queued = append(queued, a)
		}
	}
	slices.SortStableFunc(queued, func(a, b *attempt) int { return a.joinAt.Compare(b.joinAt) })
	holds := h.holds()
	for _, w := range queued {
		t := w.joinAt
		for changed := true; changed && t != never; {
			changed = false
			for _, v := range queued {
				if !ahead(v, w) || v.dead && !v.granted && !v.joinAt.Before(w.joinAt) {
					continue // a dead waiter is counted only when certainly ahead
				}
				if l := h.leaves(v, free); l.After(t) {
					t, changed = l, true
				}
			}
			for _, x := range holds {
				if x == w {
					continue
				}
				_, hi := h.holdEnds(x)
				if !x.grantStart.After(t) && hi.After(t) {
					t, changed = hi, true
				}
			}
		}
		if t == never {
			continue
		}
		free[w] = t
		// The last hold that ended by t, and the dead waiters that
		// arrived after its holder did (those that arrived before it
		// were ahead of it and pruned before its grant, or behind it
		// and still there).
		var last *attempt
		for _, x := range holds {
			if x == w {
				continue
			}
			if _, hi := h.holdEnds(x); !hi.After(t) && (last == nil || x.grantStart.After(last.grantStart)) {
				last = x
			}
		}
		if last != nil {
			lease[w] = h.leaseOf(last)
		}
		for _, v := range queued {
			if v.dead && !v.granted && ahead(v, w) && (last == nil || v.joinStart.After(last.start)) {
				dead[w]++
			}
		}
	}
	return free, dead, lease
}

// protectedUntil is how long Redisson's rules keep queued attempt a's place
// whatever happens: until its slot has run out, counted from the start of
// the busy period it joined in (the queue has been non-empty since then).
//
// Redisson's deadlines are a chain: the first waiter of a busy period gets
// now + PTTL + slot, each later one the tail's deadline + its slot, and a
// take or a give-up subtracts the leaver's slot from those behind. So a
// waiter's deadline is never before the busy period's start plus its own
// slot, but it can be anywhere after: when holds outlast the PTTL the chain
// was anchored on, a waiter with a short slot (TryLockFor uses its wait) is
// pruned as dead while it still waits, and rejoins at the tail. That is
// Redisson's design, not a fault; a waiter's place is only promised until
// protectedUntil. Every waiter with a slot of minutes (Lock's default) is
// protected for the whole of a test. (The head grace clamp that breaks this
// bound, bug 4, is what the checks must catch.) Dead waiters count as queued
// until the end, which can only make periods longer and protection shorter.
func (h *history) protectedUntil(a *attempt) time.Time {
	if a.slot == 0 {
		return never
	}
	start := a.joinStart
	for changed := true; changed; {
		changed = false
		for _, v := range h.attempts {
			if v.joinAt.IsZero() || !v.joinStart.Before(start) {
				continue
			}
			left := never
			if !v.end.IsZero() {
				left = v.end
			}
			if !left.Before(start) {
				start, changed = v.joinStart, true
			}
		}
	}
	return start.Add(a.slot - 50*time.Millisecond)
}

// check returns every violation of the properties that is certain at now:
//
//   - exclusion: no grant certainly falls inside another hold;
//   - FIFO: no one is granted the lock while a live waiter that queued
//     before its call started still waits, within that waiter's
//     protectedUntil (a waiter that gave up or died is exempt once it left);
//   - liveness: no live waiter is still waiting, was granted, or gave up
//     more than livenessBound after the lock was free for it (counting no
//     further than its protectedUntil).
func (h *history) check(now time.Time) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	holds := h.holds()
	for _, x := range holds {
		lo, _ := h.holdEnds(x)
		for _, y := range holds {
			if y != x && y.grantStart.After(x.end) && y.end.Before(lo) {
				out = append(out, fmt.Sprintf("exclusion: #%d %s was granted at %s..%s while #%d %s held (granted at %s..%s, hold ends no sooner than %s)",
					y.n, y.label, h.at(y.grantStart), h.at(y.end), x.n, x.label, h.at(x.grantStart), h.at(x.end), h.at(lo)))
			}
		}
	}
	for _, a := range h.attempts {
		if a.dead || a.joinAt.IsZero() {
			continue
		}
		left := never
		switch {
		case a.granted:
			left = a.grantStart
		case !a.end.IsZero() || !a.leftFrom.IsZero():
			left = a.leftFrom
		}
		left = minTime(left, h.protectedUntil(a))
		for _, b := range holds {
			if b != a && a.joinAt.Before(b.start) && b.end.Before(left) {
				out = append(out, fmt.Sprintf("FIFO: #%d %s was granted at %s while #%d %s, queued at %s before it started at %s, still waited",
					b.n, b.label, h.at(b.end), a.n, a.label, h.at(a.joinAt), h.at(b.start)))
			}
		}
	}
	free, dead, lease := h.freeFor(now)
	for _, w := range h.attempts {
		f, ok := free[w]
		if w.dead || !ok {
			continue
		}
		bound := livenessBound(lease[w], h.grace, dead[w])
		var waited time.Duration
		var how string
		switch {
		case w.granted:
			waited, how = w.grantStart.Sub(f), "was granted"
		case !w.end.IsZero() || !w.leftFrom.IsZero():
			waited, how = w.leftFrom.Sub(f), "gave up"
		default:
			waited, how = now.Sub(f), "still waits"
		}
		if p := h.protectedUntil(w); f.Add(waited).After(p) {
			waited = p.Sub(f) // it may have been pruned by its slot since
		}
		if waited > bound {
			out = append(out, fmt.Sprintf("liveness: #%d %s %s %.3fs after the lock was free for it at %s; the bound is %v (last lease %v, grace %v, %d dead ahead)",
				w.n, w.label, how, waited.Seconds(), h.at(f), bound, lease[w], max(h.grace, 0), dead[w]))
		}
	}
	return out
}

// deadline is when the first live waiter still waiting must have the lock
// by (never when the lock is not yet free for it), and that waiter.
func (h *history) deadline(now time.Time) (time.Time, *attempt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	free, dead, lease := h.freeFor(now)
	for _, w := range h.attempts {
		if w.dead || w.joinAt.IsZero() || !w.end.IsZero() || !w.leftFrom.IsZero() {
			continue
		}
		f, ok := free[w]
		if !ok {
			return never, w
		}
		return f.Add(livenessBound(lease[w], h.grace, dead[w])), w
	}
	return never, nil
}

// String is the log, for failure messages.
func (h *history) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.log, "\n")
}

// Attempts are marked in the context of their calls, so that the reply hook
// knows whose reply it sees.
type attemptKey struct{}

func withAttempt(ctx context.Context, a *attempt) context.Context {
	return context.WithValue(ctx, attemptKey{}, a)
}

// replyHook is a go-redis hook that times the scripts run on behalf of an
// attempt and reads their replies: "OK" or {-1, token} is a grant, an integer from a
// waiting acquisition's first script call (before any grant) means it is
// queued.
type replyHook struct{ h *history }

func (r replyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r replyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (r replyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a, _ := ctx.Value(attemptKey{}).(*attempt)
		if _, isScript := wire.ScriptCall(cmd); a == nil || !isScript {
			return next(ctx, cmd)
		}
		start := time.Now()
		err := next(ctx, cmd)
		end := time.Now()
		c, ok := cmd.(*redis.Cmd)
		if !ok || err != nil {
			return err
		}
		switch v := c.Val().(type) {
		case string:
			if v == "OK" {
				r.h.granting(a, start)
			}
		case []any: // a fair grant with its fencing token: {-1, token}
			if len(v) == 2 && v[1] != int64(-1) {
				r.h.granting(a, start)
			}
		case int64:
			r.h.queued(a, start, end)
		}
		return err
	}
}

// waitJoined waits until a is queued or its call returned, up to d; it
// reports false when neither happened.
func (h *history) waitJoined(a *attempt, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		h.mu.Lock()
		ok := !a.joinAt.IsZero() || !a.end.IsZero()
		h.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Microsecond)
	}
}

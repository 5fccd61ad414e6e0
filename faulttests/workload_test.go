package faulttests

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
)

// LockSpec is one lock of a workload: an id (the name is Env.LockName(id))
// and its kind; one engine per name.
type LockSpec struct {
	ID   string
	Kind LockKind
	Pool int // a semaphore's permits (default SemPoolDefault)
}

// SemPoolDefault is a workload semaphore's pool unless its LockSpec says.
const SemPoolDefault = 3

// Workload is the random workload's shape.
type Workload struct {
	Seed    uint64
	Clients int
	Workers int // goroutines per client, each with its own handle per lock
	Locks   []LockSpec
	MaxHold time.Duration // hold for a random time up to this
	// MaxCtx bounds the random ctx deadline of each call.
	MaxCtx time.Duration
}

// run is a running workload.
type run struct {
	e     *Env
	w     Workload
	stop  chan struct{} // closed: workers finish what they do and return
	final chan struct{} // closed: watchers stop
	wg    sync.WaitGroup
	watch sync.WaitGroup
}

// Start starts the workload's clients and workers.
func (e *Env) Start(w Workload) *run {
	r := &run{e: e, w: w, stop: make(chan struct{}), final: make(chan struct{})}
	for _, l := range w.Locks {
		if l.Kind.Semaphore() {
			pool := l.Pool
			if pool == 0 {
				pool = SemPoolDefault
			}
			e.SemPool(l.ID, l.Kind, pool)
		}
	}
	for i := 0; i < w.Clients; i++ {
		c := e.NewClient()
		for k := 0; k < w.Workers; k++ {
			hs := make([]*Handle, len(w.Locks))
			for j, l := range w.Locks {
				hs[j] = c.Handle(l.ID, l.Kind)
			}
			rng := rand.New(rand.NewPCG(w.Seed, uint64(i*1000+k)))
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.worker(c, hs, rng)
			}()
		}
	}
	return r
}

// Finish closes every client while the workers still run (checking what
// Close promises), waits for the workers, and checks for leftovers.
func (r *run) Finish() {
	var cw sync.WaitGroup
	for _, c := range r.e.Clients() {
		if c.closed.Load() {
			continue
		}
		cw.Add(1)
		go func() { defer cw.Done(); c.Close() }()
	}
	cw.Wait()
	close(r.stop)
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(callBound(r.w.MaxCtx) + 10*time.Second):
		r.e.H.Problem(Violation{"deadline", "", r.e.H.Now(), "workers still in a call long after every client was closed (see the calls that never returned)"})
	}
	time.Sleep(DoneTolerance)
	close(r.final)
	r.watch.Wait()
	r.e.probes.Wait()
	for _, v := range r.e.CheckLeftovers() {
		r.e.H.Problem(v)
	}
}

func (r *run) stopped(c *Client) bool {
	select {
	case <-r.stop:
		return true
	default:
		return !c.Live()
	}
}

func (r *run) sleep(c *Client, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.stop:
	}
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

func (r *run) worker(c *Client, hs []*Handle, rng *rand.Rand) {
	for !r.stopped(c) {
		h := hs[rng.IntN(len(hs))]
		if h.Sem != nil {
			r.semOp(h, rng)
		} else if h.Kind == SeatsVenue {
			r.seatsOp(h, rng)
		} else {
			r.op(h, rng)
		}
		if c.dead.Load() {
			return // a dead client's handles are abandoned
		}
		r.sleep(c, between(rng, 0, 100*time.Millisecond))
	}
}

// callCtx makes a call's context: a random deadline, and sometimes a
// cancel at a random moment before it. It returns the ctx's end since now.
func (r *run) callCtx(rng *rand.Rand) (context.Context, context.CancelFunc, time.Duration) {
	d := between(rng, time.Second, r.w.MaxCtx)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	end := d
	if rng.Float64() < 0.2 {
		at := between(rng, 100*time.Millisecond, d)
		t := time.AfterFunc(at, cancel)
		end = at
		return ctx, func() { t.Stop(); cancel() }, end
	}
	return ctx, cancel, end
}

func errText(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	return err.Error(), errors.Is(err, fairlock.ErrClosed)
}

// call runs f as a recorded call.
func (r *run) call(h *Handle, op string, wait, reentry bool, lease time.Duration, rng *rand.Rand, f func(ctx context.Context, c *Call) (bool, error)) (*Call, bool) {
	ctx, cancel, ctxEnd := r.callCtx(rng)
	defer cancel()
	if lease > 0 {
		op += "[lease " + lease.Round(time.Millisecond).String() + "]"
	}
	c := r.e.H.BeginCall(Call{Client: h.Client.ID, Owner: h.L.Owner(), Lock: h.Lock, Op: op, Wait: wait, Reentry: reentry, Lease: lease, Start: r.e.H.Now(), CtxEnd: ctxEnd})
	ok, err := f(ctx, c)
	s, closed := errText(err)
	r.e.H.EndCall(c, ok && err == nil, s, closed)
	return c, ok && err == nil
}

// positions records the queue positions a fair acquisition reports in its
// call (CheckPositions).
func (r *run) positions(c *Call) func(fairlock.Position) {
	return func(p fairlock.Position) {
		r.e.H.AddPosition(c, PositionReport{At: r.e.H.At(p.At), Ahead: p.Ahead, Joined: p.Joined, ETA: p.ETA})
	}
}

func (r *run) op(h *Handle, rng *rand.Rand) {
	l := h.L
	lease := time.Duration(0)
	p := rng.Float64()
	var c *Call
	var ok bool
	fm, isFair := l.(*fair.Mutex)
	switch {
	case p < 0.30 && isFair && rng.IntN(2) == 0:
		// the fair lock's Lock, asking for its queue position
		c, ok = r.call(h, "Lock[position]", true, false, 0, rng, func(ctx context.Context, c *Call) (bool, error) {
			return fm.Acquire(ctx, fair.AcquireOptions{Wait: fair.Forever, Position: r.positions(c)})
		})
	case p < 0.30:
		c, ok = r.call(h, "Lock", true, false, 0, rng, func(ctx context.Context, _ *Call) (bool, error) { return true, l.Lock(ctx) })
	case p < 0.45:
		lease = between(rng, ExplicitLeaseMin, ExplicitLeaseMax)
		c, ok = r.call(h, "LockWithLease", true, false, lease, rng, func(ctx context.Context, _ *Call) (bool, error) { return true, l.LockWithLease(ctx, lease) })
	case p < 0.60:
		c, ok = r.call(h, "TryLock", false, false, 0, rng, func(ctx context.Context, _ *Call) (bool, error) { return l.TryLock(ctx) })
	case p < 0.98:
		wait := between(rng, 300*time.Millisecond, 4*time.Second)
		if rng.IntN(2) == 0 {
			lease = between(rng, ExplicitLeaseMin, ExplicitLeaseMax)
		}
		if isFair && rng.IntN(2) == 0 {
			// TryLockFor with its queue position: its wait is its slot
			c, ok = r.call(h, "TryLockFor[position, wait "+wait.Round(time.Millisecond).String()+"]", true, false, lease, rng, func(ctx context.Context, c *Call) (bool, error) {
				return fm.Acquire(ctx, fair.AcquireOptions{Wait: wait, Lease: lease, Slot: wait, Position: r.positions(c)})
			})
			break
		}
		c, ok = r.call(h, "TryLockFor[wait "+wait.Round(time.Millisecond).String()+"]", true, false, lease, rng, func(ctx context.Context, _ *Call) (bool, error) { return l.TryLockFor(ctx, wait, lease) })
	default:
		r.call(h, "ForceUnlock", false, false, 0, rng, func(ctx context.Context, _ *Call) (bool, error) { return l.ForceUnlock(ctx) })
		return
	}
	if ok {
		r.hold(h, c, lease, rng)
	}
}

// hold is one critical section: it records the window, uses the resource,
// maybe re-enters, and unlocks (or abandons an explicit lease, or stops
// dead when its client dies).
func (r *run) hold(h *Handle, c *Call, lease time.Duration, rng *rand.Rand) {
	e, l := r.e, h.L
	tr := e.track(h, c, lease, r.final, &r.watch)
	done := l.Done()

	// the resource: read now, write value+1 at the end if still held
	read := e.H.Now()
	val := e.readResource(h.Lock)

	reentered := false
	if rng.Float64() < 0.2 && !tr.lost() {
		_, reentered = r.call(h, "Lock(re-entry)", true, true, 0, rng, func(ctx context.Context, _ *Call) (bool, error) { return true, l.Lock(ctx) })
	}
	abandon := lease > 0 && rng.Float64() < 0.15 // let the explicit lease run out
	until := time.Now().Add(between(rng, 0, r.w.MaxHold))
	if abandon {
		until = time.Now().Add(lease + 2*time.Second)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(until) {
		if h.Client.dead.Load() {
			return // died holding: no unlock, no write
		}
		select {
		case <-done:
			until = time.Now()
		case <-r.stop:
			until = time.Now()
		case <-tick.C:
		}
	}
	op := ResourceOp{Lock: h.Lock, Owner: l.Owner(), Client: h.Client.ID, Read: read, Value: val}
	if !tr.lost() {
		e.writeResource(h.Lock, val+1)
		op.Wrote, op.Write = true, e.H.Now()
	}
	e.H.AddOp(op)
	if abandon && tr.lost() {
		return // the watcher sees Done close
	}
	if reentered {
		r.call(h, "Unlock(inner)", false, false, 0, rng, func(ctx context.Context, _ *Call) (bool, error) { return true, l.Unlock(ctx) })
	}
	tr.unlocking()
	r.call(h, "Unlock", false, false, 0, rng, func(ctx context.Context, _ *Call) (bool, error) { return true, l.Unlock(ctx) })
}

// held is what a tracker watches of a hold: a lock handle, or a semaphore
// Permit (permitView).
type held interface {
	Done() <-chan struct{}
	Err() error
	Owner() string
}

// tracker follows one hold's believed-valid window.
type tracker struct {
	e    *Env
	l    held
	w    *Window
	stop chan struct{}
	once sync.Once
}

// track starts recording the window of the hold that call c acquired: a
// watcher goroutine samples ValidUntil (when the lock type has it) every
// 50 ms and records when Done closes, until unlocking or final.
func (e *Env) track(h *Handle, c *Call, lease time.Duration, final <-chan struct{}, wg *sync.WaitGroup) *tracker {
	return e.trackHeld(h, h.L, c, lease, Window{}, final, wg)
}

// trackHeld is track for any hold l of h; the window starts as proto
// (Permits, Token) with the rest filled in.
func (e *Env) trackHeld(h *Handle, l held, c *Call, lease time.Duration, proto Window, final <-chan struct{}, wg *sync.WaitGroup) *tracker {
	winLease := lease
	if lease == 0 {
		winLease = WatchdogLease
	}
	tr := &tracker{e: e, l: l, stop: make(chan struct{})}
	proto.Owner, proto.Client, proto.Lock, proto.CallID, proto.Lease = l.Owner(), h.Client.ID, h.Lock, c.ID, winLease
	proto.Start, proto.UnlockAt, proto.DoneAt, proto.ValidUntil = c.End, Never, Never, Never
	tr.w = e.H.AddWindow(proto)
	done := l.Done()
	tr.sample()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				at := e.H.Now()
				err := l.Err()
				s, closed := errText(err)
				if err == nil {
					s = "nil"
				}
				e.H.Update(func() { tr.w.DoneAt, tr.w.DoneErr, tr.w.DoneClosed = at, s, closed })
				return
			case <-tick.C:
				tr.sample()
			case <-tr.stop:
				return
			case <-final:
				return
			}
		}
	}()
	return tr
}

// sample records the hold's ValidUntil, if the lock type has it.
func (tr *tracker) sample() {
	if v, ok := any(tr.l).(validUntiler); ok {
		if t := v.ValidUntil(); !t.IsZero() {
			at := tr.e.H.At(t)
			tr.e.H.Update(func() { tr.w.ValidUntil = at })
		}
	}
}

// lost reports whether the holder knows it no longer holds the lock: Done
// closed, or ValidUntil passed.
func (tr *tracker) lost() bool {
	select {
	case <-tr.l.Done():
		return true
	default:
	}
	if v, ok := any(tr.l).(validUntiler); ok {
		t := v.ValidUntil()
		return t.IsZero() || !time.Now().Before(t)
	}
	return false
}

// unlocking ends the window now: the final Unlock is about to be called.
func (tr *tracker) unlocking() {
	at := tr.e.H.Now()
	tr.e.H.Update(func() { tr.w.UnlockAt = at })
	tr.once.Do(func() { close(tr.stop) })
}

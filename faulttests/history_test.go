package faulttests

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// Never is the end of something that had not ended when the run stopped.
const Never = time.Duration(math.MaxInt64)

// LockKind is the kind of a lock name (one engine per name).
type LockKind string

// The kinds of lock the workload uses.
const (
	Reentrant    LockKind = "reentrant"
	FairRedisson LockKind = "fair/redisson"
	FairScalable LockKind = "fair/scalable"
)

// Fair reports whether the lock has a FIFO queue.
func (k LockKind) Fair() bool { return k == FairRedisson || k == FairScalable }

// FaultKind names a fault (or a client's close, which the checkers treat
// alike: something that ends what a client may promise).
type FaultKind string

// The faults the suite fires.
const (
	FLatency     FaultKind = "latency"      // one client: every byte delayed
	FStall       FaultKind = "stall"        // one client: requests held back, then delivered
	FReset       FaultKind = "reset"        // one client: its connections reset
	FSkew        FaultKind = "skew"         // one client: wall clock shifted (its injected SkewedClock)
	FDead        FaultKind = "dead"         // one client: network cut for ever, handles abandoned
	FClose       FaultKind = "close"        // one client: Client.Close while it holds and waits
	FPubSubKill  FaultKind = "pubsub-kill"  // server: CLIENT KILL TYPE pubsub
	FClientPause FaultKind = "client-pause" // server: CLIENT PAUSE ALL
	FSigStop     FaultKind = "sigstop"      // server: process stopped (SIGSTOP) then continued
	FRestart     FaultKind = "restart"      // server: restarted empty (no persistence): data lost
	FFailover    FaultKind = "failover"     // a primary killed, its replica promoted: may lose writes
)

// global reports a fault that hits every client.
func (k FaultKind) global() bool {
	switch k {
	case FPubSubKill, FClientPause, FSigStop, FRestart, FFailover, FPauseWrite, FStallAll:
		return true
	}
	return false
}

// dataLoss reports a fault after which two owners may both believe they
// hold a lock (the exclusion exception).
func (k FaultKind) dataLoss() bool { return k == FRestart || k == FFailover }

// breaksOrder reports a server-wide fault during which FIFO order is not
// promised (calls time out with unknown outcome, or the queue is lost).
func (k FaultKind) breaksOrder() bool {
	return k == FClientPause || k == FSigStop || k == FRestart || k == FFailover
}

// recovery is the time, after a server-wide fault ends, that the service
// takes to be back (added to the liveness bound).
func (k FaultKind) recovery() time.Duration {
	if k == FFailover {
		return FailoverRecovery
	}
	return 0
}

// Fault is one fault fired during a run. Client is -1 for a server-wide
// fault. End is Never for a client that died.
type Fault struct {
	Kind       FaultKind
	Client     int
	Start, End time.Duration
	Detail     string
	Server     int // a RedLock test's fault on one of its servers: its number (1..3); 0: not one
}

func (f Fault) String() string {
	who := "server"
	if f.Client >= 0 {
		who = fmt.Sprintf("client c%d", f.Client)
	}
	end := "for ever"
	if f.End != Never {
		end = "until " + ts(f.End)
	}
	return fmt.Sprintf("FAULT %s on %s %s %s", f.Kind, who, end, f.Detail)
}

// Call is one call of the public API.
type Call struct {
	ID      int
	Client  int
	Owner   string
	Lock    string
	Op      string // Lock, LockWithLease, TryLock, TryLockFor, Unlock, ForceUnlock, Lock(re-entry)...
	Wait    bool   // the call may wait for the lock (joins the fair queue)
	Reentry bool   // made while the handle already held the lock
	Lease   time.Duration
	Start   time.Duration
	End     time.Duration // Never: did not return
	// CtxEnd is when the call's context ended, since Start: its deadline,
	// or the moment it was cancelled if earlier. Never: no deadline.
	CtxEnd   time.Duration
	Acquired bool     // an acquisition that returned holding the lock; ForceUnlock: a lock was deleted
	Err      string   // "" when nil
	Closed   bool     // the error matches fairlock.ErrClosed
	Permits  int      // a semaphore acquisition's ask (0: a lock's call)
	Seats    []string // a seats call's seats (Lock is the venue)
	// Positions are the queue positions a fair acquisition reported
	// (fair.AcquireOptions.Position), in order (checkers_position_test.go).
	Positions []PositionReport
}

// PositionReport is one position a waiting fair acquisition reported.
type PositionReport struct {
	At     time.Duration // the attempt that read it was sent
	Ahead  int
	Joined bool
	ETA    time.Duration
}

func (p PositionReport) String() string {
	j := ""
	if p.Joined {
		j = " joined"
	}
	return fmt.Sprintf("%s:%d%s", ts(p.At), p.Ahead, j)
}

func (c Call) String() string {
	res := "ok"
	switch {
	case c.End == Never:
		res = "NEVER RETURNED"
	case c.Err != "":
		res = "err: " + c.Err
	case !strings.HasPrefix(c.Op, "Unlock") && !c.Acquired:
		res = "false"
	}
	ctx := "no deadline"
	if c.CtxEnd != Never {
		ctx = "ctx ends +" + c.CtxEnd.Round(time.Millisecond).String()
	}
	op := c.Op
	if c.Permits > 0 {
		op = fmt.Sprintf("%s{%d}", op, c.Permits)
	}
	if len(c.Seats) > 0 {
		op = fmt.Sprintf("%s%v", op, seatNums(c.Seats))
	}
	return fmt.Sprintf("#%d c%d %s %s(%s) [%s] -> %s", c.ID, c.Client, short(c.Owner), op, c.Lock, ctx, res)
}

// Window is one hold's believed-valid window: from its acquisition
// returning to the earliest of its final Unlock call's start, the moment
// Done() was seen closed, and the last ValidUntil sampled while held.
type Window struct {
	Owner      string
	Client     int
	Lock       string
	CallID     int
	Lease      time.Duration // the hold's lease (the watchdog lease when renewed)
	Start      time.Duration
	UnlockAt   time.Duration // Never: no final Unlock
	DoneAt     time.Duration // Never: Done not seen closed
	DoneErr    string        // Err() when Done was seen closed
	DoneClosed bool          // DoneErr matches fairlock.ErrClosed
	ValidUntil time.Duration // last ValidUntil sampled while held; Never: not available
	Permits    int           // a semaphore hold's permits (0: a lock's hold)
	Token      int64         // the acquisition's fencing token (0: none recorded)
	Granted    []bool        // a RedLock hold's members that granted, per server (redlock_test.go)
}

// End is where the window ends, and by what.
func (w Window) End() (time.Duration, string) {
	end, by := w.UnlockAt, "unlock"
	if w.DoneAt < end {
		end, by = w.DoneAt, "done"
	}
	if w.ValidUntil < end {
		end, by = w.ValidUntil, "valid-until"
	}
	if end == Never {
		by = "never"
	}
	return end, by
}

// tolerance is how much of an overlap after this window's end is not
// counted: DoneTolerance where the end was seen through Done without a
// ValidUntil, nothing otherwise.
func (w Window) tolerance() time.Duration {
	if _, by := w.End(); by == "done" && w.ValidUntil == Never {
		return DoneTolerance
	}
	return 0
}

func (w Window) String() string {
	end, by := w.End()
	e := "open"
	if end != Never {
		e = ts(end)
	}
	extra := ""
	if w.DoneErr != "" {
		extra = " (Err: " + w.DoneErr + ")"
	}
	if w.Permits > 0 {
		extra += fmt.Sprintf(" [%d permits, token %d]", w.Permits, w.Token)
	}
	return fmt.Sprintf("HOLD c%d %s on %s from %s to %s by %s, lease %v%s (call #%d)", w.Client, short(w.Owner), w.Lock, ts(w.Start), e, by, w.Lease, extra, w.CallID)
}

// Join is a fair-queue join: the first script call of an acquisition that
// replied "queued", seen by a hook on the client's Redis connection.
type Join struct {
	Owner      string
	Lock       string
	Start, End time.Duration
}

// ScriptNote is a fair lock's give-up script call (acquireFailed), or a
// try-lock-wait script call that failed: shown in a violation's history
// (how a waiter left, or an attempt whose outcome is unknown).
type ScriptNote struct {
	Owner, Lock, What string
	Start, End        time.Duration
	Err               string // "" when it succeeded
}

// ResourceOp is one use of the resource a holder protects with the lock: a
// read of the lock's counter at Read and, if the holder still believed it
// held the lock at the end, a write of value+1 at Write.
type ResourceOp struct {
	Lock, Owner string
	Client      int
	Read        time.Duration
	Value       int
	Wrote       bool
	Write       time.Duration
}

// CloseEvent is one Client.Close call, with what each of the client's
// handles showed right after it returned (by owner).
type CloseEvent struct {
	Client     int
	Start, End time.Duration
	Handles    map[string]HandleState
}

// HandleState is a handle's Done and Err as seen at one moment.
type HandleState struct {
	DoneClosed bool
	Err        string
	ErrClosed  bool // Err matches fairlock.ErrClosed
}

// Violation is one broken promise.
type Violation struct {
	Check string
	Lock  string
	At    time.Duration
	Msg   string
}

func (v Violation) String() string {
	l := ""
	if v.Lock != "" {
		l = " on " + v.Lock
	}
	return fmt.Sprintf("[%s]%s at %s: %s", v.Check, l, ts(v.At), v.Msg)
}

// History is everything a run recorded, on one monotonic clock (time since
// the run's start).
type History struct {
	base time.Time

	mu       sync.Mutex
	Locks    map[string]LockKind
	Pools    map[string]int // a semaphore's permits (checkers_sem_test.go)
	Calls    []*Call
	Windows  []*Window
	Joins    []Join
	Scripts  []ScriptNote // give-ups and failed tries of the fair locks (shown with a violation)
	Faults   []Fault
	Closes   []CloseEvent
	Ops      []ResourceOp
	Probes   []SemProbe  // reads of a dead holder's semaphore lease (checkers_sem_test.go)
	Problems []Violation // found while running (Close semantics)
}

// NewHistory starts a history whose clock reads 0 now.
func NewHistory() *History {
	return &History{base: time.Now(), Locks: map[string]LockKind{}, Pools: map[string]int{}}
}

// Now is the history's clock.
func (h *History) Now() time.Duration { return time.Since(h.base) }

// At converts an instant (with its monotonic reading) to the clock.
func (h *History) At(t time.Time) time.Duration { return t.Sub(h.base) }

// BeginCall records a call's start and returns it; finish it with EndCall.
func (h *History) BeginCall(c Call) *Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.ID = len(h.Calls) + 1
	c.End = Never
	cc := &c
	h.Calls = append(h.Calls, cc)
	return cc
}

// AddPosition records a position the call c reported.
func (h *History) AddPosition(c *Call, p PositionReport) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.Positions = append(c.Positions, p)
}

// EndCall records the call's end now.
func (h *History) EndCall(c *Call, acquired bool, err string, closed bool) {
	now := h.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	c.End, c.Acquired, c.Err, c.Closed = now, acquired, err, closed
}

// AddWindow records a new hold's window.
func (h *History) AddWindow(w Window) *Window {
	h.mu.Lock()
	defer h.mu.Unlock()
	ww := &w
	h.Windows = append(h.Windows, ww)
	return ww
}

// Update changes a recorded item under the history's lock.
func (h *History) Update(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
}

// AddJoin, AddFault, AddOp, AddClose and Problem append records.
func (h *History) AddJoin(j Join)         { h.Update(func() { h.Joins = append(h.Joins, j) }) }
func (h *History) AddScript(n ScriptNote) { h.Update(func() { h.Scripts = append(h.Scripts, n) }) }
func (h *History) AddOp(o ResourceOp)     { h.Update(func() { h.Ops = append(h.Ops, o) }) }
func (h *History) AddClose(c CloseEvent)  { h.Update(func() { h.Closes = append(h.Closes, c) }) }
func (h *History) Problem(v Violation)    { h.Update(func() { h.Problems = append(h.Problems, v) }) }

// AddFault records a fault and returns its index, for EndFault.
func (h *History) AddFault(f Fault) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Faults = append(h.Faults, f)
	return len(h.Faults) - 1
}

// EndFault sets the end of fault i to now.
func (h *History) EndFault(i int) {
	now := h.Now()
	h.Update(func() { h.Faults[i].End = now })
}

// ts formats a clock reading.
func ts(d time.Duration) string {
	if d == Never {
		return "never"
	}
	return fmt.Sprintf("%8.3fs", d.Seconds())
}

// short abbreviates an owner id "<uuid>:<thread>" to "<uuid[:6]>:<thread>".
func short(owner string) string {
	i := strings.LastIndexByte(owner, ':')
	if i < 6 {
		return owner
	}
	return owner[:6] + owner[i:]
}

// Timeline prints what happened on lock (every lock when "") and every
// fault, between from and to, one line per event, in time order.
func (h *History) Timeline(lock string, from, to time.Duration, maxLines int) string {
	type line struct {
		at  time.Duration
		txt string
	}
	var ls []line
	in := func(t time.Duration) bool { return t >= from && t <= to }
	add := func(t time.Duration, s string) {
		if in(t) {
			ls = append(ls, line{t, s})
		}
	}
	// a seat's history shows its venue's calls and joins too
	on := func(l string) bool {
		return lock == "" || l == lock || h.Locks[l] == SeatsVenue && strings.HasPrefix(lock, "{"+l+"}")
	}
	for _, c := range h.Calls {
		if !on(c.Lock) {
			continue
		}
		add(c.Start, "call   "+c.String())
		if c.End != Never {
			add(c.End, "return "+c.String())
		}
	}
	for _, w := range h.Windows {
		if !on(w.Lock) {
			continue
		}
		add(w.Start, "begin  "+w.String())
		if e, _ := w.End(); e != Never {
			add(e, "end    "+w.String())
		}
	}
	ix := newIndex(h)
	claimed := map[Join]bool{}
	for _, c := range h.Calls {
		if !on(c.Lock) || !c.Wait {
			continue
		}
		js := ix.joinsOf(c)
		if len(js) > 0 {
			add(js[0].End, fmt.Sprintf("joined %s queued in call #%d (script call %s..%s)", short(c.Owner), c.ID, ts(js[0].Start), ts(js[0].End)))
		}
		for _, j := range js {
			claimed[j] = true
		}
	}
	// a queued reply outside every call of its owner: a copy of an
	// attempt that ran after its call had returned
	for _, j := range h.Joins {
		if on(j.Lock) && !claimed[j] {
			add(j.End, fmt.Sprintf("joined %s outside any call of its own: a late copy (script call %s..%s)", short(j.Owner), ts(j.Start), ts(j.End)))
		}
	}
	for _, n := range h.Scripts {
		if !on(n.Lock) {
			continue
		}
		out := "ok"
		if n.Err != "" {
			out = "err: " + n.Err
		}
		add(n.End, fmt.Sprintf("script %s %s (script call %s..%s) -> %s", n.What, short(n.Owner), ts(n.Start), ts(n.End), out))
	}
	for _, f := range h.Faults {
		add(f.Start, "start  "+f.String())
		if f.End != Never {
			add(f.End, "stop   "+f.String())
		}
	}
	for _, c := range h.Closes {
		add(c.Start, fmt.Sprintf("close  c%d Client.Close called", c.Client))
		add(c.End, fmt.Sprintf("closed c%d Client.Close returned", c.Client))
	}
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].at < ls[j].at })
	var b strings.Builder
	skipped := 0
	if maxLines > 0 && len(ls) > maxLines {
		skipped = len(ls) - maxLines
		ls = ls[len(ls)-maxLines:]
	}
	if skipped > 0 {
		fmt.Fprintf(&b, "  ... %d earlier lines left out\n", skipped)
	}
	for _, l := range ls {
		fmt.Fprintf(&b, "  %s  %s\n", ts(l.at), l.txt)
	}
	return b.String()
}

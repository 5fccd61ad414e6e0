package faulttests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/multi"
)

// The fair multi-seat hold in the fault suite (issue 22, "How it is
// checked"): a workload LockSpec of kind SeatsVenue is a venue of
// SeatsPerVenue seats ("{<tag>-<id>}:1".."{<tag>-<id>}:6", one hash tag,
// so one slot), and its workers ask for 1-4 random seats at a time
// (multi.NewSeats per request) with Acquire or TryAcquire, with the
// watchdog or an explicit lease. In the history:
//
//   - the venue is a name of kind SeatsVenue: every acquisition and
//     release is a Call on it, with Call.Seats the seats asked for;
//   - each seat is a name of kind Seat: a granted set is one Window on
//     each of its seats (same owner, call, token and end), so the lock
//     exclusion check (CheckExclusion) runs per seat as it is;
//   - a join is the first reply "queued" ({0, sleep} to a call with
//     ARGV[6] = 1) of seats_acquire.lua to the acquisition, one Join on
//     the venue, seen by the join hook through a ctx value (seatsAttempt),
//     which also learns the acquisition's owner (ARGV[2]: a fresh owner
//     per acquisition);
//   - a client that dies has each of its holds (and each acquisition in
//     flight) read on the server a lease later, as the semaphores'
//     (SemProbe on the venue's leases zset): a dead holder's seats return
//     within its lease.
//
// The seats checks are in checkers_seats_test.go.

// The multi-seat hold's kinds of name.
const (
	SeatsVenue LockKind = "seats/venue" // a venue: its calls
	Seat       LockKind = "seats/seat"  // one seat: its windows
)

// SeatsPerVenue is how many seats a workload venue has; a request names
// 1..SeatsMaxAsk of them.
const (
	SeatsPerVenue = 6
	SeatsMaxAsk   = 4
)

// SeatNames are the seats of venue id: "{<tag>-<id>}:1" and so on.
func (e *Env) SeatNames(id string) []string {
	out := make([]string, SeatsPerVenue)
	for i := range out {
		out[i] = fmt.Sprintf("{%s-%s}:%d", e.Tag, id, i+1)
	}
	return out
}

// VenueName is the venue's name in the history: its hash tag.
func (e *Env) VenueName(id string) string { return e.Tag + "-" + id }

// seatsHandle makes c's handle on venue id (one per worker; each request
// makes its own multi.Seats).
func (c *Client) seatsHandle(id string) *Handle {
	e := c.env
	names := e.SeatNames(id)
	venue := e.VenueName(id)
	e.H.Update(func() {
		e.H.Locks[venue] = SeatsVenue
		for _, n := range names {
			e.H.Locks[n] = Seat
		}
	})
	return &Handle{Client: c, Lock: venue, Kind: SeatsVenue, SeatNames: names}
}

// seatsAttemptKey carries a *seatsAttempt in an acquisition's ctx, to the
// join hook.
type seatsAttemptKey struct{}

// seatsAttempt is one seats acquisition of a client: its call, its owner
// (from the script's arguments) and its SeatHold once granted.
type seatsAttempt struct {
	h     *Handle
	call  *Call
	seats []string
	lease time.Duration // as asked (0: the watchdog's)
	mu    sync.Mutex
	owner string
	hold  *multi.SeatHold
	trs   []*tracker // one per seat
}

func (a *seatsAttempt) setOwner(o string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.owner == "" {
		a.owner = o
	}
}

// Owner is the acquisition's owner id ("" while unknown).
func (a *seatsAttempt) Owner() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.owner
}

// held is the grant as a tracker sees it, nil before it.
func (a *seatsAttempt) held() *seatsView {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hold == nil {
		return nil
	}
	return &seatsView{a.hold, a.owner}
}

// seatsView is a SeatHold as a held hold (Owner from the attempt).
type seatsView struct {
	p     *multi.SeatHold
	owner string
}

func (v *seatsView) Done() <-chan struct{} { return v.p.Done() }
func (v *seatsView) Err() error            { return v.p.Err() }
func (v *seatsView) Owner() string         { return v.owner }
func (v *seatsView) ValidUntil() time.Time { return v.p.ValidUntil() }

// seatsProcess is the join hook for a script call made by a seats
// acquisition (a in its ctx): a call of seats_acquire.lua names the
// owner (ARGV[2]); one that may queue (ARGV[6] = 1) and replied {0, sleep}
// is a queue join.
func (hk joinHook) seatsProcess(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook, a *seatsAttempt) error {
	args := cmd.Args()
	if len(args) < 3 {
		return next(ctx, cmd)
	}
	sha, _ := wire.ScriptCall(cmd)
	nk, _ := strconv.Atoi(fmt.Sprint(args[2]))
	hk.e.mu.Lock()
	ours := hk.e.seatsSHA[sha]
	hk.e.mu.Unlock()
	if !ours || 3+nk+6 > len(args) {
		return next(ctx, cmd)
	}
	argv := args[3+nk:]
	a.setOwner(fmt.Sprint(argv[1]))
	start := hk.e.H.Now()
	err := next(ctx, cmd)
	end := hk.e.H.Now()
	if err != nil || fmt.Sprint(argv[5]) != "1" {
		return err
	}
	if c, ok := cmd.(*redis.Cmd); ok {
		if v, ok := c.Val().([]any); ok && len(v) == 2 && v[0] == int64(0) {
			hk.e.H.AddJoin(Join{Owner: a.Owner(), Lock: a.h.Lock, Start: start, End: end})
		}
	}
	return err
}

// seatsAsk is a random request: 1..SeatsMaxAsk distinct seats of names, in
// a random order (multi.NewSeats sorts them).
func seatsAsk(rng *rand.Rand, names []string) []string {
	k := 1 + rng.IntN(min(SeatsMaxAsk, len(names)))
	out := make([]string, k)
	for i, j := range rng.Perm(len(names))[:k] {
		out[i] = names[j]
	}
	return out
}

// seatsOp is one seats operation of a worker: an acquisition of random
// seats and, when granted, a hold.
func (r *run) seatsOp(h *Handle, rng *rand.Rand) {
	seats := seatsAsk(rng, h.SeatNames)
	lease := time.Duration(0)
	if rng.IntN(3) == 0 {
		lease = between(rng, ExplicitLeaseMin, ExplicitLeaseMax)
	}
	ctx, cancel, ctxEnd := r.callCtx(rng)
	defer cancel()
	var a *seatsAttempt
	switch p := rng.Float64(); {
	case p < 0.4:
		a = r.e.seatsAcquire(ctx, h, seats, -1, lease, ctxEnd, r.final, &r.watch)
	case p < 0.55:
		a = r.e.seatsAcquire(ctx, h, seats, 0, lease, ctxEnd, r.final, &r.watch)
	default:
		a = r.e.seatsAcquire(ctx, h, seats, between(rng, 300*time.Millisecond, 4*time.Second), lease, ctxEnd, r.final, &r.watch)
	}
	cancel()
	if a != nil {
		r.seatsHold(a, rng)
	}
}

// seatsAcquire records one acquisition of seats by h: Acquire when wait <
// 0, TryAcquire otherwise; ctx ends ctxEnd after now. A grant's windows
// (one per seat) are tracked until final; it returns the attempt when
// granted.
func (e *Env) seatsAcquire(ctx context.Context, h *Handle, seats []string, wait, lease, ctxEnd time.Duration, final <-chan struct{}, wg *sync.WaitGroup) *seatsAttempt {
	cl := h.Client
	s, err := multi.NewSeats(cl.C, seats...)
	if err != nil {
		e.T.Fatalf("NewSeats %v: %v", seats, err)
	}
	if s.Mode() != multi.OneVenue {
		e.T.Fatalf("NewSeats %v: mode %v, want OneVenue (one script, one total order)", seats, s.Mode())
	}
	op, queues := "Acquire", true
	f := func(ctx context.Context) (*multi.SeatHold, error) { return s.Acquire(ctx, lease) }
	if wait >= 0 {
		op, queues = "TryAcquire[wait "+wait.Round(time.Millisecond).String()+"]", wait > 0
		f = func(ctx context.Context) (*multi.SeatHold, error) { return s.TryAcquire(ctx, wait, lease) }
	}
	if lease > 0 {
		op += "[lease " + lease.Round(time.Millisecond).String() + "]"
	}
	sorted := slices.Clone(seats)
	slices.Sort(sorted)
	c := e.H.BeginCall(Call{Client: cl.ID, Lock: h.Lock, Op: op, Wait: queues, Lease: lease, Seats: sorted, Start: e.H.Now(), CtxEnd: ctxEnd})
	a := &seatsAttempt{h: h, call: c, seats: sorted, lease: lease}
	cl.hmu.Lock()
	if cl.seats == nil {
		cl.seats = map[*seatsAttempt]bool{}
	}
	cl.seats[a] = true
	cl.hmu.Unlock()
	p, err := f(context.WithValue(ctx, seatsAttemptKey{}, a))
	a.setOwner(fmt.Sprintf("seats-call-%d", c.ID)) // not seen: unique anyway
	a.mu.Lock()
	a.hold = p
	a.mu.Unlock()
	e.H.Update(func() { c.Owner = a.owner })
	str, closed := errText(err)
	e.H.EndCall(c, p != nil && err == nil, str, closed)
	if p == nil || err != nil {
		cl.forgetSeats(a)
		return nil
	}
	v := a.held()
	for _, seat := range sorted {
		sh := &Handle{Client: cl, Lock: seat, Kind: Seat}
		a.trs = append(a.trs, e.trackHeld(sh, v, c, lease, Window{Token: p.Token()}, final, wg))
	}
	return a
}

func (c *Client) forgetSeats(a *seatsAttempt) {
	c.hmu.Lock()
	delete(c.seats, a)
	c.hmu.Unlock()
}

// unlocking ends every window of the grant now.
func (a *seatsAttempt) unlocking() {
	for _, tr := range a.trs {
		tr.unlocking()
	}
}

// seatsRelease releases a's seats, recorded as a call on the venue.
func (e *Env) seatsRelease(ctx context.Context, a *seatsAttempt, ctxEnd time.Duration) error {
	a.unlocking()
	v := a.held()
	c := e.H.BeginCall(Call{Client: a.h.Client.ID, Owner: v.owner, Lock: a.h.Lock, Op: "Release", Seats: a.seats, Start: e.H.Now(), CtxEnd: ctxEnd})
	err := v.p.Release(ctx)
	s, closed := errText(err)
	e.H.EndCall(c, false, s, closed)
	a.h.Client.forgetSeats(a)
	return err
}

// seatsHold holds a's seats a random time (or lets an explicit lease run
// out), then releases them; a client that dies meanwhile abandons them.
func (r *run) seatsHold(a *seatsAttempt, rng *rand.Rand) {
	v := a.held()
	abandon := a.lease > 0 && rng.Float64() < 0.15
	until := time.Now().Add(between(rng, 0, r.w.MaxHold))
	if abandon {
		until = time.Now().Add(a.lease + 2*time.Second)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(until) {
		if a.h.Client.dead.Load() {
			return // died holding: no release
		}
		select {
		case <-v.Done():
			until = time.Now()
		case <-r.stop:
			until = time.Now()
		case <-tick.C:
		}
	}
	if abandon && a.trs[0].lost() {
		a.h.Client.forgetSeats(a)
		return // the watchers see Done close
	}
	ctx, cancel, ctxEnd := r.callCtx(rng)
	defer cancel()
	_ = r.e.seatsRelease(ctx, a, ctxEnd)
}

// seatsDied schedules a probe of every hold (and acquisition in flight
// whose owner is known) of c, which died at died: a lease plus DeadSlack
// later, the hold's lease end is read on the server (the venue's leases
// zset).
func (e *Env) seatsDied(c *Client, died time.Duration) {
	c.hmu.Lock()
	var as []*seatsAttempt
	for a := range c.seats {
		as = append(as, a)
	}
	c.hmu.Unlock()
	for _, a := range as {
		owner := a.Owner()
		if owner == "" {
			continue // never sent
		}
		lease := a.lease
		if lease == 0 {
			lease = WatchdogLease
		}
		key := wire.SeatsKeysFor(a.h.Lock).Leases
		e.probe(SemProbe{Lock: a.h.Lock, Owner: owner, Client: c.ID, Lease: lease, Died: died, LeaseEnd: -1}, key, []any{owner})
	}
}

// seatsLeftover lists the owners recorded in a seats key k ("" and false
// when k is not one of the venue's queue or hold keys).
func seatsLeftover(ctx context.Context, p *redis.Client, k string) ([]string, bool) {
	switch {
	case strings.HasPrefix(k, "fairlock_seats:") || strings.HasPrefix(k, "fairlock_seats_req:") || strings.HasPrefix(k, "fairlock_seats_grace:"):
		o, _ := p.HKeys(ctx, k).Result()
		return o, true
	case strings.HasPrefix(k, "fairlock_seats_seat:"):
		o, _ := p.HVals(ctx, k).Result()
		return o, true
	case strings.HasPrefix(k, "fairlock_seats_lease:"):
		o, _ := p.ZRange(ctx, k, 0, -1).Result()
		return o, true
	case strings.HasPrefix(k, "fairlock_seats_queue:"):
		fs, _ := p.HKeys(ctx, k).Result()
		var o []string
		for _, f := range fs {
			if rest, ok := strings.CutPrefix(f, "n|"); ok {
				o = append(o, strings.Split(rest, "|")[0])
			}
		}
		return o, true
	}
	return nil, false
}

// seatsVacuity fails t when a workload venue saw too little for the seats
// checks to mean anything, and logs what they had to work on.
func seatsVacuity(t interface {
	Helper()
	Logf(string, ...any)
	Errorf(string, ...any)
}, h *History, w Workload, e *Env) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range w.Locks {
		if l.Kind != SeatsVenue {
			continue
		}
		venue := e.VenueName(l.ID)
		grants, multiSeat, waits, joins, probes := 0, 0, 0, 0, 0
		for _, c := range h.Calls {
			if c.Lock != venue || c.Op == "Release" {
				continue
			}
			if c.Acquired {
				grants++
				if len(c.Seats) > 1 {
					multiSeat++
				}
			}
			if c.Wait {
				waits++
			}
		}
		for _, j := range h.Joins {
			if j.Lock == venue {
				joins++
			}
		}
		for _, p := range h.Probes {
			if p.Lock == venue {
				probes++
			}
		}
		// the pairs the order check compares: a request that queued and
		// was granted, and another granted request naming a common seat
		// that arrived after its join came back
		ix := newIndex(h)
		type qg struct {
			c   *Call
			end time.Duration
		}
		var queued []qg
		var all []*Call
		for _, c := range h.Calls {
			if c.Lock == venue && c.Acquired && len(c.Seats) > 0 {
				all = append(all, c)
				if js := ix.joinsOf(c); len(js) > 0 {
					queued = append(queued, qg{c, js[0].End})
				}
			}
		}
		pairs := 0
		for _, a := range queued {
			for _, b := range all {
				if b != a.c && b.Start > a.end && b.Start < a.c.End && common(a.c.Seats, b.Seats) != "" {
					pairs++
				}
			}
		}
		t.Logf("venue %s: %d grants (%d of several seats), %d waits, %d queue joins, %d dead holds probed, %d ordered pairs for the order check",
			l.ID, grants, multiSeat, waits, joins, probes, pairs)
		if grants < 10 || multiSeat == 0 {
			t.Errorf("venue %s: %d grants, %d of several seats: the seats checks prove nothing", l.ID, grants, multiSeat)
		}
		if waits > 20 && joins == 0 {
			t.Errorf("venue %s: %d waits but the join hook saw no queue join: the order check is blind", l.ID, waits)
		}
	}
}

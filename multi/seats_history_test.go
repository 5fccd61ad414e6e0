package multi_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/multi"
)

// A rapid test of the multi-seat hold through the Go API with real
// concurrency: handles (goroutines spread over several fairlock.Clients)
// request random overlapping sets of 1 to 4 seats of a 5-seat venue, named
// in random orders, hold them a random while or give up (ctx end, a timed
// try, a one-shot try), on miniredis and redis-server. A history is
// recorded on one logical clock (an atomic counter, consistent with real
// time): every seats script call, taken one at a time by a go-redis hook so
// that the order of the calls is their order in Redis (joined = the first
// acquisition call answered "queued" or "granted"; granted; left;
// abandoned; released), and the client's own events (Acquire returned with
// the seats; Release called). The statements are checked over that history,
// not over the scripts' decisions:
//
//   - no deadlock: every request that did not give up (its ctx or wait is
//     the generous bound) is granted;
//   - exclusion: two holds observed by their clients (from Acquire's return
//     to the Release call) that share a seat do not overlap, nor do the
//     holds in Redis (from the granting call to the releasing or
//     abandoning one);
//   - per-seat order: no grant passes a live waiter (joined, not yet
//     granted, not yet left) that joined earlier and names one of its seats.
//
// TestSeatsHistoryCatchesBrokenScripts runs the same property against
// broken scripts (core.WithSeatsScripts) and requires it to fail.

type reqKey struct{}

// reqHist is one request's history (clock values; 0: did not happen).
type reqHist struct {
	id       int
	seats    []string // as given
	kind     reqKind
	owner    string
	joined   int64 // first acquisition call answered queued (queue on) or granted
	granted  int64 // first acquisition call answered granted
	gaveUp   int64 // first leave or abandon call
	released int64 // first release call that released
	// client side
	returned int64 // Acquire returned with the seats
	relCall  int64 // Release called
	err      error // the acquisition's error (nil when granted or not granted)
	got      bool
}

type reqKind int

const (
	patient    reqKind = iota // Acquire, ctx = the bound
	patientTry                // TryAcquire(bound)
	impatient                 // Acquire with a short ctx
	timedTry                  // TryAcquire(short wait)
	oneShot                   // TryAcquire(0)
)

func (k reqKind) String() string {
	return [...]string{"Acquire", "TryAcquire(bound)", "Acquire(short ctx)", "TryAcquire(short)", "TryAcquire(0)"}[k]
}

// seatsHist records the history; as a go-redis hook it serialises the
// seats scripts' calls of every client it is added to.
type seatsHist struct {
	calls   sync.Mutex // held across each seats script call
	clock   atomic.Int64
	files   map[string]string // sha1 -> script file
	mu      sync.Mutex
	byOwner map[string]*reqHist
	orphans map[string]int64 // owner -> give-up before any call of the request
	odd     []string         // calls the test cannot place
}

func newSeatsHist(scripts *wire.SeatsScripts) *seatsHist {
	if scripts == nil {
		scripts = wire.SeatsDefault()
	}
	h := &seatsHist{files: map[string]string{}, byOwner: map[string]*reqHist{}, orphans: map[string]int64{}}
	for _, f := range wire.SeatsFiles {
		if f != wire.FileSeatsRenew {
			h.files[scripts.Script(f).Hash()] = f
		}
	}
	return h
}

func (h *seatsHist) now() int64 { return h.clock.Add(1) }

func (h *seatsHist) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *seatsHist) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *seatsHist) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		sha, isScript := wire.ScriptCall(cmd)
		if !isScript {
			return next(ctx, cmd)
		}
		file, ok := h.files[sha]
		if !ok {
			return next(ctx, cmd)
		}
		h.calls.Lock()
		defer h.calls.Unlock()
		if err := next(ctx, cmd); err != nil {
			return err // not run (wire.NotRun: sent again) or an error: nothing written
		}
		h.record(ctx, file, args, cmd)
		return nil
	}
}

// record files one answered script call (under calls: at its place in
// Redis's order).
func (h *seatsHist) record(ctx context.Context, file string, args []any, cmd redis.Cmder) {
	var nk int
	fmt.Sscan(fmt.Sprint(args[2]), &nk)
	if 3+nk > len(args) {
		return
	}
	keys, argv := args[3:3+nk], args[3+nk:]
	str := func(v any) string { return fmt.Sprint(v) }
	at := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	owner := ""
	switch file {
	case wire.FileSeatsAcquire:
		owner = str(argv[1])
	default:
		owner = str(argv[0])
	}
	r, _ := ctx.Value(reqKey{}).(*reqHist)
	if r == nil {
		r = h.byOwner[owner]
	}
	if r == nil {
		if file == wire.FileSeatsLeave || file == wire.FileSeatsAbandon {
			// A give-up on a fresh context for a request whose
			// acquisition call has not reached Redis (its ctx ended
			// first): kept until that call, if any, names the request.
			if _, ok := h.orphans[owner]; !ok {
				h.orphans[owner] = at
			}
			return
		}
		h.odd = append(h.odd, fmt.Sprintf("%s call for unknown owner %s", file, owner))
		return
	}
	if r.owner == "" {
		r.owner = owner
		h.byOwner[owner] = r
		if g, ok := h.orphans[owner]; ok {
			r.gaveUp = g
		}
	} else if r.owner != owner {
		h.odd = append(h.odd, fmt.Sprintf("request %d: owner %s then %s", r.id, r.owner, owner))
		return
	}
	c, _ := cmd.(*redis.Cmd)
	if c == nil {
		return
	}
	switch file {
	case wire.FileSeatsAcquire:
		v, err := c.Int64Slice()
		if err != nil || len(v) != 2 {
			return
		}
		queue := str(argv[5]) == "1"
		if v[0] == 1 {
			if r.granted == 0 {
				r.granted = at
			}
			if r.joined == 0 {
				r.joined = at
			}
		} else if queue && r.joined == 0 {
			r.joined = at
		}
		_ = keys
	case wire.FileSeatsRelease:
		if n, _ := c.Int64(); n == 1 && r.released == 0 {
			r.released = at
		}
	case wire.FileSeatsLeave, wire.FileSeatsAbandon:
		if r.gaveUp == 0 {
			r.gaveUp = at
		}
	}
}

// seatsPlan is one drawn scenario.
type seatsPlan struct {
	clients int
	handles [][]seatsReq
}

type seatsReq struct {
	seats []string // seat letters, in the order given to NewSeats
	kind  reqKind
	short time.Duration // impatient / timedTry: its ctx or wait
	delay time.Duration // before the call
	hold  time.Duration // how long the seats are held
	lease time.Duration // 0: watchdog
}

const seatsVenueSize = 5

func drawSeatsPlan(t *rapid.T) seatsPlan {
	p := seatsPlan{clients: rapid.IntRange(1, 3).Draw(t, "clients")}
	nh := rapid.IntRange(2, 8).Draw(t, "handles")
	for i := 0; i < nh; i++ {
		var reqs []seatsReq
		nr := rapid.IntRange(1, 3).Draw(t, fmt.Sprintf("h%d.requests", i))
		for j := 0; j < nr; j++ {
			at := fmt.Sprintf("h%d.r%d.", i, j)
			idx := rapid.SliceOfNDistinct(rapid.IntRange(0, seatsVenueSize-1), 1, 4, rapid.ID[int]).Draw(t, at+"seats")
			idx = rapid.Permutation(idx).Draw(t, at+"order")
			r := seatsReq{
				kind:  reqKind(rapid.IntRange(0, 4).Draw(t, at+"kind")),
				short: time.Duration(rapid.IntRange(1, 60).Draw(t, at+"shortMs")) * time.Millisecond,
				delay: time.Duration(rapid.IntRange(0, 10).Draw(t, at+"delayMs")) * time.Millisecond,
				hold:  time.Duration(rapid.IntRange(0, 15).Draw(t, at+"holdMs")) * time.Millisecond,
			}
			if rapid.Bool().Draw(t, at+"explicitLease") {
				r.lease = 60 * time.Second // never runs out within the test
			}
			for _, k := range idx {
				r.seats = append(r.seats, string(rune('A'+k)))
			}
			reqs = append(reqs, r)
		}
		p.handles = append(p.handles, reqs)
	}
	return p
}

var seatsHistRound atomic.Int64

// seatsHistoryProp is the property: run a drawn plan on b with scripts,
// then check the history. bound is the no-deadlock bound.
func seatsHistoryProp(tb testing.TB, b *redistest.Backend, scripts *wire.SeatsScripts, bound time.Duration) func(*rapid.T) {
	base := redistest.Prefix(tb)
	return func(t *rapid.T) {
		plan := drawSeatsPlan(t)
		tag := fmt.Sprintf("%s%d", base, seatsHistRound.Add(1))
		seat := func(l string) string { return "{" + tag + "}:" + l }
		hist := newSeatsHist(scripts)
		var opts []fairlock.Option
		if scripts != nil {
			opts = append(opts, core.WithSeatsScripts(scripts))
		}
		clients := make([]*fairlock.Client, plan.clients)
		for i := range clients {
			rdb := redis.NewClient(&redis.Options{Addr: b.Addr})
			rdb.AddHook(hist)
			c, err := fairlock.NewClient(rdb, opts...)
			if err != nil {
				t.Fatal(err)
			}
			clients[i] = c
			defer func() { _ = c.Close(); _ = rdb.Close() }()
		}
		var all []*reqHist
		var wg sync.WaitGroup
		for i, reqs := range plan.handles {
			c := clients[i%len(clients)]
			hs := make([]*reqHist, len(reqs))
			for j, rq := range reqs {
				hs[j] = &reqHist{id: len(all), seats: rq.seats, kind: rq.kind}
				all = append(all, hs[j])
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j, rq := range reqs {
					runSeatsReq(c, hist, hs[j], rq, seat, bound)
				}
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(bound + 30*time.Second):
			t.Fatalf("the handles did not finish within %v (a call stuck past its ctx)", bound+30*time.Second)
		}
		for _, c := range clients {
			_ = c.Close() // waits for the background give-ups, so their calls are in the history
		}
		checkSeatsHistory(t, hist, all, bound)
	}
}

func runSeatsReq(c *fairlock.Client, hist *seatsHist, r *reqHist, rq seatsReq, seat func(string) string, bound time.Duration) {
	names := make([]string, len(rq.seats))
	for i, l := range rq.seats {
		names[i] = seat(l)
	}
	s, err := multi.NewSeats(c, names...)
	if err != nil {
		r.err = err
		return
	}
	time.Sleep(rq.delay)
	ctx := context.WithValue(context.Background(), reqKey{}, r)
	var h *multi.SeatHold
	switch rq.kind {
	case patient, impatient:
		d := bound
		if rq.kind == impatient {
			d = rq.short
		}
		cctx, cancel := context.WithTimeout(ctx, d)
		h, err = s.Acquire(cctx, rq.lease)
		cancel()
		if err != nil && errors.Is(err, fairlock.ErrCanceled) && errors.Is(err, context.DeadlineExceeded) {
			err = nil // it gave up (impatient), or was not granted within the bound (patient)
		}
	case patientTry:
		h, err = s.TryAcquire(ctx, bound, rq.lease)
	case timedTry:
		h, err = s.TryAcquire(ctx, rq.short, rq.lease)
	case oneShot:
		h, err = s.TryAcquire(ctx, 0, rq.lease)
	}
	if h == nil {
		r.err = err
		return
	}
	r.got = true
	r.returned = hist.now()
	time.Sleep(rq.hold)
	if err := h.Err(); err != nil {
		r.err = fmt.Errorf("lost while held: %w", err)
	}
	r.relCall = hist.now()
	if err := h.Release(ctx); err != nil && r.err == nil {
		r.err = fmt.Errorf("release: %w", err)
	}
}

func checkSeatsHistory(t *rapid.T, hist *seatsHist, all []*reqHist, bound time.Duration) {
	hist.mu.Lock()
	defer hist.mu.Unlock()
	var bad []string
	for _, o := range hist.odd {
		bad = append(bad, "history: "+o)
	}
	desc := func(r *reqHist) string {
		return fmt.Sprintf("request %d %v %v (joined %d, granted %d, gave up %d, released %d; returned %d, Release called %d)",
			r.id, r.kind, r.seats, r.joined, r.granted, r.gaveUp, r.released, r.returned, r.relCall)
	}
	shares := func(a, b *reqHist) string {
		for _, s := range a.seats {
			if slices.Contains(b.seats, s) {
				return s
			}
		}
		return ""
	}
	for _, r := range all {
		if r.err != nil {
			bad = append(bad, fmt.Sprintf("%s: error %v", desc(r), r.err))
		}
		if (r.kind == patient || r.kind == patientTry) && r.err == nil && !r.got {
			bad = append(bad, fmt.Sprintf("no deadlock: %s was not granted within %v", desc(r), bound))
		}
		if r.got && r.granted == 0 {
			bad = append(bad, fmt.Sprintf("%s: granted to the client, no granting call seen", desc(r)))
		}
	}
	for i, a := range all {
		for _, b := range all[i+1:] {
			s := shares(a, b)
			if s == "" {
				continue
			}
			if a.got && b.got && a.returned < b.relCall && b.returned < a.relCall {
				bad = append(bad, fmt.Sprintf("exclusion: seat %s held by both %s and %s", s, desc(a), desc(b)))
			}
			// in Redis: from the granting call to the releasing (or
			// abandoning) one
			end := func(r *reqHist) int64 {
				e := int64(1 << 62)
				for _, v := range []int64{r.released, r.gaveUp} {
					if v > r.granted && v < e {
						e = v
					}
				}
				return e
			}
			if a.granted > 0 && b.granted > 0 && a.granted < end(b) && b.granted < end(a) {
				bad = append(bad, fmt.Sprintf("exclusion in Redis: seat %s granted to both %s and %s", s, desc(a), desc(b)))
			}
		}
	}
	// Per-seat order: a grant to b never passes a live waiter a that joined
	// earlier and names one of b's seats.
	for _, b := range all {
		if b.granted == 0 {
			continue
		}
		for _, a := range all {
			if a == b || a.joined == 0 || a.joined >= b.joined {
				continue
			}
			s := shares(a, b)
			if s == "" {
				continue
			}
			live := a.joined < b.granted && (a.granted == 0 || a.granted > b.granted) && (a.gaveUp == 0 || a.gaveUp > b.granted)
			if live {
				bad = append(bad, fmt.Sprintf("per-seat order: on seat %s, %s was granted while %s, which joined earlier, waited",
					s, desc(b), desc(a)))
			}
		}
	}
	if len(bad) > 0 {
		if len(bad) > 6 {
			bad = append(bad[:6], fmt.Sprintf("... and %d more", len(bad)-6))
		}
		t.Fatalf("%d requests:\n%s", len(all), strings.Join(bad, "\n"))
	}
}

// limitChecks sets rapid's number of checks to n unless -rapid.checks was
// given, for the length of t.
func limitChecks(t *testing.T, n int) {
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	if explicit {
		return
	}
	setRapidFlag(t, "rapid.checks", fmt.Sprint(n))
}

func setRapidFlag(t *testing.T, name, value string) {
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	old := f.Value.String()
	if err := f.Value.Set(value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

func TestSeatsHistory(t *testing.T) {
	limitChecks(t, 50)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		rapid.Check(t, seatsHistoryProp(t, b, nil, 20*time.Second))
	})
}

// seatsHistoryBroken are broken seats scripts the history property must
// catch on both backends (the edits of propertytests/seats_broken_test.go
// that break a promise the history states).
var seatsHistoryBroken = []struct {
	name  string
	file  string
	edits [][2]string // old, new
}{
	{"joins the queues in two steps (one seat per call)", wire.FileSeatsAcquire, [][2]string{
		{"            q_push(s, o)\n", "            q_push(s, o)\n            break\n"},
		{"    leave_all(owner) -- missing from a queue: leave all, join all again below\n    queued = false\n",
			"    join_all(owner, mine) -- the next step\n"},
	}},
	{"grants when heading only some of its queues", wire.FileSeatsAcquire, [][2]string{
		{"if seat_holder(s) or (h and h ~= owner) then",
			"if seat_holder(s) or (h and h ~= owner and s == seats[1]) then"},
	}},
	{"a release wakes nobody", wire.FileSeatsRelease, [][2]string{
		{"finish_all() -- the release's wake-ups\n", "\n"},
	}},
}

func TestSeatsHistoryCatchesBrokenScripts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	setRapidFlag(t, "rapid.checks", "50")
	setRapidFlag(t, "rapid.shrinktime", "1ms") // shrinking reruns real waits: keep the first failure
	setRapidFlag(t, "rapid.nofailfile", "true")
	for _, v := range seatsHistoryBroken {
		t.Run(v.name, func(t *testing.T) {
			scripts := wire.EditSeats(func(file, src string) string {
				if file != v.file {
					return src
				}
				for _, e := range v.edits {
					if strings.Count(src, e[0]) != 1 {
						t.Fatalf("%q does not occur once in %s", e[0], file)
					}
					src = strings.Replace(src, e[0], e[1], 1)
				}
				return src
			})
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				for round := 1; round <= 5; round++ {
					r := &recorder{name: t.Name()}
					func() {
						defer func() {
							if p := recover(); p != nil && p != errFailNow {
								panic(p)
							}
						}()
						// a short no-deadlock bound: the real scripts grant in milliseconds
						rapid.Check(r, seatsHistoryProp(t, b, scripts, 3*time.Second))
					}()
					if r.Failed() {
						t.Logf("caught in round %d:\n%s", round, r.report())
						return
					}
				}
				t.Fatalf("%q was not caught", v.name)
			})
		})
	}
}

var errFailNow = errors.New("recorder: FailNow")

// recorder is a rapid.TB that records a failure instead of failing the test.
type recorder struct {
	mu     sync.Mutex
	name   string
	failed bool
	msgs   []string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Name() string                      { return r.name }
func (r *recorder) Logf(format string, args ...any)   { r.log(fmt.Sprintf(format, args...)) }
func (r *recorder) Log(args ...any)                   { r.log(fmt.Sprint(args...)) }
func (r *recorder) Skipf(format string, args ...any)  { panic("recorder: skip") }
func (r *recorder) Skip(args ...any)                  { panic("recorder: skip") }
func (r *recorder) SkipNow()                          { panic("recorder: skip") }
func (r *recorder) Errorf(format string, args ...any) { r.Logf(format, args...); r.Fail() }
func (r *recorder) Error(args ...any)                 { r.Log(args...); r.Fail() }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); r.FailNow() }
func (r *recorder) FailNow()                          { r.Fail(); panic(errFailNow) }
func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recorder) log(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, s)
}

// report is the property's failure message (rapid's, without the
// traceback and the draws).
func (r *recorder) report() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if i := strings.Index(m, " requests:\n"); i >= 0 && strings.Contains(m, "failed after") {
			if j := strings.Index(m, "To reproduce"); j > i {
				m = m[:j]
			}
			return strings.TrimSpace(m)
		}
	}
	for _, m := range r.msgs { // a failure rapid could not reproduce
		if i := strings.Index(m, "Original traceback ("); i >= 0 {
			m = m[i+len("Original traceback ("):]
			if j := strings.Index(m, "):\n"); j > 0 {
				m = m[:j]
			}
			return "first run (rapid's rerun passed): " + m
		}
	}
	return strings.Join(r.msgs, "\n")
}

package demo

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/multi"
	"github.com/fairlock-go/fairlock/reentrant"
)

// The kinds of the --multi mode: each booking wants 1..Multi adjacent seats
// of a row and takes them all or none.
const (
	// SeatsHold is multi.NewSeats, the fair multi-seat hold: one script
	// joins the queue of every seat, granted when it heads them all.
	SeatsHold = "seats"
	// MultiLock is multi.New over one reentrant lock per seat, taken one
	// at a time in the canonical order (slot, name).
	MultiLock = "multilock"
	// Naive takes one reentrant lock per seat, one at a time, in the
	// caller's order (Redisson's RedissonMultiLock): two buyers listing
	// common seats in opposite orders can deadlock until GiveUp.
	Naive = "naive"
)

// Broken variants, for the tests only (Config.allowBroken): they show that
// the --multi mode's checks catch a booking that is not excluded or not in
// order.
const (
	// brokenOneLock holds only the first seat of the caller's list, as
	// if the others needed no lock.
	brokenOneLock = "broken-one-lock"
	// brokenPolling polls TryAcquire with no wait: it never queues, so
	// whoever polls when the seats are free wins.
	brokenPolling = "broken-polling"
)

// RowWidth is the number of seats in a row of the --multi mode (the last
// row may be shorter).
const RowWidth = 10

// DefaultGiveUp bounds an acquisition of the --multi mode when
// Config.GiveUp is 0.
const DefaultGiveUp = 2 * time.Second

// pickAmong: a buyer picks at random among this many of the best free
// blocks (front rows first, then nearest the middle): everyone wants the
// good seats, so bookings overlap.
const pickAmong = 8

func isMulti(kind string) bool {
	switch kind {
	case SeatsHold, MultiLock, Naive, brokenOneLock, brokenPolling:
		return true
	}
	return false
}

// multiRun is one kind's run of the --multi mode.
type multiRun struct {
	*run
	holding string // hash: seat -> who is inside a critical section on it
	giveUp  time.Duration

	smu     sync.Mutex
	sold    []bool // the seat map buyers choose from (seat 1..Seats), updated after each booking
	rowFree []int  // free seats per row (0-based rows)
}

// seatName is seat s's lock or seat name: "{<prefix><kind>:row<r>}:<n>",
// one hash tag per row (a row is a venue of the fair multi-seat hold).
func seatName(prefix, kind string, s int) string {
	return fmt.Sprintf("{%s%s:row%d}:%d", prefix, kind, (s-1)/RowWidth+1, (s-1)%RowWidth+1)
}

func rows(seats int) int { return (seats + RowWidth - 1) / RowWidth }

func runMulti(ctx context.Context, c Config, kind string) (*Result, error) {
	name := c.Prefix + kind
	r := &run{
		c: c, kind: kind,
		next: c.Prefix + kind + ":next", bookings: BookingsKey(c.Prefix, kind),
		observer: redis.NewClient(c.Redis),
		gate:     make(chan struct{}, 1),
		seqOf:    map[string]int{},
		result: &Result{Kind: kind, Lock: name, Contenders: c.Clients * c.Goroutines,
			PerContender: make([]int, c.Clients*c.Goroutines), Multi: c.Multi},
	}
	defer r.observer.Close()
	r.gate <- struct{}{}
	m := &multiRun{run: r, holding: c.Prefix + kind + ":holding", giveUp: c.GiveUp,
		sold: make([]bool, c.Seats+1), rowFree: make([]int, rows(c.Seats))}
	if m.giveUp <= 0 {
		m.giveUp = DefaultGiveUp
	}
	for s := 1; s <= c.Seats; s++ {
		m.rowFree[(s-1)/RowWidth]++
	}

	clients := make([]demoClient, c.Clients)
	defer func() {
		for _, cl := range clients {
			if cl.fl != nil {
				_ = cl.fl.Close()
			}
			if cl.rdb != nil {
				_ = cl.rdb.Close()
			}
		}
	}()
	if err := newClients(c, kind, clients); err != nil {
		return nil, err
	}
	type buyer struct {
		cl  demoClient
		who string
		rng *mrand.Rand
	}
	var bs []buyer
	for ci, cl := range clients {
		if err := cl.rdb.Ping(ctx).Err(); err != nil {
			return nil, err
		}
		for g := 0; g < c.Goroutines; g++ {
			bs = append(bs, buyer{cl: cl, who: fmt.Sprintf("c%dg%d", ci+1, g+1),
				rng: mrand.New(mrand.NewPCG(c.Seed, uint64(len(bs))))})
		}
	}

	start := time.Now()
	stopProgress := r.progress(start)
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.contend(ctx, b.cl, i, b.who, b.rng)
		}()
	}
	wg.Wait()
	r.result.Elapsed = time.Since(start)
	stopProgress()
	return m.finish(ctx, clients)
}

// pick chooses the seats of the next booking from the seat map (which may
// be stale: the booking checks again under the lock): a block of 1..Multi
// adjacent free seats of a row (fewer when no block that long is left),
// among the best few, listed in a random order (the caller's order). It
// returns nil when every seat is sold.
func (m *multiRun) pick(rng *mrand.Rand) []int {
	m.smu.Lock()
	defer m.smu.Unlock()
	type block struct{ row, start, off int }
	for k := 1 + rng.IntN(m.c.Multi); k >= 1; k-- {
		var cands []block
		for row := 0; row < len(m.rowFree) && len(cands) < pickAmong; row++ {
			if m.rowFree[row] < k {
				continue
			}
			first := row*RowWidth + 1
			last := min(first+RowWidth-1, m.c.Seats)
			mid2 := first + last // twice the row's middle
			for s := first; s+k-1 <= last; s++ {
				free := true
				for i := s; i < s+k; i++ {
					free = free && !m.sold[i]
				}
				if free {
					off := 2*s + k - 1 - mid2 // twice the block's distance from the middle
					cands = append(cands, block{row, s, max(off, -off)})
				}
			}
		}
		if len(cands) == 0 {
			continue
		}
		sort.SliceStable(cands, func(i, j int) bool {
			if cands[i].row != cands[j].row {
				return cands[i].row < cands[j].row
			}
			return cands[i].off < cands[j].off
		})
		b := cands[rng.IntN(min(len(cands), pickAmong))]
		seats := make([]int, k)
		for i := range seats {
			seats[i] = b.start + i
		}
		rng.Shuffle(len(seats), func(i, j int) { seats[i], seats[j] = seats[j], seats[i] })
		return seats
	}
	return nil
}

// errGaveUp marks an acquisition that GiveUp ended.
var errGaveUp = errors.New("gave up")

// contend books until every seat is sold or ctx ends.
func (m *multiRun) contend(ctx context.Context, cl demoClient, idx int, who string, rng *mrand.Rand) {
	for ctx.Err() == nil {
		seats := m.pick(rng)
		if seats == nil {
			return
		}
		// Arrive as the lock mode does: one at a time, the gate given
		// back once the first lock script of the booking ran in Redis.
		select {
		case <-m.gate:
		case <-ctx.Done():
			return
		}
		seq := int(m.arrivals.Add(1))
		var once sync.Once
		release := func() { once.Do(func() { m.gate <- struct{}{} }) }
		var seen atomic.Bool
		cl.hook.expect(who, func(bool) { seen.Store(true); release() })
		m.waiting.Add(1)
		t0 := time.Now()
		actx, cancel := context.WithTimeout(context.WithValue(ctx, arrivalKey{}, who), m.giveUp)
		unlock, err := m.acquire(actx, cl.fl, seats)
		cancel()
		wait := time.Since(t0)
		m.waiting.Add(-1)
		cl.hook.forget(who)
		release()
		if !seen.Load() {
			m.mu.Lock()
			m.result.Unseen++
			m.mu.Unlock()
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errGaveUp) || errors.Is(err, context.DeadlineExceeded) {
				m.mu.Lock()
				m.result.Timeouts++
				m.mu.Unlock()
				continue // a new booking, a new arrival
			}
			m.fail(fmt.Errorf("%s %s: %w", m.kind, who, err))
			return
		}
		grant := int(m.grants.Add(1))
		booked, err := m.book(ctx, who, seats, rng)
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if uerr := unlock(uctx); uerr != nil && err == nil {
			err = fmt.Errorf("%s release %s: %w", m.kind, who, uerr)
		}
		ucancel()
		m.mu.Lock()
		m.result.Bookings = append(m.result.Bookings, Booking{Grant: grant, Arrival: seq, Who: who,
			Seats: slices.Sorted(slices.Values(seats)), Lost: !booked, Wait: wait})
		if booked {
			m.result.Done++
			m.result.Booked += len(seats)
			m.result.PerContender[idx] += len(seats)
		}
		m.mu.Unlock()
		if err != nil {
			if ctx.Err() == nil {
				m.fail(err)
			}
			return
		}
	}
}

// acquire takes every seat named, all or none, the kind's way; it returns
// the release.
func (m *multiRun) acquire(ctx context.Context, c *fairlock.Client, seats []int) (func(context.Context) error, error) {
	names := make([]string, len(seats))
	for i, s := range seats {
		names[i] = seatName(m.c.Prefix, m.kind, s)
	}
	switch m.kind {
	case SeatsHold, brokenOneLock, brokenPolling:
		if m.kind == brokenOneLock {
			names = names[:1]
		}
		h, err := multi.NewSeats(c, names...)
		if err != nil {
			return nil, err
		}
		if m.kind != brokenPolling {
			hold, err := h.Acquire(ctx, 0)
			if err != nil {
				return nil, err
			}
			return hold.Release, nil
		}
		for {
			hold, err := h.TryAcquire(ctx, 0, 0)
			if err != nil || hold != nil {
				if err != nil {
					return nil, err
				}
				return hold.Release, nil
			}
			t := time.NewTimer(time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
	case MultiLock:
		members := make([]multi.Member, len(names))
		for i, n := range names {
			mu, err := reentrant.New(c, n)
			if err != nil {
				return nil, err
			}
			members[i] = mu
		}
		ml, err := multi.New(members...)
		if err != nil {
			return nil, err
		}
		if err := ml.Lock(ctx); err != nil {
			return nil, err
		}
		return ml.Unlock, nil
	case Naive:
		var held []*reentrant.Mutex
		unlock := func(ctx context.Context) error {
			var errs []error
			for i := len(held) - 1; i >= 0; i-- {
				errs = append(errs, held[i].Unlock(ctx))
			}
			return errors.Join(errs...)
		}
		for _, n := range names { // the caller's order
			mu, err := reentrant.New(c, n)
			if err == nil {
				err = mu.Lock(ctx)
			}
			if err != nil {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = unlock(uctx)
				cancel()
				return nil, err
			}
			held = append(held, mu)
		}
		return unlock, nil
	}
	return nil, fmt.Errorf("not a --multi kind: %q", m.kind)
}

// book runs while the seats are held. First it records itself as the one
// inside the critical section of each seat (HSETNX on the holding hash):
// that write cannot succeed while another booking is inside a critical
// section on the seat, so any overlap of two bookings on a seat is counted
// as a double booking. Then it reads the seats (they may have been sold
// since the buyer chose them: it then books nothing) and writes each with
// HSETNX (a seat already sold is a double booking too), holds a while, and
// leaves the critical sections.
func (m *multiRun) book(ctx context.Context, who string, seats []int, rng *mrand.Rand) (bool, error) {
	fields := make([]string, len(seats))
	for i, s := range seats {
		fields[i] = fmt.Sprint(s)
	}
	double := 0
	var entered []string
	for _, f := range fields {
		ok, err := m.observer.HSetNX(ctx, m.holding, f, who).Result()
		if err != nil {
			return false, err
		}
		if ok {
			entered = append(entered, f)
		} else {
			double++
		}
	}
	defer func() {
		if len(entered) > 0 {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = m.observer.HDel(cctx, m.holding, entered...).Err()
			cancel()
		}
	}()
	vals, err := m.observer.HMGet(ctx, m.bookings, fields...).Result()
	if err != nil {
		return false, err
	}
	free := !slices.ContainsFunc(vals, func(v any) bool { return v != nil })
	if free {
		for _, f := range fields {
			ok, err := m.observer.HSetNX(ctx, m.bookings, f, who).Result()
			if err != nil {
				return false, err
			}
			if !ok && slices.Contains(entered, f) {
				double++ // not counted yet for this seat
			}
		}
		m.smu.Lock()
		for _, s := range seats {
			if !m.sold[s] {
				m.sold[s] = true
				m.rowFree[(s-1)/RowWidth]--
			}
		}
		m.smu.Unlock()
	}
	if double > 0 {
		m.mu.Lock()
		m.result.DoubleBookings += double
		m.mu.Unlock()
	}
	m.hold(ctx, rng)
	return free, nil
}

// finish closes the clients, deletes the demo's keys, records the lock
// keys left behind and sorts the bookings by grant.
func (m *multiRun) finish(ctx context.Context, clients []demoClient) (*Result, error) {
	for _, cl := range clients {
		_ = cl.fl.Close()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	owned := []string{m.bookings, m.holding}
	var mustGo []string
	switch m.kind {
	case MultiLock, Naive:
		for s := 1; s <= m.c.Seats; s++ {
			mustGo = append(mustGo, seatName(m.c.Prefix, m.kind, s))
		}
	default:
		for row := 1; row <= rows(m.c.Seats); row++ {
			k := wire.SeatsKeysFor(fmt.Sprintf("%s%s:row%d", m.c.Prefix, m.kind, row))
			mustGo = append(mustGo, k.Holds, k.Leases, k.Seat, k.Req, k.Queue, k.Grace)
			owned = append(owned, k.Token)
		}
	}
	if !m.c.Keep {
		_ = m.observer.Del(cctx, owned...).Err()
	}
	for _, k := range mustGo {
		if n, err := m.observer.Exists(cctx, k).Result(); err == nil && n > 0 {
			m.result.Leftover = append(m.result.Leftover, k)
		}
	}
	sort.Slice(m.result.Bookings, func(i, j int) bool { return m.result.Bookings[i].Grant < m.result.Bookings[j].Grant })
	if err := ctx.Err(); err != nil {
		return m.result, err
	}
	return m.result, m.firstErr
}

// SeatInversions counts, in a --multi run, the pairs of grants naming a
// common seat that were granted in the opposite order of their arrivals,
// out of all pairs of grants naming a common seat (each pair once).
func (r *Result) SeatInversions() (inverted, pairs int64) {
	bySeat := map[int][]int{} // seat -> indexes in Bookings (grant order)
	for i, b := range r.Bookings {
		for _, s := range b.Seats {
			bySeat[s] = append(bySeat[s], i)
		}
	}
	seen := map[[2]int]bool{}
	for _, is := range bySeat {
		for x := 0; x < len(is); x++ {
			for y := x + 1; y < len(is); y++ {
				p := [2]int{is[x], is[y]}
				if seen[p] {
					continue
				}
				seen[p] = true
				pairs++
				if r.Bookings[is[x]].Arrival > r.Bookings[is[y]].Arrival {
					inverted++
				}
			}
		}
	}
	return inverted, pairs
}

// LostGrants counts the grants of a --multi run that found a seat sold
// since the buyer chose it (it then booked nothing and chose again).
func (r *Result) LostGrants() int {
	n := 0
	for _, b := range r.Bookings {
		if b.Lost {
			n++
		}
	}
	return n
}

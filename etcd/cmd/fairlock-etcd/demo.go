package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	fairetcd "github.com/fairlock-go/fairlock/etcd"
)

// Lock kinds.
const (
	KindFair      = "fairlock"   // fairetcd.Client.NewMutex
	KindEtcdMutex = "etcd-mutex" // etcd's concurrency.Mutex
)

// Config is one demonstration.
type Config struct {
	Endpoint   string        // etcd client endpoint host:port
	Clients    int           // etcd clients, each with its own connection
	Goroutines int           // goroutines per client, each with its own lock handle (and, for etcd-mutex, session)
	Seats      int           // seats to book
	Hold       time.Duration // mean hold per booking (uniform in [hold/2, 3hold/2])
	Kinds      []string      // lock kinds to run, in order
	Seed       uint64        // seed of the hold-time jitter
	Prefix     string        // key prefix of this run (every key the demo makes is under it)
}

// Booking is one grant of the lock.
type Booking struct {
	Grant   int           // grant number, counted inside the critical section
	Arrival int64         // create revision of the waiter's key: etcd's order of arrival
	Who     string        // "c<client>g<goroutine>"
	Seat    int           // seat booked; 0 when sold out
	Wait    time.Duration // time in Lock
}

// Result is one kind's run.
type Result struct {
	Kind           string
	Bookings       []Booking // sorted by grant
	Booked         int
	DoubleBookings int // a seat booked twice: only overlapping holds can do it
	Overlaps       int // grants that found another holder inside the critical section
	Leftover       int // keys under the kind's prefix after the run
	Elapsed        time.Duration
}

// OutOfOrder is the number of grants that went to a waiter that arrived
// after one granted later: a grant whose arrival revision is below that of
// an earlier grant. 0 for a lock that grants in arrival order.
func (r *Result) OutOfOrder() int {
	n := 0
	var top int64
	for _, b := range r.Bookings {
		if b.Arrival < top {
			n++
		}
		top = max(top, b.Arrival)
	}
	return n
}

// WaitPercentile is the p-th percentile of the waits (p = 100: the max).
func (r *Result) WaitPercentile(p float64) time.Duration {
	if len(r.Bookings) == 0 {
		return 0
	}
	ws := make([]time.Duration, len(r.Bookings))
	for i, b := range r.Bookings {
		ws[i] = b.Wait
	}
	slices.Sort(ws)
	i := int(p / 100 * float64(len(ws)))
	return ws[min(max(i, 0), len(ws)-1)]
}

// SeatsPerSecond is the throughput.
func (r *Result) SeatsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Booked) / r.Elapsed.Seconds()
}

// Violations lists what a correct fair lock never shows.
func (r *Result) Violations(seats int) []string {
	var v []string
	if r.Overlaps > 0 {
		v = append(v, fmt.Sprintf("%d overlapping holds", r.Overlaps))
	}
	if r.DoubleBookings > 0 {
		v = append(v, fmt.Sprintf("%d double bookings", r.DoubleBookings))
	}
	if r.Booked != seats {
		v = append(v, fmt.Sprintf("%d of %d seats booked", r.Booked, seats))
	}
	if n := r.OutOfOrder(); n > 0 {
		v = append(v, fmt.Sprintf("%d grants out of arrival order", n))
	}
	if r.Leftover > 0 {
		v = append(v, fmt.Sprintf("%d keys left behind", r.Leftover))
	}
	return v
}

// NewPrefix is a fresh run prefix, so a run on a shared etcd touches only
// its own keys.
func NewPrefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "fairlock-demo-" + hex.EncodeToString(b)
}

// locker is what the demo needs of either lock: Lock returns the create
// revision of the waiter's key.
type locker interface {
	lock(ctx context.Context) (int64, error)
	unlock(ctx context.Context) error
	close()
}

type fairLocker struct{ m *fairetcd.Mutex }

func (l fairLocker) lock(ctx context.Context) (int64, error) { return l.m.LockAndGetToken(ctx) }
func (l fairLocker) unlock(ctx context.Context) error        { return l.m.Unlock(ctx) }
func (l fairLocker) close()                                  {}

type etcdLocker struct {
	s *concurrency.Session
	m *concurrency.Mutex
}

func (l etcdLocker) lock(ctx context.Context) (int64, error) {
	if err := l.m.Lock(ctx); err != nil {
		return 0, err
	}
	// IsOwner compares the key's create revision with the waiter's own:
	// that revision is where the waiter joined the queue.
	c := l.m.IsOwner()
	return (*pb.Compare)(&c).GetCreateRevision(), nil
}
func (l etcdLocker) unlock(ctx context.Context) error { return l.m.Unlock(ctx) }
func (l etcdLocker) close()                           { _ = l.s.Close() }

// ReachTimeout bounds the first request to etcd.
const ReachTimeout = 5 * time.Second

// testLocker, set by tests, makes the handles of kinds this file does not
// know (broken locks the checks must catch).
var testLocker func(kind string, cli *clientv3.Client, prefix string) locker

type contender struct {
	lk  locker
	who string
	rng *mrand.Rand
}

// run is one kind's shared state.
type run struct {
	c        Config
	soldOut  atomic.Bool
	grants   atomic.Int64
	inside   atomic.Int64
	next     atomic.Int64 // seats booked so far: read, then written, under the lock
	mu       sync.Mutex
	booked   map[int]string
	result   *Result
	firstErr error
}

// Run runs each kind of c.Kinds in turn.
func Run(ctx context.Context, c Config, progress io.Writer) ([]*Result, error) {
	var rs []*Result
	for _, k := range c.Kinds {
		if progress != nil {
			fmt.Fprintf(progress, "running %s ...\n", k)
		}
		r, err := runKind(ctx, c, k)
		if r != nil {
			rs = append(rs, r)
		}
		if err != nil {
			return rs, fmt.Errorf("%s: %w", k, err)
		}
	}
	return rs, nil
}

func newEtcdClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second,
		Logger: zap.NewNop()})
}

func runKind(ctx context.Context, c Config, kind string) (*Result, error) {
	prefix := c.Prefix + "/" + kind
	r := &run{c: c, booked: map[int]string{}, result: &Result{Kind: kind}}
	observer, err := newEtcdClient(c.Endpoint)
	if err != nil {
		return nil, err
	}
	defer observer.Close()
	// An endpoint where no etcd answers is told, not waited on forever.
	sctx, scancel := context.WithTimeout(ctx, ReachTimeout)
	_, err = observer.Status(sctx, c.Endpoint)
	scancel()
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", c.Endpoint, err)
	}

	var clis []*clientv3.Client
	var fls []*fairetcd.Client
	var cs []contender
	closeAll := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, ct := range cs {
			ct.lk.close()
		}
		cs = nil
		for _, fl := range fls {
			_ = fl.Close(cctx)
		}
		fls = nil
		for _, cli := range clis {
			_ = cli.Close()
		}
		clis = nil
	}
	defer closeAll()
	// Every connection, session and handle is made before the clock starts.
	for ci := 0; ci < c.Clients; ci++ {
		cli, err := newEtcdClient(c.Endpoint)
		if err != nil {
			return nil, err
		}
		clis = append(clis, cli)
		var fl *fairetcd.Client
		if kind == KindFair {
			if fl, err = fairetcd.New(cli, fairetcd.WithPrefix(prefix)); err != nil {
				return nil, err
			}
			fls = append(fls, fl)
		}
		for g := 0; g < c.Goroutines; g++ {
			ct := contender{who: fmt.Sprintf("c%dg%d", ci+1, g+1),
				rng: mrand.New(mrand.NewPCG(c.Seed, uint64(len(cs))))}
			switch kind {
			case KindFair:
				m, err := fl.NewMutex("seats")
				if err != nil {
					return nil, err
				}
				ct.lk = fairLocker{m}
			case KindEtcdMutex:
				// The session lives on the client's context: Close must be
				// able to revoke its lease after Ctrl-C.
				s, err := concurrency.NewSession(cli)
				if err != nil {
					return nil, err
				}
				ct.lk = etcdLocker{s, concurrency.NewMutex(s, prefix+"/seats")}
			default:
				if testLocker == nil {
					return nil, fmt.Errorf("unknown lock kind %q", kind)
				}
				ct.lk = testLocker(kind, cli, prefix)
			}
			cs = append(cs, ct)
		}
	}

	start := time.Now()
	var wg sync.WaitGroup
	for _, ct := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.contend(ctx, ct)
		}()
	}
	wg.Wait()
	r.result.Elapsed = time.Since(start)
	// Closing ends sessions and leases: whatever a lock left would go now,
	// but it must be gone already; count it before closing.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	resp, err := observer.Get(cctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return r.result, err
	}
	r.result.Leftover = int(resp.Count)
	closeAll()
	// Closing revoked the leases; an interrupted run may have left a
	// lease-less key of its own run prefix, nobody else's.
	_, _ = observer.Delete(cctx, prefix+"/", clientv3.WithPrefix())
	slices.SortFunc(r.result.Bookings, func(a, b Booking) int { return a.Grant - b.Grant })
	if err := ctx.Err(); err != nil {
		return r.result, err
	}
	return r.result, r.firstErr
}

func (r *run) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// contend books seats until none is left or ctx ends.
func (r *run) contend(ctx context.Context, ct contender) {
	for !r.soldOut.Load() && ctx.Err() == nil {
		t0 := time.Now()
		arrival, err := ct.lk.lock(ctx)
		wait := time.Since(t0)
		if err != nil {
			if ctx.Err() == nil {
				r.fail(fmt.Errorf("lock %s: %w", ct.who, err))
			}
			return
		}
		grant, seat := r.book(ctx, ct)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = ct.lk.unlock(uctx)
		cancel()
		if err != nil {
			r.fail(fmt.Errorf("unlock %s: %w", ct.who, err))
			return
		}
		r.mu.Lock()
		r.result.Bookings = append(r.result.Bookings,
			Booking{Grant: grant, Arrival: arrival, Who: ct.who, Seat: seat, Wait: wait})
		r.mu.Unlock()
	}
}

// book runs inside the lock: number the grant, read the next free seat,
// hold the lock a while, write the seat back. Read and write are separate
// steps: only the lock keeps two holders from taking the same seat.
func (r *run) book(ctx context.Context, ct contender) (grant, seat int) {
	if r.inside.Add(1) > 1 {
		r.mu.Lock()
		r.result.Overlaps++
		r.mu.Unlock()
	}
	defer r.inside.Add(-1)
	grant = int(r.grants.Add(1))
	seat = int(r.next.Load()) + 1
	if seat > r.c.Seats {
		r.soldOut.Store(true)
		seat = 0
	} else {
		r.hold(ctx, ct.rng)
		r.next.Store(int64(seat))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if seat > 0 {
		if _, dup := r.booked[seat]; dup {
			r.result.DoubleBookings++
		} else {
			r.result.Booked++
		}
		r.booked[seat] = ct.who
	}
	return grant, seat
}

func (r *run) hold(ctx context.Context, rng *mrand.Rand) {
	if r.c.Hold <= 0 {
		return
	}
	d := r.c.Hold/2 + time.Duration(rng.Int64N(int64(r.c.Hold)+1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

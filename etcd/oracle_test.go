package etcd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fairlock-go/fairlock"
)

// The etcd fair semaphore against golang.org/x/sync/semaphore.Weighted, the
// in-process statement of its rule (arrival order; a head that does not
// fit blocks every later request, however small). A random sequence of
// acquisitions (sizes 1..capacity) and releases of held permits runs on a
// Weighted and on the etcd semaphore, one step at a time in the same
// arrival order; after each step the set of granted requests must be the
// same on both.

// weighted drives a semaphore.Weighted deterministically: each Acquire runs
// in its own goroutine, and a step ends when every request issued is either
// granted (reported) or parked in Acquire's select (found in a goroutine
// dump). A request Release has granted is neither until it returns, so the
// wait also covers Release's grants.
type weighted struct {
	w       *semaphore.Weighted
	grants  chan int
	issued  int
	granted map[int]bool
}

func newWeighted(n int64) *weighted {
	return &weighted{w: semaphore.NewWeighted(n), grants: make(chan int, 1024), granted: map[int]bool{}}
}

func (o *weighted) acquire(t *testing.T, id int, n int64, ctx context.Context) {
	o.issued++
	go func() {
		if o.w.Acquire(ctx, n) == nil {
			o.grants <- id
		}
	}()
	o.settle(t)
}

func (o *weighted) release(t *testing.T, n int64) {
	o.w.Release(n)
	o.settle(t)
}

// parked counts goroutines blocked in Weighted.Acquire's select.
func parked() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	c := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "semaphore.(*Weighted).Acquire") {
			c++
		}
	}
	return c
}

func (o *weighted) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for drained := false; !drained; {
			select {
			case id := <-o.grants:
				o.granted[id] = true
			default:
				drained = true
			}
		}
		if len(o.granted)+parked() == o.issued {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Weighted did not settle: %d issued, %d granted", o.issued, len(o.granted))
		}
		time.Sleep(time.Millisecond)
	}
}

func setString(m map[int]bool) string {
	ids := make([]int, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return fmt.Sprint(ids)
}

// TestSemaphoreAgainstWeighted replays random sequences (seed logged) on
// both.
func TestSemaphoreAgainstWeighted(t *testing.T) {
	e := newEnv(t)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("FAIRLOCK_ETCD_SEED"), 10, 64); err == nil {
		seed = v // replay a logged run
	}
	t.Logf("seed %d (FAIRLOCK_ETCD_SEED replays it)", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	const capacity, steps = 5, 40
	sems := make([]*Semaphore, 2)
	for i := range sems {
		s, err := e.client("").NewSemaphore("oracle", capacity)
		if err != nil {
			t.Fatal(err)
		}
		sems[i] = s
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := newWeighted(capacity)
	type result struct {
		id  int
		p   *Permit
		err error
	}
	grants := make(chan result, 256)
	size := map[int]int64{}
	permit := map[int]*Permit{}
	granted := map[int]bool{}  // etcd's grants so far
	released := map[int]bool{} // released on both
	var trace []string

	take := func(res result) {
		if res.err != nil || res.p == nil {
			t.Fatalf("request %d: %v (%v)", res.id, res.err, res.p)
		}
		granted[res.id], permit[res.id] = true, res.p
	}
	// compare waits until etcd has granted what Weighted has (a grant
	// travels through etcd), then a little longer for extra grants.
	compare := func(step string) {
		t.Helper()
		trace = append(trace, fmt.Sprintf("%s -> Weighted %s", step, setString(o.granted)))
		deadline := time.After(10 * time.Second)
		for len(granted) < len(o.granted) {
			select {
			case res := <-grants:
				take(res)
			case <-deadline:
				t.Fatalf("etcd granted %s, Weighted %s; history:\n%s", setString(granted), setString(o.granted), strings.Join(trace, "\n"))
			}
		}
		settle := time.After(150 * time.Millisecond)
		for done := false; !done; {
			select {
			case res := <-grants:
				take(res)
			case <-settle:
				done = true
			}
		}
		if setString(granted) != setString(o.granted) {
			t.Fatalf("etcd granted %s, Weighted %s; history:\n%s", setString(granted), setString(o.granted), strings.Join(trace, "\n"))
		}
	}
	acquire := func(id int, n int64) {
		size[id] = n
		queued := make(chan struct{})
		go func() {
			joined := false
			p, err := sems[id%2].AcquireWith(ctx, n, AcquireOptions{Wait: Forever, Position: func(fairlock.Position) {
				if !joined {
					joined = true
					close(queued)
				}
			}})
			grants <- result{id, p, err}
		}()
		// Arrival order: the next request starts only after this one has
		// queued (or was granted).
		select {
		case <-queued:
		case res := <-grants:
			take(res)
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d neither queued nor granted", id)
		}
		o.acquire(t, id, n, ctx)
		compare(fmt.Sprintf("acquire #%d of %d", id, n))
	}
	release := func(id int) {
		if err := permit[id].Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		released[id] = true
		o.release(t, size[id])
		compare(fmt.Sprintf("release #%d (%d)", id, size[id]))
	}
	held := func() []int {
		var ids []int
		for id := range granted {
			if !released[id] {
				ids = append(ids, id)
			}
		}
		sort.Ints(ids)
		return ids
	}
	next := 0
	for range steps {
		h := held()
		if len(h) == 0 || r.IntN(100) < 55 {
			n := int64(1 + r.IntN(capacity))
			if r.IntN(2) == 0 {
				n = int64(1 + r.IntN(2)) // small requests, to meet a blocked head
			}
			acquire(next, n)
			next++
		} else {
			release(h[r.IntN(len(h))])
		}
	}
	// Release everything; every waiter must be granted in the end.
	for len(held()) > 0 {
		release(held()[0])
	}
	if len(granted) != next {
		t.Fatalf("%d of %d requests granted after every release; history:\n%s", len(granted), next, strings.Join(trace, "\n"))
	}
	t.Logf("%d requests, history:\n%s", next, strings.Join(trace, "\n"))
}

// The read-write lock against the seed's rule, stated over the arrival
// sequence alone: a read waits only for the writes that arrived before it,
// a write for every request that arrived before it.

// seedBlockers lists the requests (indices into the arrival sequence;
// writes[i] says whether request i writes) that request j waits for.
func seedBlockers(writes []bool, j int) []int {
	var b []int
	for i := range j {
		if writes[j] || writes[i] {
			b = append(b, i)
		}
	}
	return b
}

// seedGranted is the rule's prediction: after the arrivals writes and the
// releases released, the requests that have the lock (or had it): those
// whose every blocker has released. Any two of them not yet released may
// be held together (both reads, by construction).
func seedGranted(writes []bool, released map[int]bool) map[int]bool {
	g := map[int]bool{}
	for j := range writes {
		ok := true
		for _, i := range seedBlockers(writes, j) {
			if !released[i] {
				ok = false
				break
			}
		}
		if ok {
			g[j] = true
		}
	}
	return g
}

func TestSeedRuleFunction(t *testing.T) {
	// W0 R1 R2 W3 R4: with nothing released only W0 holds; after W0, R1
	// and R2 together; W3 after both; R4 only after W3.
	w := []bool{true, false, false, true, false}
	steps := []struct {
		released []int
		want     string
	}{
		{nil, "[0]"},
		{[]int{0}, "[0 1 2]"},
		{[]int{0, 1}, "[0 1 2]"},
		{[]int{0, 1, 2}, "[0 1 2 3]"},
		{[]int{0, 1, 2, 3}, "[0 1 2 3 4]"},
	}
	for _, s := range steps {
		rel := map[int]bool{}
		for _, i := range s.released {
			rel[i] = true
		}
		if got := setString(seedGranted(w, rel)); got != s.want {
			t.Fatalf("released %v: granted %s, want %s", s.released, got, s.want)
		}
	}
}

// TestRWMutexAgainstSeedRule replays random sequences of reads, writes
// and releases (seed logged) on the etcd read-write lock, each request on
// its own handle, in arrival order (the next request starts after this
// one has queued or was granted); after each step the set of granted
// requests must be the rule's prediction.
func TestRWMutexAgainstSeedRule(t *testing.T) {
	e := newEnv(t)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("FAIRLOCK_ETCD_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (FAIRLOCK_ETCD_SEED replays it)", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	clients := []*Client{e.client(""), e.client("")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		id  int
		err error
	}
	grants := make(chan result, 256)
	var writes []bool
	handle := map[int]*Mutex{}
	granted, released := map[int]bool{}, map[int]bool{}
	var trace []string
	take := func(res result) {
		if res.err != nil {
			t.Fatalf("request %d: %v", res.id, res.err)
		}
		granted[res.id] = true
	}
	compare := func(step string) {
		t.Helper()
		want := seedGranted(writes, released)
		trace = append(trace, fmt.Sprintf("%s -> rule %s", step, setString(want)))
		deadline := time.After(10 * time.Second)
		for len(granted) < len(want) {
			select {
			case res := <-grants:
				take(res)
			case <-deadline:
				t.Fatalf("etcd granted %s, the rule %s; history:\n%s", setString(granted), setString(want), strings.Join(trace, "\n"))
			}
		}
		settle := time.After(150 * time.Millisecond)
		for done := false; !done; {
			select {
			case res := <-grants:
				take(res)
			case <-settle:
				done = true
			}
		}
		if setString(granted) != setString(want) {
			t.Fatalf("etcd granted %s, the rule %s; history:\n%s", setString(granted), setString(want), strings.Join(trace, "\n"))
		}
	}
	kind := map[bool]string{true: "W", false: "R"}
	acquire := func(id int, write bool) {
		l, err := clients[id%2].NewRWMutex("oracle")
		if err != nil {
			t.Fatal(err)
		}
		m := l.ReadLock()
		if write {
			m = l.WriteLock()
		}
		handle[id] = m
		writes = append(writes, write)
		queued := make(chan struct{})
		go func() {
			joined := false
			_, err := m.Acquire(ctx, AcquireOptions{Wait: Forever, Position: func(fairlock.Position) {
				if !joined {
					joined = true
					close(queued)
				}
			}})
			grants <- result{id, err}
		}()
		select {
		case <-queued:
		case res := <-grants:
			take(res)
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d neither queued nor granted", id)
		}
		compare(fmt.Sprintf("%s%d arrives", kind[write], id))
	}
	release := func(id int) {
		if err := handle[id].Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		released[id] = true
		compare(fmt.Sprintf("%s%d releases", kind[writes[id]], id))
	}
	held := func() []int {
		var ids []int
		for id := range granted {
			if !released[id] {
				ids = append(ids, id)
			}
		}
		sort.Ints(ids)
		return ids
	}
	next := 0
	for range 40 {
		h := held()
		if len(h) == 0 || r.IntN(100) < 55 {
			acquire(next, r.IntN(3) == 0) // a third writes
			next++
		} else {
			release(h[r.IntN(len(h))])
		}
	}
	for len(held()) > 0 {
		release(held()[0])
	}
	if len(granted) != next {
		t.Fatalf("%d of %d requests granted after every release; history:\n%s", len(granted), next, strings.Join(trace, "\n"))
	}
	t.Logf("%d requests, history:\n%s", next, strings.Join(trace, "\n"))
}

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

	"github.com/fairlock-go/fairlock"
	"golang.org/x/sync/semaphore"
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

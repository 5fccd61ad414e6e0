package propertytests

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// An oracle independent of model.SemFair: golang.org/x/sync/semaphore's
// Weighted, the in-process statement of the rule. The same random sequence
// of acquisitions (distinct waiters, n permits each, none over the pool)
// and releases runs on a Weighted and on the scripts, with no lease ending
// and nobody giving up; after every operation the waiters granted by it
// must be the same, in the same order.
//
// Weighted is driven deterministically: each Acquire runs in its own
// goroutine (weightedWaiter), and the driver waits until that goroutine has
// either returned (granted at once) or is parked in Acquire's select (it
// is queued: Weighted enqueues under its mutex before it parks), counting
// the parked waiters from the goroutine dump. Weighted grants in Release,
// under its mutex, closing the channels of the waiters it grants, so right
// after Release the parked count is final and the granted goroutines have
// only to report. Within one Release, Weighted grants in queue order
// (notifyWaiters walks its list from the front), which is arrival order,
// so a batch is compared sorted by arrival. On the scripts' side the
// waiters are polled in arrival order, pass after pass, until a pass
// grants nobody: a script that grants a waiter out of turn is seen.

type oracleStats struct {
	sequences, grants, blockedByQueue, multiBatches int
}

func semOracleMachine(b semBackend, scripts *wire.SemFairScripts, st *oracleStats) func(*rapid.T) {
	return func(t *rapid.T) {
		rdb, name, _ := b.start(t)
		ctx := context.Background()
		k := wire.SemFairKeysFor(name)
		pool := rapid.Int64Range(1, 4).Draw(t, "pool")
		if _, _, err := scripts.SetPermits(ctx, rdb, k, pool, wire.SemArgs{}); err != nil {
			t.Fatalf("setPermits: %v", err)
		}
		st.sequences++
		w := semaphore.NewWeighted(pool)
		wctx, cancel := context.WithCancel(ctx)
		results := make(chan int, 64)
		var launched []int // waiter ids, in arrival order
		asks := map[int]int64{}
		returned := map[int]bool{}
		var holders, waiting []int // per Weighted
		defer func() {
			cancel() // parked Acquires return
		}()

		// collect waits until every waiter that is not parked has reported.
		collect := func() []int {
			var batch []int
			deadline := time.Now().Add(30 * time.Second)
			for {
				parked := parkedWaiters()
				for len(results) > 0 {
					id := <-results
					returned[id] = true
					batch = append(batch, id)
				}
				if len(launched)-len(returned) == parked {
					slices.Sort(batch) // ids are arrival order
					return batch
				}
				if time.Now().After(deadline) {
					t.Fatalf("Weighted: %d launched, %d returned, %d parked", len(launched), len(returned), parked)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		free := pool
		dist := func(id int) bool {
			r, err := scripts.Acquire(ctx, rdb, k, wire.SemArgs{Owner: "w:" + strconv.Itoa(id), Permits: asks[id],
				LeaseMs: 600_000, WaitMs: 600_000, Queue: true})
			if err != nil {
				t.Fatalf("acquire %d: %v", id, err)
			}
			return r.Granted
		}
		// settle polls the scripts' waiters in arrival order until a pass
		// grants nobody.
		settle := func(distWaiting *[]int) []int {
			var batch []int
			for again := true; again; {
				again = false
				for _, id := range slices.Clone(*distWaiting) {
					if dist(id) {
						batch = append(batch, id)
						*distWaiting = slices.DeleteFunc(*distWaiting, func(x int) bool { return x == id })
						again = true
					}
				}
			}
			return batch
		}
		var distWaiting []int
		steps := rapid.IntRange(1, 30).Draw(t, "steps")
		for step := 0; step < steps; step++ {
			var want, got []int
			var what string
			if len(holders) == 0 || rapid.IntRange(0, 2).Draw(t, "join") > 0 {
				id := len(launched)
				n := rapid.Int64Range(1, pool).Draw(t, "n")
				asks[id] = n
				what = fmt.Sprintf("waiter %d asks %d", id, n)
				if n <= free && len(waiting) > 0 {
					st.blockedByQueue++
				}
				launched = append(launched, id)
				go weightedWaiter(wctx, w, n, id, results)
				want = collect()
				if dist(id) {
					got = append(got, id)
				} else {
					distWaiting = append(distWaiting, id)
				}
				got = append(got, settle(&distWaiting)...)
				if len(want) == 0 {
					waiting = append(waiting, id)
				}
			} else {
				h := rapid.SampledFrom(holders).Draw(t, "holder")
				what = fmt.Sprintf("holder %d gives back %d", h, asks[h])
				holders = slices.DeleteFunc(holders, func(x int) bool { return x == h })
				free += asks[h]
				w.Release(asks[h])
				want = collect()
				ok, err := scripts.Release(ctx, rdb, k, wire.SemArgs{Owner: "w:" + strconv.Itoa(h)})
				if err != nil || !ok {
					t.Fatalf("release %d: %v %v", h, ok, err)
				}
				got = settle(&distWaiting)
			}
			for _, id := range want {
				holders = append(holders, id)
				free -= asks[id]
				waiting = slices.DeleteFunc(waiting, func(x int) bool { return x == id })
			}
			st.grants += len(want)
			if len(want) > 1 {
				st.multiBatches++
			}
			if !slices.Equal(want, got) {
				t.Fatalf("after %s (pool %d): Weighted granted %v, the scripts %v; asks %v", what, pool, want, got, asks)
			}
		}
	}
}

// weightedWaiter is one Weighted waiter; parkedWaiters finds it in the
// goroutine dump by its name.
func weightedWaiter(ctx context.Context, w *semaphore.Weighted, n int64, id int, results chan<- int) {
	if w.Acquire(ctx, n) == nil {
		results <- id
	}
}

// parkedWaiters counts the weightedWaiter goroutines parked in Acquire.
func parkedWaiters() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "semaphore.(*Weighted).Acquire") && strings.Contains(g, "propertytests.weightedWaiter") {
			count++
		}
	}
	return count
}

func checkSemOracle(t *testing.T, b semBackend) {
	var st oracleStats
	rapid.Check(t, semOracleMachine(b, wire.SemFairDefault(), &st))
	t.Logf("%d sequences, %d grants, %d joins blocked by the queue although their ask fit, %d releases granting several",
		st.sequences, st.grants, st.blockedByQueue, st.multiBatches)
	// Not vacuous: the sequences reached the states the rule is about.
	requireReached(t, st.blockedByQueue > 0 && st.multiBatches > 0,
		"the sequences never had a join blocked by the queue (%d) or a release granting several (%d)", st.blockedByQueue, st.multiBatches)
}

func TestSemFairWeightedOracleMiniredis(t *testing.T) { checkSemOracle(t, semMini{}) }

func TestSemFairWeightedOracleRedisServer(t *testing.T) { checkSemOracle(t, newSemReal(t)) }

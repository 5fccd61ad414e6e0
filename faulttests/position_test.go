package faulttests

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// TestPositionFaults crowds two fair locks (one per engine) with waiters
// under every single-server fault, so that queues are deep and waiters
// join behind others between their reports; half of the fair waits ask for
// their queue position (workload_test.go) and CheckPositions checks every
// report. A run that compared too few reports fails: the check would be
// blind.
func TestPositionFaults(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	seed := seedFromEnv(t)
	dur := envDur("FAULT_POSITION_DURATION", 30*time.Second)
	w := Workload{
		Seed: seed, Clients: 6, Workers: 3,
		Locks:   []LockSpec{{"fr", FairRedisson, 0}, {"fs", FairScalable, 0}},
		MaxHold: 300 * time.Millisecond, MaxCtx: 8 * time.Second,
	}
	replay := fmt.Sprintf("FAULT_SEED=%d FAULT_POSITION_DURATION=%v go test ./faulttests/ -run TestPositionFaults -v", seed, dur)
	e := NewSingle(t)
	runRandom(t, e, w, dur, time.Second, singleServerFaults, replay)

	// the check compares a report with the one before it in the same call
	// when the later one does not say Joined: count those, per engine
	compared := map[LockKind]int{}
	for _, c := range e.H.Calls {
		for i := 1; i < len(c.Positions); i++ {
			if !c.Positions[i].Joined && c.Positions[i].Ahead >= 0 && c.Positions[i-1].Ahead >= 0 {
				compared[e.H.Locks[c.Lock]]++
			}
		}
	}
	t.Logf("reports compared with the one before: %v", compared)
	for _, k := range []LockKind{FairRedisson, FairScalable} {
		if compared[k] < 20 {
			t.Errorf("only %d position reports of %s compared: the position check is nearly blind", compared[k], k)
		}
	}
}

package faulttests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// The random fault test: many clients and goroutines run a random
// workload on a few locks of every kind while random faults fire; the
// history is then checked (checkers_test.go). The default is the bounded
// configuration CI runs; environment variables make it longer:
//
//	FAULT_SEED      replay a run (printed by every run)
//	FAULT_DURATION  how long the workload runs (default 45s)
//	FAULT_CLIENTS   clients (default 6), FAULT_WORKERS goroutines per client (default 2)
//	FAULT_GAP       mean pause between faults (default 1s)
//
// A long soak: FAULT_DURATION=30m go test ./faulttests/ -run TestRandomFaults -timeout 40m -v

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err == nil {
			return n
		}
	}
	return def
}

func envDur(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err == nil {
			return d
		}
	}
	return def
}

func seedFromEnv(t *testing.T) uint64 {
	if v := os.Getenv("FAULT_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FAULT_SEED=%q: %v", v, err)
		}
		return s
	}
	return rand.Uint64() >> 1
}

// singleServerFaults are the kinds the random test fires on one server.
var singleServerFaults = []FaultKind{FLatency, FStall, FReset, FSkew, FDead, FClose, FPubSubKill, FClientPause, FSigStop, FRestart}

func TestRandomFaults(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	seed := seedFromEnv(t)
	dur := envDur("FAULT_DURATION", 45*time.Second)
	gap := envDur("FAULT_GAP", time.Second)
	w := Workload{
		Seed: seed, Clients: envInt("FAULT_CLIENTS", 6), Workers: envInt("FAULT_WORKERS", 2),
		Locks: []LockSpec{{"re", Reentrant, 0}, {"fr", FairRedisson, 0}, {"fs", FairScalable, 0}, {"fr2", FairRedisson, 0},
			{"sf", SemFair, 3}, {"se", SemExpirable, 3}, {"venue", SeatsVenue, 0}},
		MaxHold: 800 * time.Millisecond, MaxCtx: 8 * time.Second,
	}
	replay := fmt.Sprintf("FAULT_SEED=%d FAULT_DURATION=%v FAULT_CLIENTS=%d FAULT_WORKERS=%d FAULT_GAP=%v go test ./faulttests/ -run TestRandomFaults -v",
		seed, dur, w.Clients, w.Workers, gap)
	runRandom(t, NewSingle(t), w, dur, gap, singleServerFaults, replay)
}

// runRandom runs workload w on e for dur while firing faults of kinds:
// every kind once, in a random order, then random kinds, a random gap
// apart, until the last 8 s of the run; deaths and closes keep 3 clients
// live. It then closes every client, checks, and reports.
func runRandom(t *testing.T, e *Env, w Workload, dur, gap time.Duration, kinds []FaultKind, replay string) {
	t.Logf("seed %d; replay: %s", w.Seed, replay)
	r := e.Start(w)
	rng := rand.New(rand.NewPCG(w.Seed, 1<<40))
	order := append([]FaultKind(nil), kinds...)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	failoverLock := e.LockName(w.Locks[rng.IntN(len(w.Locks))].ID)
	start := time.Now()
	tail := 8 * time.Second
	// Every kind fires once whatever the duration (a slow failover must
	// not crowd out the kinds after it); then random kinds until the tail.
	for i := 0; i < len(order) || time.Since(start) < dur-tail; i++ {
		time.Sleep(between(rng, gap/2, gap*3/2))
		k := kinds[rng.IntN(len(kinds))]
		if i < len(order) {
			k = order[i]
		}
		e.fire(k, rng, 3, failoverLock)
	}
	if rest := dur - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	r.Finish()
	e.recordUnplannedFailovers()

	fired := map[FaultKind]bool{}
	for _, f := range e.H.Faults {
		fired[f.Kind] = true
	}
	if len(e.H.Closes) > 0 {
		fired[FClose] = true
	}
	for _, k := range kinds {
		if !fired[k] {
			t.Errorf("fault %s never fired: run longer (FAULT_DURATION)", k)
		}
	}
	// the join hook recognises the fair scripts by their SHA: if they were
	// renamed or reshaped it would see nothing, and the order check would
	// pass vacuously
	fairWaits := 0
	for _, c := range e.H.Calls {
		if e.H.Locks[c.Lock].Fair() && c.Wait && !c.Reentry {
			fairWaits++
		}
	}
	if fairWaits > 20 && len(e.H.Joins) == 0 {
		t.Errorf("%d fair waits but the join hook saw no queue join: the order check is blind", fairWaits)
	}
	semVacuity(t, e.H, w)
	seatsVacuity(t, e.H, w, e)
	Report(t, e.H, replay)
}

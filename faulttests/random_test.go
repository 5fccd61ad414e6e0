package faulttests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// The random fault test: many clients and goroutines run a random
// workload on a few locks of every kind while random faults fire; the
// history is then checked (check.go). The default is the bounded
// configuration CI runs; environment variables make it longer:
//
//	FAULT_SEED      replay a run (printed by every run)
//	FAULT_DURATION  how long the workload runs (default 60s)
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
	seed := seedFromEnv(t)
	dur := envDur("FAULT_DURATION", 60*time.Second)
	gap := envDur("FAULT_GAP", time.Second)
	w := Workload{
		Seed: seed, Clients: envInt("FAULT_CLIENTS", 6), Workers: envInt("FAULT_WORKERS", 2),
		Locks:   []LockSpec{{"re", Reentrant}, {"fr", FairRedisson}, {"fs", FairScalable}, {"fr2", FairRedisson}},
		MaxHold: 800 * time.Millisecond, MaxCtx: 8 * time.Second,
	}
	replay := fmt.Sprintf("FAULT_SEED=%d FAULT_DURATION=%v FAULT_CLIENTS=%d FAULT_WORKERS=%d FAULT_GAP=%v go test ./faulttests/ -run TestRandomFaults -v",
		seed, dur, w.Clients, w.Workers, gap)
	t.Logf("seed %d; replay: %s", seed, replay)
	e := NewSingle(t)
	r := e.Start(w)

	// The faults: every kind once, in a random order, then random kinds,
	// until the tail of the run; deaths and closes keep 3 clients live.
	rng := rand.New(rand.NewPCG(seed, 1<<40))
	kinds := append([]FaultKind(nil), singleServerFaults...)
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	start := time.Now()
	tail := 8 * time.Second
	for i := 0; time.Since(start) < dur-tail; i++ {
		time.Sleep(between(rng, gap/2, gap*3/2))
		k := singleServerFaults[rng.IntN(len(singleServerFaults))]
		if i < len(kinds) {
			k = kinds[i]
		}
		e.fire(k, rng, 3, "")
	}
	if rest := dur - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	r.Finish()

	fired := map[FaultKind]bool{}
	for _, f := range e.H.Faults {
		fired[f.Kind] = true
	}
	if len(e.H.Closes) > 0 {
		fired[FClose] = true
	}
	for _, k := range singleServerFaults {
		if !fired[k] {
			t.Errorf("fault %s never fired: run longer (FAULT_DURATION)", k)
		}
	}
	Report(t, e.H, replay)
}

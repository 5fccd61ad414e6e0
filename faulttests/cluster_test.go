package faulttests

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// The random workload on a Redis Cluster (3 primaries, each with a
// replica): the primary serving one of the locks is killed (its replica is
// promoted, the old primary comes back as a replica), and per-client faults
// fire too. Acquisitions are acknowledged by a replica (WithReplicaAck, on
// by default), so the locks should survive; the checkers still allow the
// loss of an unreplicated write (a failover is a data-losing event).
func TestClusterPrimaryKilled(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	seed := seedFromEnv(t)
	dur := envDur("FAULT_CLUSTER_DURATION", 20*time.Second)
	w := Workload{
		Seed: seed, Clients: 4, Workers: 2,
		Locks:   []LockSpec{{"cre", Reentrant, 0}, {"cfr", FairRedisson, 0}, {"cfs", FairScalable, 0}, {"csf", SemFair, 3}, {"cse", SemExpirable, 3}},
		MaxHold: 800 * time.Millisecond, MaxCtx: 8 * time.Second,
	}
	replay := fmt.Sprintf("FAULT_SEED=%d FAULT_CLUSTER_DURATION=%v go test ./faulttests/ -run TestClusterPrimaryKilled -v", seed, dur)
	runRandom(t, NewCluster(t), w, dur, 2*time.Second, []FaultKind{FFailover, FLatency, FReset, FPubSubKill}, replay)
}

// The random workload on a primary with one replica (Sentinels promote the
// replica when the primary is killed).
func TestReplicaFailover(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	seed := seedFromEnv(t)
	dur := envDur("FAULT_CLUSTER_DURATION", 20*time.Second)
	w := Workload{
		Seed: seed, Clients: 4, Workers: 2,
		Locks:   []LockSpec{{"rre", Reentrant, 0}, {"rfr", FairRedisson, 0}, {"rfs", FairScalable, 0}, {"rsf", SemFair, 3}, {"rse", SemExpirable, 3}},
		MaxHold: 800 * time.Millisecond, MaxCtx: 8 * time.Second,
	}
	replay := fmt.Sprintf("FAULT_SEED=%d FAULT_CLUSTER_DURATION=%v go test ./faulttests/ -run TestReplicaFailover -v", seed, dur)
	runRandom(t, NewReplicated(t), w, dur, 2*time.Second, []FaultKind{FFailover, FLatency, FReset}, replay)
}

//go:build linux

package etcd

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/etcd/internal/etcdtest"
)

// Fault tests on a 3-member cluster of real etcd server processes (the
// `etcd` binary: Debian's etcd-server package, etcd 3.4, which .ci/run
// installs; under CI=true a missing binary fails these tests, elsewhere
// they are skipped). The faults are signals to a member process: SIGSTOP
// of the leader past the election timeout, SIGKILL of a member. The
// histories are checked as those of cluster_faults_test.go.

// procClient is a Client of the given endpoints (lease TTL faultTTL).
func procClient(t *testing.T, eps ...string) *Client {
	t.Helper()
	return procClientTTL(t, faultTTL, eps...)
}

// procClientTTL is procClient with lease TTL ttl.
func procClientTTL(t *testing.T, ttl time.Duration, eps ...string) *Client {
	t.Helper()
	c, err := New(etcdtest.ClusterClient(t, eps), WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func startProcCluster(t *testing.T) *etcdtest.ProcCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("real etcd cluster fault tests: not in -short")
	}
	return etcdtest.StartProcCluster(t, 3)
}

// TestRealEtcdPausedLeader: the leader process is paused (SIGSTOP) for
// longer than the election timeout and a lease TTL, the other two elect a
// new leader, then it is resumed (SIGCONT). Workers on Clients of the two
// followers hold and wait throughout; a holder on a follower's Client
// holds through the pause and must keep its hold (etcd keeps leases across
// a leader change). A worker on a Client of the paused member alone is
// hit by the fault: its holds may be lost (told in time), it is not held
// to arrival order, and after the resume it takes the lock again.
func TestRealEtcdPausedLeader(t *testing.T) {
	cl := startProcCluster(t)
	eps := cl.Endpoints()
	l := cl.WaitLeader(10 * time.Second)
	if l < 0 {
		t.Fatal("no leader")
	}
	f1, f2 := (l+1)%3, (l+2)%3
	pc := procClient(t, eps[l])
	clients := []*Client{procClient(t, eps[f1]), procClient(t, eps[f2]), procClient(t, eps[f1], eps[f2]), pc}
	r := newRun(t, "pause")
	r.faulted[pc.ID()] = true
	var wg sync.WaitGroup
	r.workers(clients, 6, &wg)
	time.Sleep(1500 * time.Millisecond)
	holder := mustMutex(t, procClientTTL(t, holderTTL, eps[f2], eps[f1]), "pause")
	var pausedAt, resumedAt time.Time
	ok, lost := r.hold(holder, "holder", faultTTL+2*time.Second, func() {
		pausedAt = time.Now()
		cl.Stop(l)
		nl := cl.WaitLeader(10 * time.Second)
		t.Logf("paused member %d (the leader); leader now %d after %v", l, nl, time.Since(pausedAt))
		if nl < 0 || nl == l {
			t.Errorf("no new leader within 10 s of pausing the leader (got %d)", nl)
		}
		time.Sleep(faultTTL)
		cl.Cont(l)
		resumedAt = time.Now()
	})
	if !ok {
		t.Fatal("the holder did not get the lock")
	}
	if lost {
		t.Fatalf("the hold was lost through the leader's pause: %v", holder.Err())
	}
	// After the resume the paused member's Client takes the lock again.
	again := mustMutex(t, pc, "pause")
	if ok, _ := r.hold(again, "again@"+pc.ID()[:6], 10*time.Millisecond, nil); !ok {
		t.Fatal("the resumed member's Client did not take the lock again")
	}
	time.Sleep(time.Second)
	r.stop.Store(true)
	wg.Wait()
	r.check(resumedAt, 5)
}

// TestRealEtcdKilledMember: a follower process is killed (SIGKILL) while
// Clients hold and wait; the holder's Client has that member as its first
// endpoint, so its connections are reset and it moves to another member.
// Its hold survives, the history keeps its statements and the lock keeps
// granting on the two remaining members.
func TestRealEtcdKilledMember(t *testing.T) {
	cl := startProcCluster(t)
	eps := cl.Endpoints()
	l := cl.WaitLeader(10 * time.Second)
	if l < 0 {
		t.Fatal("no leader")
	}
	victim := (l + 1) % 3
	rot := func(i int) []string { return []string{eps[i], eps[(i+1)%3], eps[(i+2)%3]} }
	clients := []*Client{procClient(t, rot(0)...), procClient(t, rot(1)...), procClient(t, rot(2)...)}
	r := newRun(t, "kill")
	var wg sync.WaitGroup
	r.workers(clients, 5, &wg)
	time.Sleep(1500 * time.Millisecond)
	holder := mustMutex(t, procClient(t, rot(victim)...), "kill")
	var killedAt time.Time
	ok, lost := r.hold(holder, "holder", faultTTL+2*time.Second, func() {
		killedAt = time.Now()
		cl.Kill(victim)
		if nl := cl.WaitLeader(10 * time.Second); nl < 0 {
			t.Error("no leader within 10 s after the kill")
		} else {
			t.Logf("killed member %d (leader %d); leader now %d", victim, l, nl)
		}
	})
	if !ok {
		t.Fatal("the holder did not get the lock")
	}
	if lost {
		t.Fatalf("the hold was lost through the kill: %v", holder.Err())
	}
	time.Sleep(2 * time.Second)
	r.stop.Store(true)
	wg.Wait()
	r.check(killedAt.Add(faultTTL), 5)
}

// holderTTL is the paused-leader test's holder's lease TTL: longer than
// etcd 3.4's forwarding of a keep-alive from a follower to the leader,
// which waits up to its request timeout (5 s + 2 election timeouts) on a
// paused leader (with a 3 s TTL the holder's lease expired in 2 runs of
// 4).
const holderTTL = 10 * time.Second

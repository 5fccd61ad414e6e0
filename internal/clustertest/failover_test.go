package clustertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// failoverScene is what a failover test measures: a fair lock with a
// holder and three queued waiters, on the primary that is killed. Waiters
// whose wait ends with an error (a script run while no primary served the
// slot) count the error and queue again, as an application would; the
// holder retries its unlock until it succeeds.
type failoverScene struct {
	name    string
	holder  *fair.Mutex
	inside  chanCounter
	mu      sync.Mutex
	order   []int
	got     []time.Time
	retries []error
	errs    []error
	wg      sync.WaitGroup
}

type chanCounter struct {
	mu sync.Mutex
	n  int
}

func (c *chanCounter) add(d int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += d
	return c.n
}

func startFailoverScene(ctx context.Context, t *testing.T, c *fairlock.Client, rdb redis.Cmdable, name string, n int) *failoverScene {
	t.Helper()
	s := &failoverScene{name: name, holder: newFair(t, c, name), got: make([]time.Time, n)}
	if err := s.holder.Lock(ctx); err != nil {
		t.Fatalf("holder: %v", err)
	}
	for i := 0; i < n; i++ {
		m := newFair(t, c, name)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				err := m.Lock(ctx)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					s.record(&s.errs, fmt.Errorf("waiter %d: %w", i, err))
					return
				}
				s.record(&s.retries, fmt.Errorf("waiter %d: %w", i, err))
				time.Sleep(50 * time.Millisecond)
			}
			at := time.Now()
			if k := s.inside.add(1); k != 1 {
				s.record(&s.errs, fmt.Errorf("%d holders at once", k))
			}
			s.mu.Lock()
			s.order = append(s.order, i)
			s.got[i] = at
			s.mu.Unlock()
			s.inside.add(-1)
			if err := unlockRetry(ctx, m); err != nil {
				s.record(&s.errs, fmt.Errorf("waiter %d unlock: %w", i, err))
			}
		}()
		waitQueued(ctx, t, rdb, name, m.Owner())
	}
	return s
}

func (s *failoverScene) record(to *[]error, err error) {
	s.mu.Lock()
	*to = append(*to, err)
	s.mu.Unlock()
}

// survived reports what of the lock the new primary has.
func survived(ctx context.Context, rdb redis.Cmdable, s *failoverScene) string {
	k := wire.KeysFor(s.name)
	held, _ := rdb.HExists(ctx, k.Name, s.holder.Owner()).Result()
	queued, _ := rdb.LLen(ctx, k.Queue).Result()
	return fmt.Sprintf("holder's hold present: %v, waiters queued: %d", held, queued)
}

// retryUntil runs f until it succeeds or ctx ends.
func retryUntil(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A cluster primary is killed while a fair lock on it is held and three
// waiters queue. Its replica is promoted; the hold (acknowledged by the
// replica at acquisition) and the queue survive; the holder's unlock goes
// through once the slot is served again, and the waiters resume in order.
// Locks on the other shards keep working during the outage. Every wait is
// bounded by the test's context. The times are logged, not asserted.
func TestClusterPrimaryKilled(t *testing.T) {
	redistest.Long(t)
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newClient(t, cc, fairlock.WithShardedPubSub(true), fairlock.WithLease(10*time.Second))
	byPrimary := namesOnEachPrimary(ctx, t, cl, redistest.Prefix(t), 1)
	var victim, other string
	for p := range byPrimary {
		if victim == "" {
			victim = p
		} else if other == "" {
			other = p
		}
	}
	name, otherName := byPrimary[victim][0], byPrimary[other][0]
	s := startFailoverScene(ctx, t, c, cc, name, 3)

	node := cl.Node(victim)
	killed := time.Now()
	node.Kill()
	defer func() {
		// Bring it back (it rejoins as a replica) for the tests after.
		if err := node.Restart(); err != nil {
			t.Error(err)
			return
		}
		hctx, hcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer hcancel()
		if err := cl.WaitHealthy(hctx); err != nil {
			t.Error(err)
		}
	}()

	// Another shard during the outage.
	om := newFair(t, c, otherName)
	octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
	if err := om.Lock(octx); err != nil {
		t.Errorf("lock on a healthy shard during the outage: %v", err)
	} else if err := om.Unlock(octx); err != nil {
		t.Errorf("unlock on a healthy shard during the outage: %v", err)
	}
	ocancel()

	slot := core.Slot(name)
	if err := retryUntil(ctx, func() error {
		p, err := cl.PrimaryOf(ctx, slot)
		if err == nil && p == victim {
			err = errors.New("not failed over yet")
		}
		return err
	}); err != nil {
		t.Fatalf("replica never promoted: %v", err)
	}
	promoted := time.Since(killed)
	var state string
	_ = retryUntil(ctx, func() error {
		state = survived(ctx, cc, s)
		return cc.Ping(ctx).Err()
	})
	if err := unlockRetry(ctx, s.holder); err != nil {
		t.Fatalf("holder's unlock after the failover: %v", err)
	}
	unlocked := time.Since(killed)
	s.wg.Wait()
	for _, err := range s.errs {
		t.Error(err)
	}
	if s.holder.Err() != nil {
		t.Errorf("the holder was told its lock was lost: %v", s.holder.Err())
	}
	if len(s.retries) == 0 {
		for i, w := range s.order {
			if i != w {
				t.Errorf("order %v after the failover, want arrival order", s.order)
				break
			}
		}
	}
	if !strings.Contains(state, "hold present: true") {
		t.Errorf("the acknowledged hold did not survive the failover: %s", state)
	}
	t.Logf("primary %s killed: replica promoted after %v; on the new primary: %s; holder's unlock went through at %v; waiters acquired at %v (order %v); waits that ended in an error and were retried: %d %v",
		victim, promoted.Round(time.Millisecond), state, unlocked.Round(time.Millisecond),
		offsets(s.got, killed), s.order, len(s.retries), s.retries)
}

func offsets(at []time.Time, from time.Time) []time.Duration {
	var out []time.Duration
	for _, t := range at {
		out = append(out, t.Sub(from).Round(time.Millisecond))
	}
	return out
}

// The same with Sentinel: a primary with one replica and three Sentinels,
// used through redis.NewFailoverClient. Before the failover, the replica
// acknowledgement is shown undoing an acquisition that no replica
// acknowledged (the replica is paused with SIGSTOP).
func TestSentinelFailover(t *testing.T) {
	redistest.Long(t)
	st := redistest.SentinelsT(t)
	rdb := st.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := redistest.Prefix(t)

	t.Run("no replica acknowledges", func(t *testing.T) {
		c := newClient(t, rdb, fairlock.WithReplicaAck(200*time.Millisecond))
		m := newFair(t, c, prefix+"unacked")
		if err := st.Replica.Pause(); err != nil {
			t.Fatal(err)
		}
		err := m.Lock(ctx)
		if rerr := st.Replica.Resume(); rerr != nil {
			t.Fatal(rerr)
		}
		if !errors.Is(err, fairlock.ErrNoReplicaAck) {
			t.Fatalf("Lock with the replica paused: %v, want ErrNoReplicaAck", err)
		}
		k := wire.KeysFor(m.Name())
		n, err := rdb.Exists(ctx, k.Name, k.Queue, k.Timeouts).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("the unacknowledged acquisition left %d keys behind", n)
		}
		// With the replica back, the same handle acquires.
		if err := retryUntil(ctx, func() error { return m.Lock(ctx) }); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("primary killed", func(t *testing.T) {
		c := newClient(t, rdb, fairlock.WithLease(10*time.Second))
		name := prefix + "failover"
		s := startFailoverScene(ctx, t, c, rdb, name, 3)
		old := st.Primary.Addr
		killed := time.Now()
		st.Primary.Kill()
		if err := retryUntil(ctx, func() error {
			a, err := st.MasterAddr(ctx)
			if err == nil && a == old {
				err = errors.New("not failed over yet")
			}
			return err
		}); err != nil {
			t.Fatalf("Sentinels never promoted the replica: %v", err)
		}
		promoted := time.Since(killed)
		var state string
		_ = retryUntil(ctx, func() error {
			state = survived(ctx, rdb, s)
			return rdb.Ping(ctx).Err()
		})
		if err := unlockRetry(ctx, s.holder); err != nil {
			t.Fatalf("holder's unlock after the failover: %v", err)
		}
		unlocked := time.Since(killed)
		s.wg.Wait()
		for _, err := range s.errs {
			t.Error(err)
		}
		if s.holder.Err() != nil {
			t.Errorf("the holder was told its lock was lost: %v", s.holder.Err())
		}
		if !strings.Contains(state, "hold present: true") {
			t.Errorf("the acknowledged hold did not survive the failover: %s", state)
		}
		t.Logf("Sentinel failover: promoted after %v; on the new primary: %s; holder's unlock went through at %v; waiters acquired at %v (order %v); waits ended by an error and retried: %d %v",
			promoted.Round(time.Millisecond), state, unlocked.Round(time.Millisecond), offsets(s.got, killed), s.order, len(s.retries), s.retries)
	})
}

package clustertest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

func newClient(t testing.TB, rdb redis.UniversalClient, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newFair(t testing.TB, c *fairlock.Client, name string) *fair.Mutex {
	t.Helper()
	m, err := fair.New(c, name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// namesOnEachPrimary returns n lock names per primary of the cluster, with
// prefix, keyed by primary address.
func namesOnEachPrimary(ctx context.Context, t testing.TB, cl *redistest.Cluster, prefix string, n int) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	owner := map[int]string{}
	for i := 0; len(out) < 3 || minLen(out) < n; i++ {
		if i > 10000 {
			t.Fatalf("could not place %d names on each primary: %v", n, out)
		}
		name := prefix + strconv.Itoa(i)
		slot := core.Slot(name)
		addr, ok := owner[slot]
		if !ok {
			var err error
			if addr, err = cl.PrimaryOf(ctx, slot); err != nil {
				t.Fatal(err)
			}
			owner[slot] = addr
		}
		if len(out[addr]) < n {
			out[addr] = append(out[addr], name)
		}
	}
	return out
}

func minLen(m map[string][]string) int {
	first := true
	n := 0
	for _, v := range m {
		if first || len(v) < n {
			n, first = len(v), false
		}
	}
	return n
}

// waitQueued polls until owner is in the fair lock's queue.
func waitQueued(ctx context.Context, t testing.TB, rdb redis.Cmdable, name, owner string) {
	t.Helper()
	q := wire.KeysFor(name).Queue
	for {
		_, err := rdb.LPos(ctx, q, owner, redis.LPosArgs{}).Result()
		if err == nil {
			return
		}
		if !errors.Is(err, redis.Nil) && ctx.Err() == nil {
			// a transient error during a failover or migration: retry
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never queued on %s: %v", owner, name, ctx.Err())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// queueScene is one fair lock with a holder and n waiters queued in order.
// Each waiter, once it has the lock, checks that nobody else has it, records
// its index, and releases.
type queueScene struct {
	name    string
	holder  *fair.Mutex
	waiters []*fair.Mutex
	inside  atomic.Int32
	mu      sync.Mutex
	order   []int
	errs    chan error
	got     []time.Time
	wg      sync.WaitGroup
}

func startScene(ctx context.Context, t testing.TB, c *fairlock.Client, rdb redis.Cmdable, name string, n int) *queueScene {
	t.Helper()
	s := &queueScene{name: name, holder: newFair(t, c, name), errs: make(chan error, n+1), got: make([]time.Time, n)}
	if err := s.holder.Lock(ctx); err != nil {
		t.Fatalf("holder of %s: %v", name, err)
	}
	for i := 0; i < n; i++ {
		m := newFair(t, c, name)
		s.waiters = append(s.waiters, m)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := m.Lock(ctx); err != nil {
				s.errs <- fmt.Errorf("waiter %d of %s: %w", i, name, err)
				return
			}
			at := time.Now()
			if k := s.inside.Add(1); k != 1 {
				s.errs <- fmt.Errorf("%s: %d holders at once", name, k)
			}
			s.mu.Lock()
			s.order = append(s.order, i)
			s.got[i] = at
			s.mu.Unlock()
			s.inside.Add(-1)
			if err := unlockRetry(ctx, m); err != nil {
				s.errs <- fmt.Errorf("waiter %d of %s unlock: %w", i, name, err)
			}
		}()
		waitQueued(ctx, t, rdb, name, m.Owner())
	}
	return s
}

// release unlocks the holder and waits for every waiter.
func (s *queueScene) release(ctx context.Context) error {
	if err := unlockRetry(ctx, s.holder); err != nil {
		return fmt.Errorf("holder of %s unlock: %w", s.name, err)
	}
	return s.wait()
}

func (s *queueScene) wait() error {
	s.wg.Wait()
	close(s.errs)
	var errs []error
	for err := range s.errs {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for i, w := range s.order {
		if i != w {
			return fmt.Errorf("%s: acquisition order %v, want arrival order", s.name, s.order)
		}
	}
	return nil
}

// unlockRetry unlocks, retrying transport errors (a failover in progress)
// until ctx ends. ErrNotHeld is returned at once.
func unlockRetry(ctx context.Context, m *fair.Mutex) error {
	for {
		err := m.Unlock(ctx)
		if err == nil || errors.Is(err, fairlock.ErrNotHeld) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func nodeID(ctx context.Context, addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	return c.Do(ctx, "cluster", "myid").Text()
}

// slotMigration moves one slot between primaries in the stages of
// redis-cli --cluster reshard: begin (IMPORTING/MIGRATING), move the keys
// (MIGRATE), finish (SETSLOT NODE on every primary).
type slotMigration struct {
	slot         int
	src, dst     string
	srcID, dstID string
	srcC, dstC   *redis.Client
	primaries    []string
}

func newMigration(ctx context.Context, cl *redistest.Cluster, slot int, dst string) (*slotMigration, error) {
	src, err := cl.PrimaryOf(ctx, slot)
	if err != nil {
		return nil, err
	}
	m := &slotMigration{slot: slot, src: src, dst: dst}
	if m.srcID, err = nodeID(ctx, src); err != nil {
		return nil, err
	}
	if m.dstID, err = nodeID(ctx, dst); err != nil {
		return nil, err
	}
	if m.primaries, err = cl.Primaries(ctx); err != nil {
		return nil, err
	}
	m.srcC = redis.NewClient(&redis.Options{Addr: src, MaxRetries: -1})
	m.dstC = redis.NewClient(&redis.Options{Addr: dst, MaxRetries: -1})
	return m, nil
}

func (m *slotMigration) close() { _ = m.srcC.Close(); _ = m.dstC.Close() }

func (m *slotMigration) begin(ctx context.Context) error {
	if err := m.dstC.Do(ctx, "cluster", "setslot", m.slot, "importing", m.srcID).Err(); err != nil {
		return err
	}
	return m.srcC.Do(ctx, "cluster", "setslot", m.slot, "migrating", m.dstID).Err()
}

// moveKeys migrates every key of the slot, in one MIGRATE per batch.
func (m *slotMigration) moveKeys(ctx context.Context) (int, error) {
	host, port, _ := strings.Cut(m.dst, ":")
	moved := 0
	for {
		keys, err := m.srcC.ClusterGetKeysInSlot(ctx, m.slot, 100).Result()
		if err != nil || len(keys) == 0 {
			return moved, err
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := m.srcC.Do(ctx, args...).Err(); err != nil {
			return moved, err
		}
		moved += len(keys)
	}
}

// finish moves what keys of the slot are still on the source, then
// assigns the slot to the destination on every primary. The source refuses
// SETSLOT NODE while it holds keys of the slot, unless the destination's
// cluster-bus update reached it first (it then drops them): a key left in
// the slot by an earlier test sharing the cluster made that a race, lost
// under load ("Can't assign hashslot ... while I still hold keys").
func (m *slotMigration) finish(ctx context.Context) error {
	if _, err := m.moveKeys(ctx); err != nil {
		return err
	}
	if err := m.dstC.Do(ctx, "cluster", "setslot", m.slot, "node", m.dstID).Err(); err != nil {
		return err
	}
	if err := m.srcC.Do(ctx, "cluster", "setslot", m.slot, "node", m.dstID).Err(); err != nil {
		return err
	}
	for _, p := range m.primaries {
		if p == m.src || p == m.dst {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: p, MaxRetries: -1})
		err := c.Do(ctx, "cluster", "setslot", m.slot, "node", m.dstID).Err()
		_ = c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

package propertytests

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/lua"
)

// The client-level machine drives the real fair.Mutex API: several owners
// on two clients lock (waiting in goroutines), re-enter, try, try with a
// short wait, unlock, unlock without holding, and cancel their waits. It
// records a history and checks it:
//
//   - mutual exclusion: an acquisition is recorded only while nobody holds
//     (a release is recorded before Unlock is called, so a grant that Redis
//     made before the release would be caught);
//   - FIFO: after a release, the waiter granted the lock is the one that
//     queued first among those still waiting, and it is granted promptly;
//   - the queue in Redis is exactly the machine's waiters in order, and a
//     cancelled or timed-out waiter has left it.
//
// It found a hang in the pub/sub hub (a Lock whose subscribe was cut short
// by its context, then a later Lock of the same owner blocked in Subscribe
// for ever, missing its wake-up; fixed in ad2797a).
//
// Timing only bounds waits (a grant must come within clientPatience); the
// machine never sleeps to order events: it waits to see each waiter queued
// in Redis before the next action.

const clientPatience = 10 * time.Second

type clientHandle struct {
	m      *fair.Mutex
	holds  int
	cancel context.CancelFunc // set while a Lock goroutine waits
	done   chan error         // the Lock goroutine's result
}

type clientMachine struct {
	ctx     context.Context
	rdb     *redis.Client
	keys    lua.Keys
	handles []*clientHandle

	mu       sync.Mutex
	holder   *clientHandle // who holds, by the history
	problems []string      // history violations seen by goroutines

	waiting []*clientHandle // queued Lock calls, in queue order
	grants  int
	log     []string // what happened, for failure messages
	start   time.Time
}

func (cm *clientMachine) logf(format string, args ...any) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	cm.log = append(cm.log, fmt.Sprintf("%8.3fms ", float64(time.Since(cm.start).Microseconds())/1000)+fmt.Sprintf(format, args...))
}

// fatalf fails with the machine's log and Redis's state.
func (cm *clientMachine) fatalf(t *rapid.T, format string, args ...any) {
	q, _ := cm.rdb.LRange(cm.ctx, cm.keys.Queue, 0, -1).Result()
	z, _ := cm.rdb.ZRangeWithScores(cm.ctx, cm.keys.Timeouts, 0, -1).Result()
	hs, _ := cm.rdb.HGetAll(cm.ctx, cm.keys.Name).Result()
	pttl, _ := cm.rdb.PTTL(cm.ctx, cm.keys.Name).Result()
	cm.mu.Lock()
	log := slices.Clone(cm.log)
	cm.mu.Unlock()
	t.Fatalf(format+"\nRedis at %d: hash %v pttl %v queue %v deadlines %v\nlog:\n%s\nlock goroutines:\n%s",
		append(args, time.Now().UnixMilli(), hs, pttl, q, z, strings.Join(log, "\n"), lockGoroutines())...)
}

// lockGoroutines returns the stacks of the goroutines inside the library.
func lockGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "fairlock/internal/core") || strings.Contains(g, "fairlock/internal/pubsub") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

func newClientMachine(t *rapid.T, rdb *redis.Client, name string) *clientMachine {
	cm := &clientMachine{ctx: context.Background(), rdb: rdb, keys: lua.KeysFor(name), start: time.Now()}
	for range 2 {
		c, err := fairlock.NewClient(rdb)
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		for range 2 {
			m, err := fair.New(c, name)
			if err != nil {
				t.Fatalf("mutex: %v", err)
			}
			cm.handles = append(cm.handles, &clientHandle{m: m})
		}
	}
	t.Cleanup(cm.stop)
	return cm
}

// acquired records that h took the lock, checking mutual exclusion.
func (cm *clientMachine) acquired(h *clientHandle) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.holder != nil && cm.holder != h {
		cm.problems = append(cm.problems, fmt.Sprintf("%s acquired while %s holds", h.m.Owner(), cm.holder.m.Owner()))
	}
	cm.holder = h
}

func (cm *clientMachine) releasing(h *clientHandle) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.holder == h {
		cm.holder = nil
	}
}

func (cm *clientMachine) pick(t *rapid.T, label string, ok func(*clientHandle) bool) *clientHandle {
	var hs []*clientHandle
	for _, h := range cm.handles {
		if ok(h) {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		t.Skip("no handle for " + label)
	}
	i := rapid.IntRange(0, len(hs)-1).Draw(t, label)
	return hs[i]
}

func idle(h *clientHandle) bool    { return h.holds == 0 && h.cancel == nil }
func holding(h *clientHandle) bool { return h.holds > 0 }
func waiting(h *clientHandle) bool { return h.cancel != nil }

func (cm *clientMachine) queue(t *rapid.T) []string {
	q, err := cm.rdb.LRange(cm.ctx, cm.keys.Queue, 0, -1).Result()
	if err != nil {
		t.Fatalf("lrange: %v", err)
	}
	return q
}

// lock starts a Lock in a goroutine and returns once the call has either
// taken the lock or is queued in Redis.
func (cm *clientMachine) lock(t *rapid.T) {
	h := cm.pick(t, "idle", idle)
	ctx, cancel := context.WithCancel(cm.ctx)
	h.cancel, h.done = cancel, make(chan error, 1)
	cm.logf("lock by %s", h.m.Owner())
	go func() {
		err := h.m.Lock(ctx)
		if err == nil {
			cm.acquired(h)
		}
		cm.logf("Lock by %s returned %v", h.m.Owner(), err)
		h.done <- err
	}()
	deadline := time.Now().Add(clientPatience)
	for {
		select {
		case err := <-h.done:
			h.cancel, h.done = nil, nil
			cancel()
			if err != nil {
				t.Fatalf("Lock by %s: %v", h.m.Owner(), err)
			}
			if len(cm.waiting) > 0 {
				t.Fatalf("Lock by %s took the lock past queued waiters", h.m.Owner())
			}
			h.holds = 1
			return
		default:
		}
		if slices.Contains(cm.queue(t), h.m.Owner()) {
			cm.logf("%s is queued", h.m.Owner())
			cm.waiting = append(cm.waiting, h)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Lock by %s neither acquired nor queued within %v", h.m.Owner(), clientPatience)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (cm *clientMachine) reenter(t *rapid.T) {
	h := cm.pick(t, "holder", holding)
	cm.logf("re-entry by %s", h.m.Owner())
	if err := h.m.Lock(cm.ctx); err != nil {
		t.Fatalf("re-entry by %s: %v", h.m.Owner(), err)
	}
	h.holds++
}

func (cm *clientMachine) tryLock(t *rapid.T) {
	h := cm.pick(t, "idle", idle)
	want := len(cm.waiting) == 0 && cm.holder == nil
	ok, err := h.m.TryLock(cm.ctx)
	cm.logf("TryLock by %s: %v %v", h.m.Owner(), ok, err)
	if err != nil {
		t.Fatalf("TryLock by %s: %v", h.m.Owner(), err)
	}
	if ok != want {
		t.Fatalf("TryLock by %s = %v, want %v (waiting %d)", h.m.Owner(), ok, want, len(cm.waiting))
	}
	if ok {
		cm.acquired(h)
		h.holds = 1
	}
}

// tryLockFor waits briefly while someone holds the lock: it must give up
// and leave the queue.
func (cm *clientMachine) tryLockFor(t *rapid.T) {
	if cm.holder == nil {
		t.Skip("nobody holds the lock")
	}
	h := cm.pick(t, "idle", idle)
	wait := time.Duration(rapid.IntRange(1, 20).Draw(t, "wait ms")) * time.Millisecond
	ok, err := h.m.TryLockFor(cm.ctx, wait, 0)
	cm.logf("TryLockFor(%v) by %s: %v %v", wait, h.m.Owner(), ok, err)
	if err != nil || ok {
		t.Fatalf("TryLockFor(%v) by %s while %s holds = %v, %v", wait, h.m.Owner(), cm.holder.m.Owner(), ok, err)
	}
}

// unlock releases one hold; releasing the last must hand the lock to the
// first waiter.
func (cm *clientMachine) unlock(t *rapid.T) {
	h := cm.pick(t, "holder", holding)
	if h.holds == 1 {
		cm.releasing(h)
	}
	err := h.m.Unlock(cm.ctx)
	cm.logf("Unlock by %s: %v", h.m.Owner(), err)
	if err != nil {
		t.Fatalf("Unlock by %s: %v", h.m.Owner(), err)
	}
	h.holds--
	if h.holds > 0 || len(cm.waiting) == 0 {
		return
	}
	next := cm.waiting[0]
	select {
	case err := <-next.done:
		if err != nil {
			t.Fatalf("the head %s's Lock failed: %v", next.m.Owner(), err)
		}
	case <-time.After(clientPatience):
		cm.fatalf(t, "the head %s did not get the lock within %v of the release", next.m.Owner(), clientPatience)
	}
	next.cancel()
	next.cancel, next.done = nil, nil
	next.holds = 1
	cm.waiting = cm.waiting[1:]
	cm.grants++
	// Nobody else may have been granted it.
	for _, w := range cm.waiting {
		select {
		case err := <-w.done:
			t.Fatalf("%s's Lock returned %v while %s holds", w.m.Owner(), err, next.m.Owner())
		default:
		}
	}
}

func (cm *clientMachine) unlockStranger(t *rapid.T) {
	h := cm.pick(t, "not holding", func(h *clientHandle) bool { return h.holds == 0 })
	if err := h.m.Unlock(cm.ctx); !errors.Is(err, fair.ErrNotHeld) {
		t.Fatalf("Unlock by %s, who does not hold: %v, want ErrNotHeld", h.m.Owner(), err)
	}
}

func (cm *clientMachine) cancelWait(t *rapid.T) {
	h := cm.pick(t, "waiter", waiting)
	cm.logf("cancel %s", h.m.Owner())
	h.cancel()
	select {
	case err := <-h.done:
		if !errors.Is(err, fair.ErrCanceled) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Lock by %s returned %v", h.m.Owner(), err)
		}
	case <-time.After(clientPatience):
		t.Fatalf("cancelled Lock by %s did not return", h.m.Owner())
	}
	h.cancel, h.done = nil, nil
	cm.waiting = slices.DeleteFunc(cm.waiting, func(w *clientHandle) bool { return w == h })
}

// check compares Redis with the machine: the queue holds the waiters in
// order, the hash the holder and its count.
func (cm *clientMachine) check(t *rapid.T) {
	cm.mu.Lock()
	problems := cm.problems
	cm.mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("history: %v", problems)
	}
	var want []string
	for _, w := range cm.waiting {
		want = append(want, w.m.Owner())
	}
	if got := cm.queue(t); !slices.Equal(got, want) {
		t.Fatalf("queue %v, want %v", got, want)
	}
	holds, err := cm.rdb.HGetAll(cm.ctx, cm.keys.Name).Result()
	if err != nil {
		t.Fatalf("hgetall: %v", err)
	}
	wantHolds := map[string]string{}
	for _, h := range cm.handles {
		if h.holds > 0 {
			wantHolds[h.m.Owner()] = fmt.Sprint(h.holds)
		}
	}
	if fmt.Sprint(holds) != fmt.Sprint(wantHolds) {
		t.Fatalf("lock hash %v, want %v", holds, wantHolds)
	}
}

// stop ends every wait and releases every hold, so no goroutine outlives
// the sequence.
func (cm *clientMachine) stop() {
	for _, h := range cm.handles {
		if h.cancel != nil {
			h.cancel()
			<-h.done
		}
	}
	for _, h := range cm.handles {
		for ; h.holds > 0; h.holds-- {
			_ = h.m.Unlock(cm.ctx)
		}
	}
}

func clientMachineOn(start func(t *rapid.T) (*redis.Client, string), c *counts) func(*rapid.T) {
	return func(t *rapid.T) {
		rdb, name := start(t)
		cm := newClientMachine(t, rdb, name)
		c.sequences++
		t.Cleanup(func() { c.queueGrants += cm.grants })
		t.Repeat(weighted(cm.check, []action{
			{"lock", 3, cm.lock},
			{"unlock", 2, cm.unlock},
			{"cancel", 1, cm.cancelWait},
			{"reenter", 1, cm.reenter},
			{"tryLock", 1, cm.tryLock},
			{"tryLockFor", 1, cm.tryLockFor},
			{"unlockStranger", 1, cm.unlockStranger},
		}))
	}
}

func TestFairClientRedisServer(t *testing.T) {
	rb := newRealBackend(t)
	var c counts
	rapid.Check(t, clientMachineOn(func(t *rapid.T) (*redis.Client, string) {
		rdb, name, _ := rb.start(t)
		return rdb, name
	}, &c))
	t.Logf("%d sequences, %d grants to a queued waiter after a release", c.sequences, c.queueGrants)
}

func TestFairClientMiniredis(t *testing.T) {
	var c counts
	rapid.Check(t, clientMachineOn(func(t *rapid.T) (*redis.Client, string) {
		rdb, name, _ := miniBackend{}.start(t)
		return rdb, name
	}, &c))
	t.Logf("%d sequences, %d grants to a queued waiter after a release", c.sequences, c.queueGrants)
}

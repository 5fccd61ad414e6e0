package propertytests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/lockstate"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// The client-level machine drives the real fair.Mutex API, on either fair
// engine (drawn per sequence), from four owners on two clients: Lock,
// re-entry, TryLock, TryLockFor, Unlock, Unlock without holding, and
// cancelled waits. Every call is recorded (history, liveness_test.go: the
// call's start and end, the reply that queued it, the reply that granted
// it, the releases and the leases passed) and the record is checked after
// every step, independently of the scripts' decisions:
//
//   - mutual exclusion: no grant certainly falls inside another hold;
//   - FIFO: nobody is granted the lock while a live waiter that queued
//     before its call started still waits (a waiter that gave up is exempt
//     once it left; a dead waiter is exempt);
//   - liveness: no live waiter waits longer than livenessBound after the
//     lock is free for it (not held, and everyone who joined before it has
//     left);
//
// and, in the untimed machine (whose state is settled after each step), the
// queue and the holders in Redis are exactly the machine's.
//
// The untimed machine (TestFairClientRedisServer, TestFairClientMiniredis)
// holds only with the watchdog and waits for the head's grant after each
// release: its steps take milliseconds. The timed machine
// (TestFairClientLiveness, real redis-server only: miniredis's clock does
// not move by itself) adds what takes real time: holders that let an
// explicit lease (1 or 2 s) run out instead of unlocking, TryLockFor waits
// and Acquire waits (the same with the default slot) of 1 to 3 s that run
// out in the queue, waiters whose client died (one
// queued script call, then nothing; only with a head grace of 1 s), and
// steps that wait for the next grant without unlocking. Both end every
// sequence by draining the queue: every holder unlocks and every live
// waiter must be granted within the bound.
//
// It found a hang in the pub/sub hub (a Lock whose subscribe was cut short
// by its context, then a later Lock of the same owner blocked in Subscribe
// for ever, missing its wake-up; fixed in ad2797a), and it catches case 1
// of issue 12 (a waiter told to sleep until the head's deadline sleeps
// through the next lease's expiry).

// clientPatience bounds what is not a grant: a call that must queue or
// return does so within it.
const clientPatience = 10 * time.Second

type clientHandle struct {
	m      *fair.Mutex
	holds  int      // watchdog holds (re-entries included)
	hold   *attempt // the attempt that took the current (or last) hold
	cur    *attempt // the acquisition in progress
	cancel context.CancelFunc
}

type clientMachine struct {
	ctx     context.Context
	rdb     *redis.Client
	name    string
	engine  fair.Engine
	grace   time.Duration // the head grace (negative: off)
	timed   bool
	h       *history
	handles []*clientHandle
	deadN   int
	grants  int // grants to a waiter that had queued
}

func (cm *clientMachine) engineName() string {
	if cm.engine == fair.Scalable {
		return "scalable"
	}
	return "redisson"
}

// fatalf fails with the record and Redis's state.
func (cm *clientMachine) fatalf(t *rapid.T, format string, args ...any) {
	t.Helper()
	var state string
	if r, err := lockstate.Read(cm.ctx, cm.rdb, cm.name); err == nil {
		var q []string
		for _, w := range r.Queue {
			q = append(q, fmt.Sprintf("%s(%+dms)", w.Owner, w.LeftMs))
		}
		state = fmt.Sprintf("holders %v lease %dms queue %v problems %v", r.Holders, r.LeaseMs, q, r.Problems)
	} else {
		state = err.Error()
	}
	t.Fatalf(format+"\nlock %q, engine %s, grace %v, timed %v\nRedis: %s\nrecord:\n%s\nlock goroutines:\n%s",
		append(args, cm.name, cm.engineName(), cm.grace, cm.timed, state, cm.h, lockGoroutines())...)
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

// clientSetup says which machine runs, on which engines and graces (one
// is drawn per sequence).
type clientSetup struct {
	timed   bool
	engines []fair.Engine
	graces  []time.Duration // as given to WithHeadGrace: -1 turns it off
}

var (
	allEngines = []fair.Engine{fair.Redisson, fair.Scalable}
	bothGraces = []time.Duration{-1, time.Second}
)

func newClientMachine(t *rapid.T, addr, name string, setup clientSetup) *clientMachine {
	cm := &clientMachine{ctx: context.Background(), name: name, timed: setup.timed}
	cm.engine = rapid.SampledFrom(setup.engines).Draw(t, "engine")
	cm.grace = rapid.SampledFrom(setup.graces).Draw(t, "grace")
	// The timed machine's watchdog lease is 5 s (renewed every 1.7 s), so
	// that a waiter behind a watchdog hold has a bound of seconds.
	watchdog := 30 * time.Second
	if cm.timed {
		watchdog = 5 * time.Second
	}
	cm.h = newHistory(cm.grace, watchdog)
	cm.rdb = redis.NewClient(&redis.Options{Addr: addr})
	cm.rdb.AddHook(replyHook{cm.h})
	t.Cleanup(func() { _ = cm.rdb.Close() })
	for range 2 {
		c, err := fairlock.NewClient(cm.rdb, fairlock.WithHeadGrace(cm.grace), fairlock.WithLease(watchdog))
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		for range 2 {
			m, err := fair.New(c, name, fair.WithEngine(cm.engine))
			if err != nil {
				t.Fatalf("mutex: %v", err)
			}
			cm.handles = append(cm.handles, &clientHandle{m: m})
		}
	}
	t.Cleanup(cm.stop)
	return cm
}

// States of a handle, as the machine knows them (after sync).

func (cm *clientMachine) waiting(hd *clientHandle) bool { return hd.cur != nil }

// leaseHeld: a hold with an explicit lease that may not have run out yet.
func (cm *clientMachine) leaseHeld(hd *clientHandle) bool {
	if hd.hold == nil || hd.hold.lease == 0 || hd.holds > 0 {
		return false
	}
	_, hi := cm.h.holdEnds(hd.hold)
	return time.Now().Before(hi)
}

func (cm *clientMachine) idle(hd *clientHandle) bool {
	return !cm.waiting(hd) && hd.holds == 0 && !cm.leaseHeld(hd)
}

func (cm *clientMachine) pick(t *rapid.T, label string, ok func(*clientHandle) bool) *clientHandle {
	var hs []*clientHandle
	for _, hd := range cm.handles {
		if ok(hd) {
			hs = append(hs, hd)
		}
	}
	if len(hs) == 0 {
		t.Skip("no handle for " + label)
	}
	return hs[rapid.IntRange(0, len(hs)-1).Draw(t, label)]
}

// sync takes in the acquisitions that returned since the last step.
func (cm *clientMachine) sync(t *rapid.T) {
	for _, hd := range cm.handles {
		a := hd.cur
		if a == nil {
			continue
		}
		select {
		case <-a.done:
		default:
			continue
		}
		hd.cur = nil
		hd.cancel()
		cm.settled(t, hd, a)
	}
}

// settled takes in a's outcome: a hold, a give-up, or an error.
func (cm *clientMachine) settled(t *rapid.T, hd *clientHandle, a *attempt) {
	switch {
	case a.granted:
		if !a.joinAt.IsZero() {
			cm.grants++
		}
		if a.reent {
			hd.holds++
			return
		}
		hd.hold = a
		if a.lease == 0 {
			hd.holds = 1
		}
	case a.err == nil:
		if a.wait == 0 || a.wait == fair.Forever {
			cm.fatalf(t, "#%d %s returned false with no error", a.n, a.label)
		}
	case a.cancelled && errors.Is(a.err, fair.ErrCanceled) && errors.Is(a.err, context.Canceled):
	default:
		cm.fatalf(t, "#%d %s: %v", a.n, a.label, a.err)
	}
}

// kinds of acquisition.
type acquireKind struct {
	name  string
	lease time.Duration // 0: the watchdog
	wait  time.Duration // fair.Forever: until cancelled
	slot  time.Duration // the wait slot (0: the default, 5 minutes)
}

func (cm *clientMachine) drawKind(t *rapid.T) acquireKind {
	if !cm.timed {
		return acquireKind{name: "Lock", wait: fair.Forever}
	}
	lease := func() time.Duration {
		return time.Duration(rapid.IntRange(1, 2).Draw(t, "lease s")) * time.Second
	}
	switch rapid.IntRange(0, 3).Draw(t, "kind") {
	case 0:
		return acquireKind{name: "Lock", wait: fair.Forever}
	case 1:
		return acquireKind{name: "LockWithLease", lease: lease(), wait: fair.Forever}
	}
	// TryLockFor's slot is its wait (Redisson's rule); Acquire gives up
	// after its wait but keeps the default slot, so its place is promised
	// (see protectedUntil).
	k := acquireKind{name: "TryLockFor", wait: time.Duration(rapid.IntRange(1, 3).Draw(t, "wait s")) * time.Second}
	k.slot = k.wait
	if rapid.Bool().Draw(t, "long slot") {
		k.name, k.slot = "Acquire", 0
	}
	if rapid.Bool().Draw(t, "with lease") {
		k.lease = lease()
	}
	return k
}

func (k acquireKind) call(ctx context.Context, m *fair.Mutex) (bool, error) {
	switch k.name {
	case "Lock":
		err := m.Lock(ctx)
		return err == nil, err
	case "LockWithLease":
		err := m.LockWithLease(ctx, k.lease)
		return err == nil, err
	case "Acquire":
		return m.Acquire(ctx, fair.AcquireOptions{Wait: k.wait, Lease: k.lease})
	}
	return m.TryLockFor(ctx, k.wait, k.lease)
}

func (k acquireKind) String() string {
	switch k.name {
	case "Lock":
		return "Lock"
	case "LockWithLease":
		return fmt.Sprintf("LockWithLease(%v)", k.lease)
	case "Acquire":
		return fmt.Sprintf("Acquire(wait %v, lease %v)", k.wait, k.lease)
	}
	return fmt.Sprintf("TryLockFor(%v, %v)", k.wait, k.lease)
}

func (cm *clientMachine) label(hd *clientHandle, what string) string {
	return fmt.Sprintf("%s by h%d", what, slices.Index(cm.handles, hd))
}

// lock starts an acquisition in a goroutine and returns once the call has
// either returned or is queued in Redis.
func (cm *clientMachine) lock(t *rapid.T) {
	cm.sync(t)
	hd := cm.pick(t, "idle", cm.idle)
	k := cm.drawKind(t)
	ctx, cancel := context.WithCancel(cm.ctx)
	a := cm.h.begin(&attempt{owner: hd.m.Owner(), label: cm.label(hd, k.String()), queues: true, lease: k.lease, wait: max(k.wait, 0), slot: k.slot})
	hd.cur, hd.cancel = a, cancel
	go func() {
		ok, err := k.call(withAttempt(ctx, a), hd.m)
		cm.h.finish(a, ok, err)
	}()
	if !cm.h.waitJoined(a, clientPatience) {
		cm.fatalf(t, "%s neither returned nor queued within %v", a.label, clientPatience)
	}
	cm.sync(t)
}

func (cm *clientMachine) reenter(t *rapid.T) {
	cm.sync(t)
	hd := cm.pick(t, "holder", func(hd *clientHandle) bool { return hd.holds > 0 })
	a := cm.h.begin(&attempt{owner: hd.m.Owner(), label: cm.label(hd, "re-entry"), reent: true})
	err := hd.m.Lock(withAttempt(cm.ctx, a))
	cm.h.finish(a, err == nil, err)
	if err != nil {
		cm.fatalf(t, "%s: %v", a.label, err)
	}
	cm.settled(t, hd, a)
}

// quiet reports that nobody holds or may hold the lock and nobody is or may
// be queued, as far as the record tells.
func (cm *clientMachine) quiet() bool {
	if cm.deadN > 0 {
		return false
	}
	for _, hd := range cm.handles {
		if !cm.idle(hd) {
			return false
		}
	}
	return true
}

func (cm *clientMachine) tryLock(t *rapid.T) {
	cm.sync(t)
	hd := cm.pick(t, "idle", cm.idle)
	free := cm.quiet()
	a := cm.h.begin(&attempt{owner: hd.m.Owner(), label: cm.label(hd, "TryLock")})
	ok, err := hd.m.TryLock(withAttempt(cm.ctx, a))
	cm.h.finish(a, ok, err)
	if err != nil {
		cm.fatalf(t, "%s: %v", a.label, err)
	}
	if free && !ok {
		cm.fatalf(t, "%s failed on a free lock with nobody queued", a.label)
	}
	if ok {
		cm.settled(t, hd, a)
	}
}

// tryLockFor waits briefly while someone holds the lock with the watchdog:
// it must give up and leave the queue.
func (cm *clientMachine) tryLockFor(t *rapid.T) {
	cm.sync(t)
	if !slices.ContainsFunc(cm.handles, func(hd *clientHandle) bool { return hd.holds > 0 }) {
		t.Skip("nobody holds the lock with the watchdog")
	}
	hd := cm.pick(t, "idle", cm.idle)
	wait := time.Duration(rapid.IntRange(1, 20).Draw(t, "wait ms")) * time.Millisecond
	a := cm.h.begin(&attempt{owner: hd.m.Owner(), label: cm.label(hd, fmt.Sprintf("TryLockFor(%v)", wait)), queues: true, wait: wait, slot: wait})
	ok, err := hd.m.TryLockFor(withAttempt(cm.ctx, a), wait, 0)
	cm.h.finish(a, ok, err)
	if err != nil || ok {
		cm.fatalf(t, "%s while the lock is held = %v, %v", a.label, ok, err)
	}
}

// unlock releases one watchdog hold. The untimed machine then waits for the
// head's grant; the timed one does so half the time.
func (cm *clientMachine) unlock(t *rapid.T) {
	cm.sync(t)
	hd := cm.pick(t, "holder", func(hd *clientHandle) bool { return hd.holds > 0 })
	cm.release(t, hd)
	if !cm.timed || rapid.Bool().Draw(t, "await") {
		cm.awaitNext(t)
	}
}

func (cm *clientMachine) release(t *rapid.T, hd *clientHandle) {
	last := hd.holds == 1
	if last {
		cm.h.releasing(hd.hold)
	}
	err := hd.m.Unlock(cm.ctx)
	if last {
		cm.h.released(hd.hold)
	}
	cm.h.logf("Unlock by h%d: %v", slices.Index(cm.handles, hd), err)
	if err != nil {
		cm.fatalf(t, "Unlock by h%d: %v", slices.Index(cm.handles, hd), err)
	}
	hd.holds--
}

func (cm *clientMachine) unlockStranger(t *rapid.T) {
	cm.sync(t)
	// A waiter of the timed machine may be granted at any moment: only
	// idle handles there.
	hd := cm.pick(t, "not holding", func(hd *clientHandle) bool {
		return hd.holds == 0 && !cm.leaseHeld(hd) && (!cm.timed || !cm.waiting(hd))
	})
	if err := hd.m.Unlock(cm.ctx); !errors.Is(err, fair.ErrNotHeld) {
		cm.fatalf(t, "Unlock by h%d, who does not hold: %v, want ErrNotHeld", slices.Index(cm.handles, hd), err)
	}
}

func (cm *clientMachine) cancelWait(t *rapid.T) {
	cm.sync(t)
	hd := cm.pick(t, "waiter", cm.waiting)
	a := hd.cur
	a.cancelled = true
	cm.h.cancelling(a)
	hd.cancel()
	select {
	case <-a.done:
	case <-time.After(clientPatience):
		cm.fatalf(t, "cancelled %s did not return within %v", a.label, clientPatience)
	}
	// The call returns when its ctx ends; leaving the queue goes on in the
	// background (the handle's next acquisition waits for it).
	if !a.granted {
		cm.awaitLeft(t, a)
	}
	cm.sync(t)
}

// awaitLeft waits until a's owner is neither queued nor holding in Redis
// (a grant that raced the cancellation is given back too).
func (cm *clientMachine) awaitLeft(t *rapid.T, a *attempt) {
	deadline := time.Now().Add(clientPatience)
	for {
		r, err := lockstate.Read(cm.ctx, cm.rdb, cm.name)
		if err != nil {
			t.Fatalf("read the lock state: %v", err)
		}
		if _, held := r.Holds()[a.owner]; !r.Queued(a.owner) && !held {
			return
		}
		if time.Now().After(deadline) {
			cm.fatalf(t, "cancelled %s still queued %v after its call returned", a.label, clientPatience)
		}
		time.Sleep(time.Millisecond)
	}
}

// dead queues a waiter whose client then dies: one call of the engine's
// waiting script (what Lock's first attempt sends), then nothing. Only with
// a head grace: without one a dead waiter blocks the queue for its whole
// slot (5 minutes), as in Redisson.
func (cm *clientMachine) dead(t *rapid.T) {
	cm.sync(t)
	if cm.grace <= 0 {
		t.Skip("no head grace")
	}
	if cm.quiet() {
		t.Skip("a dead waiter would take the free lock")
	}
	cm.deadN++
	var id [16]byte
	_, _ = rand.Read(id[:])
	owner := wire.Owner(hex.EncodeToString(id[:]), 1)
	a := cm.h.begin(&attempt{owner: owner, label: fmt.Sprintf("dead waiter d%d", cm.deadN), dead: true, queues: true, lease: time.Second})
	args := wire.Args{Owner: owner, LeaseMs: 1000, WaitMs: (5 * time.Minute).Milliseconds(), NowMs: time.Now().UnixMilli(), GraceMs: cm.grace.Milliseconds(), PubCmd: wire.Publish}
	ctx := withAttempt(cm.ctx, a)
	keys := wire.KeysFor(cm.name)
	var ok bool
	var err error
	if cm.engine == fair.Scalable {
		ok, _, err = wire.ScalableDefault().TryLockWait(ctx, cm.rdb, keys, args)
	} else {
		ok, _, err = wire.Default().FairTryLockWait(ctx, cm.rdb, keys, args)
	}
	if err != nil {
		cm.fatalf(t, "%s: %v", a.label, err)
	}
	if ok {
		cm.h.finish(a, true, nil) // it holds, for its lease
	}
}

// awaitNext waits until the first live waiter still waiting is granted,
// gives up, or overruns the bound; never longer than the bound once the
// lock is free for it.
func (cm *clientMachine) awaitNext(t *rapid.T) {
	cm.sync(t)
	until, w := cm.h.deadline(time.Now())
	if w == nil || until == never {
		return
	}
	select {
	case <-w.done:
	case <-time.After(time.Until(until) + 100*time.Millisecond):
	}
	cm.sync(t)
	cm.checkRecord(t)
}

func (cm *clientMachine) await(t *rapid.T) {
	cm.sync(t)
	if until, w := cm.h.deadline(time.Now()); w == nil || until == never {
		t.Skip("nobody to wait for")
	}
	cm.awaitNext(t)
}

func (cm *clientMachine) checkRecord(t *rapid.T) {
	if problems := cm.h.check(time.Now()); len(problems) > 0 {
		cm.fatalf(t, "%s", strings.Join(problems, "\n"))
	}
}

// check runs after every step: the record, and in the untimed machine the
// queue and holders in Redis.
func (cm *clientMachine) check(t *rapid.T) {
	cm.sync(t)
	cm.checkRecord(t)
	if cm.timed {
		return
	}
	r, err := lockstate.Read(cm.ctx, cm.rdb, cm.name)
	if err != nil {
		t.Fatalf("read the lock state: %v", err)
	}
	got, want := r.Owners(), []string{}
	var waiters []*attempt
	for _, hd := range cm.handles {
		if hd.cur != nil {
			waiters = append(waiters, hd.cur)
		}
	}
	slices.SortFunc(waiters, func(x, y *attempt) int { return x.n - y.n })
	for _, a := range waiters {
		want = append(want, a.owner)
	}
	if !slices.Equal(got, want) {
		cm.fatalf(t, "queue in Redis %v, want %v", got, want)
	}
	gotHolds, wantHolds := r.Holds(), map[string]int64{}
	for _, hd := range cm.handles {
		if hd.holds > 0 {
			wantHolds[hd.m.Owner()] = int64(hd.holds)
		}
	}
	if fmt.Sprint(gotHolds) != fmt.Sprint(wantHolds) {
		cm.fatalf(t, "lock hash %v, want %v", gotHolds, wantHolds)
	}
}

// drain ends a sequence: every watchdog holder unlocks and every live
// waiter must be granted (or give up) within the bound.
func (cm *clientMachine) drain(t *rapid.T) {
	for range 4 * len(cm.h.attempts) {
		cm.sync(t)
		for _, hd := range cm.handles {
			for hd.holds > 0 {
				cm.release(t, hd)
			}
		}
		until, w := cm.h.deadline(time.Now())
		if w == nil {
			break
		}
		if until == never {
			cm.sync(t) // a waiter may have been granted since the releases
			if slices.ContainsFunc(cm.handles, func(hd *clientHandle) bool { return hd.holds > 0 }) {
				continue
			}
			cm.fatalf(t, "%s waits with nobody holding the lock for ever", w.label)
		}
		cm.awaitNext(t)
	}
	cm.sync(t)
	cm.checkRecord(t)
}

// stop ends every wait and releases every hold, so no goroutine outlives
// the sequence (after a failure too).
func (cm *clientMachine) stop() {
	for _, hd := range cm.handles {
		if hd.cur != nil {
			hd.cur.cancelled = true
			hd.cancel()
			<-hd.cur.done
		}
	}
	for _, hd := range cm.handles {
		for ; hd.holds > 0; hd.holds-- {
			_ = hd.m.Unlock(cm.ctx)
		}
	}
}

func clientMachineOn(start func(t *rapid.T) (addr, name string), setup clientSetup, c *clientCounts) func(*rapid.T) {
	return func(t *rapid.T) {
		addr, name := start(t)
		cm := newClientMachine(t, addr, name, setup)
		c.sequences++
		c.engines[cm.engine]++
		t.Cleanup(func() { c.add(cm) })
		actions := []action{
			{"lock", 3, cm.lock},
			{"unlock", 2, cm.unlock},
			{"cancel", 1, cm.cancelWait},
			{"reenter", 1, cm.reenter},
			{"tryLock", 1, cm.tryLock},
			{"tryLockFor", 1, cm.tryLockFor},
			{"unlockStranger", 1, cm.unlockStranger},
		}
		if setup.timed {
			actions = append(actions, action{"await", 2, cm.await}, action{"dead", 1, cm.dead})
		}
		t.Repeat(weighted(cm.check, actions))
		cm.drain(t)
	}
}

// clientCounts are what a client-level test ran, for its log.
type clientCounts struct {
	sequences, grants, attempts, leaseHolds, giveUps, dead int
	engines                                                map[fair.Engine]int
	longest                                                time.Duration
}

func newClientCounts() *clientCounts { return &clientCounts{engines: map[fair.Engine]int{}} }

func (c *clientCounts) add(cm *clientMachine) {
	c.longest = max(c.longest, time.Since(cm.h.t0))
	c.grants += cm.grants
	c.dead += cm.deadN
	for _, a := range cm.h.attempts {
		c.attempts++
		if a.granted && a.lease > 0 && !a.dead {
			c.leaseHolds++
		}
		if !a.granted && !a.end.IsZero() && a.queues && !a.joinAt.IsZero() {
			c.giveUps++
		}
	}
}

func (c *clientCounts) String() string {
	return fmt.Sprintf("%d sequences (%d redisson, %d scalable), %d acquisitions, %d grants to a queued waiter, %d lease holds run out, %d give-ups from the queue, %d dead waiters; longest sequence %.1fs",
		c.sequences, c.engines[fair.Redisson], c.engines[fair.Scalable], c.attempts, c.grants, c.leaseHolds, c.giveUps, c.dead, c.longest.Seconds())
}

func TestFairClientRedisServer(t *testing.T) {
	rb := newRealBackend(t)
	c := newClientCounts()
	rapid.Check(t, clientMachineOn(func(t *rapid.T) (string, string) {
		_, name, _ := rb.start(t)
		return rb.rdb.Options().Addr, name
	}, clientSetup{engines: allEngines, graces: bothGraces}, c))
	t.Log(c)
}

func TestFairClientMiniredis(t *testing.T) {
	c := newClientCounts()
	rapid.Check(t, clientMachineOn(func(t *rapid.T) (string, string) {
		rdb, name, _ := miniBackend{}.start(t)
		return rdb.Options().Addr, name
	}, clientSetup{engines: allEngines, graces: bothGraces}, c))
	t.Log(c)
}

// livenessShare is the share of the rapid checks (-rapid.checks,
// RAPID_CHECKS) that TestFairClientLiveness runs per engine and grace: its
// sequences take seconds of real time each (about 5 s), the untimed ones
// milliseconds. ci.sh's 1000 checks give 5 sequences per subtest, about
// 30 s with the four in parallel; the default run 2 each, about 12 s.
const livenessShare = 200

// TestFairClientLiveness is the timed machine on a real redis-server, for
// each engine with the grace off and at 1 s: checks/livenessShare sequences
// each (at least 2), the four in parallel (they mostly sleep).
func TestFairClientLiveness(t *testing.T) {
	rb := newRealBackend(t)
	f := flag.Lookup("rapid.checks")
	checks, err := strconv.Atoi(f.Value.String())
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Value.Set(strconv.Itoa(max(2, checks/livenessShare)))
	defer func() { _ = f.Value.Set(strconv.Itoa(checks)) }()
	t.Run("all", func(t *testing.T) {
		for _, eng := range engines {
			for _, g := range bothGraces {
				name := eng.name + "/grace-off"
				if g > 0 {
					name = fmt.Sprintf("%s/grace-%v", eng.name, g)
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					c := newClientCounts()
					rapid.Check(t, clientMachineOn(func(t *rapid.T) (string, string) {
						_, name, _ := rb.start(t)
						return rb.rdb.Options().Addr, name
					}, clientSetup{timed: true, engines: []fair.Engine{eng.e}, graces: []time.Duration{g}}, c))
					t.Log(c)
				})
			}
		}
	})
}

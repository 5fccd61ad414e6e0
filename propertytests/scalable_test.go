package propertytests

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/lua"
	"github.com/fairlock-go/fairlock/model"
)

// The scalable fair-lock engine (lua/scalable_*.lua) must behave exactly as
// the Redisson-compatible one (lua/fair_*.lua) and as the model.
// scalableMachine runs the fair machine's operations on the model and on
// both engines (two lock names on the same server, the same arguments), and
// after every step compares the replies, the messages published (per waiter)
// and the whole state: the Redisson engine's keys as read by dump, the
// scalable engine's linked list mapped by dumpScalable to a model.Lock (queue
// order and absolute deadlines), and the model; all three are checked with
// the model's invariants.

type scHarness struct {
	ctx    context.Context
	rdb    *redis.Client
	clock  serverClock
	u, tol int64

	faithful *wire.Scripts
	scalable *wire.ScalableScripts
	fk, sk   wire.Keys
	fsub     *subscriber
	ssub     *subscriber

	f, s *model.Lock // each engine's state after the last step
	m    *model.Lock // the model, named as the scalable lock
	mPub int         // messages of the model already compared

	server  int64
	client  int64
	skew    map[string]int64
	grace   map[string]int64
	lastReq map[string]string
	lastAcq map[string]string // each owner's last acquisition request id
	nextReq int
	slot    map[string]int64
	c       *counts
	granted string // the head the last unlock granted the lock to ("": none)
	// stepGrace is the grace the step's script was called with (0: none
	// given), for the check of the sleep messages it published.
	stepGrace int64
}

func scalableMachine(b backend, scripts *wire.ScalableScripts, c *counts) func(*rapid.T) {
	return func(t *rapid.T) {
		rdb, name, clock := b.start(t)
		h := &scHarness{
			ctx: context.Background(), rdb: rdb, clock: clock, u: b.unit(), tol: b.tolerance(),
			faithful: wire.Default(), scalable: scripts,
			fk: wire.KeysFor(name + ":fa"), sk: wire.KeysFor(name + ":sc"),
			client: t0, skew: map[string]int64{}, grace: map[string]int64{},
			lastReq: map[string]string{}, slot: map[string]int64{}, c: c,
		}
		h.f, h.s, h.m = model.New(h.fk.Name), model.New(h.sk.Name), model.New(h.sk.Name)
		h.m.Handoff = true
		h.lastAcq = map[string]string{}
		h.fsub = subscribe(t, rdb, h.f.Names())
		h.ssub = subscribe(t, rdb, h.s.Names())
		c.sequences++
		for _, cl := range clients {
			h.grace[cl] = rapid.SampledFrom([]int64{0, 0, 1, 2, 5}).Draw(t, "grace "+cl) * h.u
		}
		t.Repeat(weighted(h.check, []action{
			{"join", 3, func(t *rapid.T) { h.tryLockWait(t, h.owner(t)) }},
			{"headPolls", 2, h.actHeadPolls},
			{"holderUnlocks", 2, func(t *rapid.T) { h.unlock(t, h.holderOr(t)) }},
			{"acquireFailed", 2, h.actAcquireFailed},
			{"advanceClient", 1, func(t *rapid.T) { h.client += h.dur(t, "d", 0, 10) }},
			{"pollQueued", 1, func(t *rapid.T) { h.tryLockWait(t, h.queued(t)) }},
			{"tryLock", 1, func(t *rapid.T) { h.tryLock(t, h.owner(t)) }},
			{"reenter", 1, h.actReenter},
			{"advanceServer", 1, func(t *rapid.T) { h.advance(t, h.dur(t, "d", 0, 10)) }},
			{"expireLease", 1, h.actExpireLease},
			{"forceUnlock", 1, h.actForceUnlock},
			{"renew", 1, h.actRenew},
			{"skewClient", 1, func(t *rapid.T) {
				h.skew[rapid.SampledFrom(clients).Draw(t, "client")] = h.dur(t, "skew", -6, 6)
			}},
			{"persistLease", 1, h.actPersist},
			{"reentrantForceUnlock", 1, h.actPlainForceUnlock},
			{"abandon", 1, h.actAbandon},
		}))
	}
}

func (h *scHarness) dur(t *rapid.T, label string, lo, hi int64) int64 {
	return rapid.Int64Range(lo, hi).Draw(t, label) * h.u
}
func (h *scHarness) owner(t *rapid.T) string     { return rapid.SampledFrom(owners).Draw(t, "owner") }
func (h *scHarness) now(owner string) int64      { return h.client + h.skew[clientOf(owner)] }
func (h *scHarness) lease(t *rapid.T) int64      { return h.dur(t, "lease", 1, 30) }
func (h *scHarness) wait(t *rapid.T) int64       { return h.dur(t, "wait", 1, 40) }
func (h *scHarness) within(want, got int64) bool { return scWithin(h.tol, want, got) }

// scWithin compares values that may come from the server's clock: on
// redis-server they lag by the real time elapsed (under tol). The special
// PTTL replies are exact; a computed value is a multiple of the unit on the
// real backend and never equals them.
func scWithin(tol, want, got int64) bool {
	if tol == 0 || want == model.NoLock || want == model.NoExpiry {
		return want == got
	}
	return want-tol < got && got < want+tol
}

func (h *scHarness) queued(t *rapid.T) string {
	if len(h.f.Queue) == 0 {
		t.Skip("nobody queued")
	}
	return rapid.SampledFrom(h.f.Queue).Draw(t, "waiter")
}

func (h *scHarness) holderOr(t *rapid.T) string {
	if hd := h.f.Holder(); hd != "" && rapid.IntRange(0, 3).Draw(t, "pick") > 0 {
		return hd
	}
	return h.owner(t)
}

func (h *scHarness) args(owner string, lease, wait int64) wire.Args {
	h.stepGrace = h.grace[clientOf(owner)]
	return wire.Args{Owner: owner, LeaseMs: lease, WaitMs: wait, NowMs: h.now(owner), GraceMs: h.grace[clientOf(owner)]}
}

func (h *scHarness) noErr(t *rapid.T, what string, errs ...error) {
	for _, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// acquireID: drawAcquireID.
func (h *scHarness) acquireID(t *rapid.T, owner string) (string, int64) {
	return drawAcquireID(t, owner, h.lastAcq, &h.nextReq, h.u)
}

func (h *scHarness) tryLockWait(t *rapid.T, owner string) {
	a := h.args(owner, h.lease(t), h.wait(t))
	a.AcquireID, a.LatchMs = h.acquireID(t, owner)
	var fok, sok bool
	var fttl, sttl, ftok, stok int64
	var ferr, serr error
	var fahead, sahead wire.Ahead
	position := rapid.Bool().Draw(t, "position")
	wasQueued := slices.Contains(h.m.Queue, owner)
	// A copy of a request the scalable engine's release granted the lock
	// to claims the grant (the lock's TTL becomes its lease, the latch's its
	// lifetime); on the Redisson engine the head took the lock itself, so
	// the copy only replies from the latch. The claim is applied there by
	// hand below, as the grant's TTLs were (unlock).
	claims := a.AcquireID != "" && h.m.Holds[owner] > 0 &&
		h.m.AcquireLatches[a.AcquireID].State == model.LatchGranted
	if position {
		fok, fttl, ftok, fahead, ferr = h.faithful.Fair().TryLockWaitAhead(h.ctx, h.rdb, h.fk, a)
		sok, sttl, stok, sahead, serr = h.scalable.Fair().TryLockWaitAhead(h.ctx, h.rdb, h.sk, a)
	} else {
		fok, fttl, ftok, ferr = h.faithful.Fair().TryLockWaitToken(h.ctx, h.rdb, h.fk, a)
		sok, sttl, stok, serr = h.scalable.Fair().TryLockWaitToken(h.ctx, h.rdb, h.sk, a)
	}
	latchMs := int64(0)
	if a.AcquireID != "" {
		latchMs = max(a.LatchMs, 1)
	}
	mok, mttl, mtok, merr := h.m.FairTryLockWaitRequest(h.server, a.NowMs, owner, a.LeaseMs, a.WaitMs, a.GraceMs, a.AcquireID, latchMs)
	if (merr != nil) != (serr != nil) || (ferr != nil) != (serr != nil) {
		t.Fatalf("tryLockWait by %s (request %q): model error %v, scalable %v, Redisson engine %v", owner, a.AcquireID, merr, serr, ferr)
	}
	if serr != nil {
		h.end(t, "tryLockWait (latched error) "+owner)
		return
	}
	if mok != sok || !mok && !h.within(mttl, sttl) || mok && mtok != stok {
		t.Fatalf("tryLockWait by %s: model (%v, %d, token %d), scalable (%v, %d, token %d)\nbefore: %v", owner, mok, mttl, mtok, sok, sttl, stok, h.s)
	}
	if fok && ftok != stok {
		t.Fatalf("tryLockWait by %s: Redisson engine's token %d, scalable %d", owner, ftok, stok)
	}
	if position && !sok {
		h.c.positions++
		exact, bySeq := h.m.Ahead(owner)
		if want := (wire.Ahead{Ahead: exact, Joined: !wasQueued}); fahead != want {
			t.Fatalf("tryLockWait by %s: Redisson engine's position %+v, model %+v (queue %v)", owner, fahead, want, h.m.Queue)
		}
		if want := (wire.Ahead{Ahead: bySeq, Joined: !wasQueued}); sahead != want {
			t.Fatalf("tryLockWait by %s: scalable engine's position %+v, model %+v (queue %v, seqs %v)", owner, sahead, want, h.m.Queue, h.m.Seqs)
		}
	}
	if fok != sok || !fok && !h.within(fttl, sttl) {
		t.Fatalf("tryLockWait by %s: Redisson engine (%v, %d), scalable (%v, %d)\nbefore: %v", owner, fok, fttl, sok, sttl, h.f)
	}
	if !fok && !slices.Contains(h.f.Queue, owner) {
		h.slot[owner] = a.WaitMs
	}
	if claims && sok {
		// The claim set the lock's TTL to the copy's lease unless that
		// would have shortened it: the Redisson engine's lock gets the
		// scalable one's TTL.
		ms := func(d int64) time.Duration { return time.Duration(d) * time.Millisecond }
		pttl, err := h.rdb.PTTL(h.ctx, h.sk.Name).Result()
		h.noErr(t, "pttl", err)
		set := h.rdb.Persist(h.ctx, h.fk.Name).Err()
		if pttl > 0 {
			set = h.rdb.PExpire(h.ctx, h.fk.Name, pttl).Err()
		}
		h.noErr(t, "pexpire", set, h.rdb.PExpire(h.ctx, h.fk.AcquireLatch(a.AcquireID), ms(max(a.LatchMs, 1))).Err())
	}
	h.end(t, "tryLockWait "+owner)
}

func (h *scHarness) tryLock(t *rapid.T, owner string) {
	a := h.args(owner, h.lease(t), h.wait(t))
	fok, ferr := h.faithful.FairTryLock(h.ctx, h.rdb, h.fk, a)
	sok, serr := h.scalable.TryLock(h.ctx, h.rdb, h.sk, a)
	h.noErr(t, "tryLock", ferr, serr)
	if mok := h.m.FairTryLock(h.server, a.NowMs, owner, a.LeaseMs, a.WaitMs, a.GraceMs); mok != sok {
		t.Fatalf("tryLock by %s: model %v, scalable %v\nbefore: %v", owner, mok, sok, h.s)
	}
	if fok != sok {
		t.Fatalf("tryLock by %s: Redisson engine %v, scalable %v\nbefore: %v", owner, fok, sok, h.f)
	}
	h.end(t, "tryLock "+owner)
}

func (h *scHarness) actHeadPolls(t *rapid.T) {
	if len(h.f.Queue) == 0 {
		t.Skip("nobody queued")
	}
	if rapid.IntRange(0, 3).Draw(t, "no-wait") == 0 {
		h.tryLock(t, h.f.Queue[0])
	} else {
		h.tryLockWait(t, h.f.Queue[0])
	}
}

func (h *scHarness) actReenter(t *rapid.T) {
	hd := h.f.Holder()
	if hd == "" {
		t.Skip("nobody holds the lock")
	}
	if rapid.Bool().Draw(t, "wait") {
		h.tryLockWait(t, hd)
	} else {
		h.tryLock(t, hd)
	}
}

func (h *scHarness) actAcquireFailed(t *rapid.T) {
	owner := h.owner(t)
	if len(h.f.Queue) > 0 && rapid.IntRange(0, 4).Draw(t, "queued") > 0 {
		owner = h.queued(t)
	}
	wait, ok := h.slot[owner]
	if !ok || rapid.IntRange(0, 5).Draw(t, "other slot") == 0 {
		wait = h.wait(t)
	}
	a := wire.Args{Owner: owner, WaitMs: wait, GraceMs: h.grace[clientOf(owner)]}
	h.stepGrace = a.GraceMs
	h.m.FairAcquireFailed(h.server, owner, wait, a.GraceMs)
	h.noErr(t, "acquireFailed", h.faithful.FairAcquireFailed(h.ctx, h.rdb, h.fk, a), h.scalable.AcquireFailed(h.ctx, h.rdb, h.sk, a))
	h.end(t, "acquireFailed "+owner)
}

// actAbandon gives a request up (abandon.lua, as a client leaving a wait
// does before it leaves the queue): mostly a queued waiter's last request,
// which a release must then not grant (its latch exists).
func (h *scHarness) actAbandon(t *rapid.T) {
	owner := h.owner(t)
	if len(h.m.Queue) > 0 && rapid.IntRange(0, 3).Draw(t, "queued") > 0 {
		owner = h.queued(t)
	}
	req := h.lastAcq[owner]
	if req == "" {
		t.Skip("no request of this owner")
	}
	a := wire.Args{Owner: owner, AcquireID: req, LatchMs: h.dur(t, "abandon latch", 1, 40)}
	fr, ferr := wire.Default().Abandon(h.ctx, h.rdb, h.fk, a)
	sr, serr := wire.Default().Abandon(h.ctx, h.rdb, h.sk, a)
	h.noErr(t, "abandon", ferr, serr)
	if mr := h.m.Abandon(h.server, owner, req, a.LatchMs); mr != sr {
		t.Fatalf("abandon %s by %s: model %v, scalable %v", req, owner, mr, sr)
	}
	if fr != sr {
		t.Fatalf("abandon %s by %s: Redisson engine %v, scalable %v", req, owner, fr, sr)
	}
	h.end(t, "abandon "+req+" by "+owner)
}

func (h *scHarness) unlock(t *rapid.T, owner string) {
	a := h.args(owner, h.lease(t), 0)
	a.LatchMs = h.dur(t, "latch", 1, 20)
	if last, ok := h.lastReq[owner]; ok && rapid.IntRange(0, 4).Draw(t, "retry") == 0 {
		a.RequestID = last
	} else {
		h.nextReq++
		a.RequestID = "req" + strconv.Itoa(h.nextReq)
		h.lastReq[owner] = a.RequestID
	}
	fr, ferr := h.faithful.FairUnlock(h.ctx, h.rdb, h.fk, a)
	sr, serr := h.scalable.Unlock(h.ctx, h.rdb, h.sk, a)
	h.noErr(t, "unlock", ferr, serr)
	// The waiters and their notes before the unlock: its prune may drop
	// stale heads before it grants, so the grant's owner is found by its
	// channel among them (the model decides whom to grant; the Redisson
	// engine's take below must then succeed for that owner).
	queue0, notes0, m0 := slices.Clone(h.m.Queue), maps.Clone(h.m.Notes), len(h.m.Published)
	if mr := h.m.FairUnlock(h.server, a.NowMs, owner, a.LeaseMs, a.RequestID, a.LatchMs, a.GraceMs); int(mr) != int(sr) {
		t.Fatalf("unlock by %s: model %v, scalable %v", owner, mr, sr)
	}
	if fr != sr {
		t.Fatalf("unlock by %s: Redisson engine %v, scalable %v", owner, fr, sr)
	}
	// The scalable engine's release granted the lock to the head (the
	// model says so: a grant message): the Redisson engine's release did
	// too for a head of this library's clients (then the take below claims
	// the grant), while a Java client's head takes it itself, so the head's
	// take runs there now, as its client would (its request, lease and slot
	// as it joined), and the lock's TTL is set to the grant's and its
	// latch's to the grant latch's (at least the grant's TTL); then both
	// engines must be in the same state again.
	h.granted = ""
	for _, msg := range h.m.Published[m0:] {
		if g, ok := wire.ParseGrant(msg.Payload); ok {
			i := slices.IndexFunc(queue0, func(o string) bool { return msg.Channel == h.sk.WaiterChannel(o) })
			if i < 0 || g.RequestID != notes0[queue0[i]].RequestID {
				t.Fatalf("unlock by %s: grant %q on %s; the queue was %v (notes %v)", owner, msg.Payload, msg.Channel, queue0, notes0)
			}
			head := queue0[i]
			note := notes0[head]
			h.c.grants++
			h.granted = head
			ta := h.args(head, note.LeaseMs, note.SlotMs)
			ta.AcquireID, ta.LatchMs = note.RequestID, note.LatchMs
			ok, _, tok, err := h.faithful.Fair().TryLockWaitToken(h.ctx, h.rdb, h.fk, ta)
			h.noErr(t, "the Redisson engine's take", err)
			if !ok || tok != g.Token {
				t.Fatalf("unlock by %s granted %s (token %d); on the Redisson engine its take got (%v, token %d)", owner, head, g.Token, ok, tok)
			}
			ms := func(d int64) time.Duration { return time.Duration(d) * time.Millisecond }
			h.noErr(t, "pexpire", h.rdb.PExpire(h.ctx, h.fk.Name, ms(g.TTLMs)).Err(),
				h.rdb.PExpire(h.ctx, h.fk.AcquireLatch(note.RequestID), ms(max(note.LatchMs, g.TTLMs))).Err())
		}
	}
	h.stepGrace = a.GraceMs // the scalable engine's messages are the unlock's (the take above ran on the other engine)
	h.end(t, "unlock "+owner)
}

func (h *scHarness) actForceUnlock(t *rapid.T) {
	c := rapid.SampledFrom(clients).Draw(t, "client")
	a := wire.Args{NowMs: h.client + h.skew[c], GraceMs: h.grace[c]}
	h.stepGrace = a.GraceMs
	fr, ferr := h.faithful.FairForceUnlock(h.ctx, h.rdb, h.fk, a)
	sr, serr := h.scalable.ForceUnlock(h.ctx, h.rdb, h.sk, a)
	h.noErr(t, "forceUnlock", ferr, serr)
	if mr := h.m.FairForceUnlock(h.server, a.NowMs, a.GraceMs); mr != sr {
		t.Fatalf("forceUnlock: model %v, scalable %v", mr, sr)
	}
	if fr != sr {
		t.Fatalf("forceUnlock: Redisson engine %v, scalable %v", fr, sr)
	}
	h.end(t, "forceUnlock")
}

// actPlainForceUnlock runs the reentrant lock's forceUnlock on both hashes:
// the lock goes, the queue stays and nobody is woken on a waiter channel.
func (h *scHarness) actPlainForceUnlock(t *rapid.T) {
	fr, ferr := wire.Default().ForceUnlock(h.ctx, h.rdb, h.fk, wire.Args{})
	sr, serr := wire.Default().ForceUnlock(h.ctx, h.rdb, h.sk, wire.Args{})
	h.noErr(t, "plain forceUnlock", ferr, serr)
	if mr := h.m.ForceUnlock(h.server); mr != sr {
		t.Fatalf("plain forceUnlock: model %v, scalable %v", mr, sr)
	}
	if fr != sr {
		t.Fatalf("plain forceUnlock: %v vs %v", fr, sr)
	}
	h.end(t, "plain forceUnlock")
}

func (h *scHarness) actRenew(t *rapid.T) {
	o, lease := h.holderOr(t), h.lease(t)
	fr, ferr := wire.Default().Renew(h.ctx, h.rdb, []string{h.fk.Name}, []string{o}, lease)
	sr, serr := wire.Default().Renew(h.ctx, h.rdb, []string{h.sk.Name}, []string{o}, lease)
	h.noErr(t, "renew", ferr, serr)
	if mr := h.m.Renew(h.server, o, lease); mr != sr[0] {
		t.Fatalf("renew: model %v, scalable %v", mr, sr[0])
	}
	if !slices.Equal(fr, sr) {
		t.Fatalf("renew: %v vs %v", fr, sr)
	}
	h.end(t, "renew")
}

func (h *scHarness) actPersist(t *rapid.T) {
	fr, ferr := h.rdb.Persist(h.ctx, h.fk.Name).Result()
	sr, serr := h.rdb.Persist(h.ctx, h.sk.Name).Result()
	h.noErr(t, "persist", ferr, serr)
	if mr := h.m.Persist(h.server); mr != sr {
		t.Fatalf("persist: model %v, scalable %v", mr, sr)
	}
	if fr != sr {
		t.Fatalf("persist: %v vs %v", fr, sr)
	}
	h.end(t, "persist")
}

func (h *scHarness) advance(t *rapid.T, d int64) {
	h.server += d
	h.noErr(t, "fast-forward", h.clock(h.ctx, d))
	h.end(t, "time")
}

// actExpireLease moves the server clock to the end of the lease (rounded up
// to the backend's unit: on redis-server a little real time has passed).
func (h *scHarness) actExpireLease(t *rapid.T) {
	if !h.f.Locked() || h.f.LeaseEnd == model.NoExpiry {
		t.Skip("no lease running")
	}
	d := h.f.LeaseEnd - h.server
	h.advance(t, (d+h.u-1)/h.u*h.u)
}

// end reads both engines' state and messages and compares them.
func (h *scHarness) end(t *rapid.T, what string) {
	h.c.steps++
	fpub, ferr := h.fsub.drain(h.ctx)
	spub, serr := h.ssub.drain(h.ctx)
	h.noErr(t, "pub/sub", ferr, serr)
	granted := h.granted
	h.granted = ""
	f, ferr := dump(h.ctx, h.rdb, h.f.Names(), h.server)
	s, serr := dumpScalable(h.ctx, h.rdb, h.sk, h.server)
	h.noErr(t, "dump", ferr, serr)
	s.Handoff = true
	if err := h.compare(f, s, fpub, spub, granted != ""); err != nil {
		t.Fatalf("after %s: the engines differ: %v\nRedisson engine: %v\nscalable:        %v", what, err, f, s)
	}
	// A wake-up that carries its reply keeps the promise of the attempt it
	// replaces (model.CheckSleepMessage), on what Redis holds.
	for _, m := range spub {
		if strings.HasPrefix(m.Payload, "s:") {
			h.c.sleepNotes++
			if err := model.CheckSleepMessage(s, h.server, strings.TrimPrefix(m.Channel, h.sk.Channel+":"), m.Payload, h.stepGrace, h.tol); err != nil {
				t.Fatalf("after %s: %v\nscalable: %v", what, err, s)
			}
		}
	}
	h.stepGrace = 0
	h.m.Advance(h.server)
	if err := h.compareModel(s, spub); err != nil {
		t.Fatalf("after %s: the scalable engine differs from the model: %v\nmodel:    %v\nscalable: %v", what, err, h.m, s)
	}
	h.c.maxQueue = max(h.c.maxQueue, len(f.Queue))
	h.c.notified += len(fpub)
	h.f, h.s = f, s
}

// compare compares the two engines' states and messages. granted: in this
// step the scalable engine's release granted the lock to the head and the
// Redisson engine's head took it itself, so the messages are compared as
// the set of channels woken (a grant counts as a wake-up: the Redisson
// engine woke the head, and the new first two twice, once for the release
// and once for the take), and a 'granted' latch as a 'held' one.
func (h *scHarness) compare(f, s *model.Lock, fpub, spub []model.Message, granted bool) error {
	if !maps.Equal(f.Holds, s.Holds) {
		return fmt.Errorf("hash %v vs %v", f.Holds, s.Holds)
	}
	if f.Locked() && ((f.LeaseEnd == model.NoExpiry) != (s.LeaseEnd == model.NoExpiry) || !h.within(f.LeaseEnd, s.LeaseEnd)) {
		return fmt.Errorf("lease ends %d vs %d", f.LeaseEnd, s.LeaseEnd)
	}
	if !slices.Equal(f.Queue, s.Queue) {
		return fmt.Errorf("queue %v vs %v", f.Queue, s.Queue)
	}
	if f.Token != s.Token {
		return fmt.Errorf("token %d vs %d", f.Token, s.Token)
	}
	if !maps.EqualFunc(f.Deadlines, s.Deadlines, h.within) {
		return fmt.Errorf("deadlines %v vs %v", f.Deadlines, s.Deadlines)
	}
	if f.GraceOwner != s.GraceOwner || f.GraceOwner != "" && (!h.within(f.GraceEnd, s.GraceEnd) || f.GraceSecond != s.GraceSecond) {
		return fmt.Errorf("head grace %q@%d (second %v) vs %q@%d (second %v)", f.GraceOwner, f.GraceEnd, f.GraceSecond, s.GraceOwner, s.GraceEnd, s.GraceSecond)
	}
	if !maps.EqualFunc(f.Latches, s.Latches, func(a, b model.Latch) bool {
		return a.Result == b.Result && h.within(a.ExpiresAt, b.ExpiresAt)
	}) {
		return fmt.Errorf("latches %v vs %v", f.Latches, s.Latches)
	}
	if !maps.EqualFunc(f.AcquireLatches, s.AcquireLatches, func(a, b model.AcquireLatch) bool {
		if b.State == model.LatchGranted {
			b.State = model.LatchHeld
		}
		return a.State == b.State && a.Token == b.Token && h.within(a.ExpiresAt, b.ExpiresAt)
	}) {
		return fmt.Errorf("acquisition latches %v vs %v", f.AcquireLatches, s.AcquireLatches)
	}
	strip := func(ms []model.Message, prefix string) []string {
		var out []string
		for _, m := range ms {
			p := m.Payload
			if strings.HasPrefix(p, "s:") {
				p = model.UnlockMessage // a wake-up that carries its reply (scalable engine)
			}
			out = append(out, strings.TrimPrefix(m.Channel, prefix)+"="+p)
		}
		if granted {
			// The scalable engine's direct grant replaces the lock
			// channel's "0" (the lock is held again) and the head's
			// wake-up by the grant on the head's channel.
			out = out[:0]
			for _, m := range ms {
				if c := strings.TrimPrefix(m.Channel, prefix); c != "" {
					out = append(out, c)
				}
			}
			slices.Sort(out)
			out = slices.Compact(out)
		}
		return out
	}
	if a, b := strip(fpub, h.fk.Channel), strip(spub, h.sk.Channel); !slices.Equal(a, b) {
		return fmt.Errorf("published %v vs %v", a, b)
	}
	return nil
}

// compareModel compares the scalable engine's state, mapped to a
// model.Lock, and its messages with the model's.
func (h *scHarness) compareModel(s *model.Lock, spub []model.Message) error {
	m := h.m
	if !maps.Equal(m.Holds, s.Holds) {
		return fmt.Errorf("hash %v, model %v", s.Holds, m.Holds)
	}
	if m.Locked() && ((m.LeaseEnd == model.NoExpiry) != (s.LeaseEnd == model.NoExpiry) || !h.within(m.LeaseEnd, s.LeaseEnd)) {
		return fmt.Errorf("lease ends %d, model %d", s.LeaseEnd, m.LeaseEnd)
	}
	if !slices.Equal(m.Queue, s.Queue) {
		return fmt.Errorf("queue %v, model %v", s.Queue, m.Queue)
	}
	for _, o := range m.Queue {
		if m.Seqs[o] != s.Seqs[o] {
			return fmt.Errorf("join sequence of %s %d, model %d (queue %v)", o, s.Seqs[o], m.Seqs[o], m.Queue)
		}
	}
	if m.Token != s.Token {
		return fmt.Errorf("token %d, model %d", s.Token, m.Token)
	}
	if !maps.EqualFunc(m.Deadlines, s.Deadlines, h.within) {
		return fmt.Errorf("deadlines %v, model %v", s.Deadlines, m.Deadlines)
	}
	if m.GraceOwner != s.GraceOwner || m.GraceOwner != "" && (!h.within(m.GraceEnd, s.GraceEnd) || m.GraceSecond != s.GraceSecond) {
		return fmt.Errorf("head grace %q@%d (second %v), model %q@%d (second %v)", s.GraceOwner, s.GraceEnd, s.GraceSecond, m.GraceOwner, m.GraceEnd, m.GraceSecond)
	}
	if !maps.EqualFunc(m.Latches, s.Latches, func(a, b model.Latch) bool {
		return a.Result == b.Result && h.within(a.ExpiresAt, b.ExpiresAt)
	}) {
		return fmt.Errorf("latches %v, model %v", s.Latches, m.Latches)
	}
	if !maps.EqualFunc(m.AcquireLatches, s.AcquireLatches, func(a, b model.AcquireLatch) bool {
		return a.State == b.State && a.Token == b.Token && h.within(a.ExpiresAt, b.ExpiresAt)
	}) {
		return fmt.Errorf("acquisition latches %v, model %v", s.AcquireLatches, m.AcquireLatches)
	}
	for _, o := range m.Queue {
		if m.Notes[o] != s.Notes[o] {
			return fmt.Errorf("handoff note of %s %+v, model %+v", o, s.Notes[o], m.Notes[o])
		}
	}
	want := m.Published[h.mPub:]
	h.mPub = len(m.Published)
	if !slices.EqualFunc(want, spub, h.sameMessage) {
		return fmt.Errorf("published %v, model %v", spub, want)
	}
	return nil
}

// sameMessage compares a message of the model with one from Redis: a sleep
// message's sleep comes from the server's clock (within the tolerance).
func (h *scHarness) sameMessage(want, got model.Message) bool {
	return sameMessage(h.tol, want, got)
}

func sameMessage(tol int64, want, got model.Message) bool {
	if want.Channel != got.Channel {
		return false
	}
	ws, wa, wok := model.ParseSleepMessage(want.Payload)
	gs, ga, gok := model.ParseSleepMessage(got.Payload)
	if wok && gok {
		return wa == ga && scWithin(tol, ws, gs)
	}
	return want.Payload == got.Payload
}

func (h *scHarness) check(t *rapid.T) {
	if err := h.m.CheckInvariants(); err != nil {
		t.Fatalf("model: %v\n%v", err, h.m)
	}
	if err := h.f.CheckInvariants(); err != nil {
		t.Fatalf("Redisson engine: %v\n%v", err, h.f)
	}
	if err := h.s.CheckInvariants(); err != nil {
		t.Fatalf("scalable: %v\n%v", err, h.s)
	}
}

// dumpScalable reads the scalable engine's keys into a model.Lock: the
// queue by walking the links from the head, and each waiter's absolute
// deadline as the head's plus the deltas up to it. It fails on anything the
// representation does not allow: broken links, a tail deadline that is not
// the tail's, stray fields or keys, or Redisson queue keys.
func dumpScalable(ctx context.Context, rdb *redis.Client, k wire.Keys, server int64) (*model.Lock, error) {
	pipe := rdb.Pipeline()
	all := pipe.Keys(ctx, "*"+k.Name+"*")
	holds := pipe.HGetAll(ctx, k.Name)
	pttl := pipe.PTTL(ctx, k.Name)
	sq := pipe.HGetAll(ctx, k.ScalableQueue())
	sqPTTL := pipe.PTTL(ctx, k.ScalableQueue())
	grace := pipe.Get(ctx, k.Grace())
	gracePTTL := pipe.PTTL(ctx, k.Grace())
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	l := model.New(k.Name)
	for o, v := range holds.Val() {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("hold count of %s: %q", o, v)
		}
		l.Holds[o] = n
	}
	if len(l.Holds) > 0 {
		l.LeaseEnd = model.NoExpiry
		if p := pttl.Val(); p > 0 {
			l.LeaseEnd = server + p.Milliseconds()
		}
	}
	if sqPTTL.Val() > 0 {
		return nil, fmt.Errorf("the scalable queue key expires")
	}
	if err := dumpGrace(l, grace, gracePTTL, server); err != nil {
		return nil, err
	}
	f := sq.Val()
	num := func(field string) (int64, error) {
		v, ok := f[field]
		if !ok {
			return 0, fmt.Errorf("no field %s", field)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x != math.Trunc(x) {
			return 0, fmt.Errorf("field %s = %q is not a whole number", field, v)
		}
		return int64(x), nil
	}
	if len(f) > 0 {
		head, tail := f["h"], f["t"]
		if head == "" || tail == "" {
			return nil, fmt.Errorf("queue hash without head or tail: %v", f)
		}
		deadline, err := num("hd")
		if err != nil {
			return nil, err
		}
		prev := ""
		for o := head; o != ""; o = f["n:"+o] {
			if _, ok := f["n:"+o]; !ok {
				return nil, fmt.Errorf("%s is linked but has no next field: %v", o, f)
			}
			if p, ok := f["p:"+o]; !ok || p != prev {
				return nil, fmt.Errorf("%s's prev is %q, want %q", o, p, prev)
			}
			d, err := num("d:" + o)
			if err != nil {
				return nil, err
			}
			if prev == "" && d != 0 {
				return nil, fmt.Errorf("head %s has delta %d", o, d)
			}
			sv, note, hasNote := strings.Cut(f["s:"+o], "|")
			if hasNote {
				// the handoff note: lease|slot|latch ms|latch key
				parts := strings.SplitN(note, "|", 4)
				var nums [3]int64
				for i := 0; i < 3 && len(parts) == 4; i++ {
					nums[i], err = strconv.ParseInt(parts[i], 10, 64)
				}
				id, okID := strings.CutPrefix(parts[len(parts)-1], k.AcquireLatchPrefix()+":")
				if len(parts) != 4 || err != nil || !okID {
					return nil, fmt.Errorf("handoff note of %s: %q", o, f["s:"+o])
				}
				l.Notes[o] = model.Note{LeaseMs: nums[0], SlotMs: nums[1], LatchMs: nums[2], RequestID: id}
				f["s:"+o] = sv
			}
			seq, err := num("s:" + o)
			if err != nil {
				return nil, err
			}
			if prev != "" && seq <= l.Seqs[prev] {
				return nil, fmt.Errorf("join sequence of %s (%d) not above %s's (%d)", o, seq, prev, l.Seqs[prev])
			}
			l.Seqs[o] = seq
			deadline += d
			if _, dup := l.Deadlines[o]; dup || len(l.Queue) > len(f) {
				return nil, fmt.Errorf("the links loop at %s", o)
			}
			l.Queue = append(l.Queue, o)
			l.Deadlines[o] = deadline
			prev = o
		}
		if prev != tail {
			return nil, fmt.Errorf("the walk ends at %s, the tail is %s", prev, tail)
		}
		td, err := num("td")
		if err != nil {
			return nil, err
		}
		if td != deadline {
			return nil, fmt.Errorf("td is %d, the tail's deadline %d", td, deadline)
		}
		hs, err := num("hs")
		if err != nil {
			return nil, err
		}
		ts, err := num("ts")
		if err != nil {
			return nil, err
		}
		if hs != l.Seqs[head] || ts != l.Seqs[tail] {
			return nil, fmt.Errorf("hs %d, ts %d: the head's and tail's join sequences are %d and %d", hs, ts, l.Seqs[head], l.Seqs[tail])
		}
		if want := 6 + 4*len(l.Queue); len(f) != want {
			return nil, fmt.Errorf("%d fields for %d waiters: %v", len(f), len(l.Queue), f)
		}
	}
	var latches, alatches []string
	for _, key := range all.Val() {
		switch {
		case strings.HasPrefix(key, l.Names().AcquireLatchPrefix()):
			alatches = append(alatches, key)
		case key == k.Name, key == k.ScalableQueue(), key == k.Grace():
		case key == k.Token(): // the fencing token (fair_token), as the faithful engine's
			n, err := rdb.Get(ctx, key).Int64()
			if err != nil {
				return nil, fmt.Errorf("token key: %w", err)
			}
			l.Token = n
		case strings.HasPrefix(key, l.Names().LatchPrefix()):
			latches = append(latches, key)
		default:
			return nil, fmt.Errorf("unexpected key %s", key)
		}
	}
	if err := dumpAcquireLatches(ctx, rdb, l, l.Names(), alatches, server); err != nil {
		return nil, err
	}
	for _, key := range latches {
		v, err := rdb.Get(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil || ttl <= 0 {
			return nil, fmt.Errorf("latch %s: ttl %v, %v", key, ttl, err)
		}
		r := model.Released
		if v == "0" {
			r = model.StillHeld
		}
		l.Latches[strings.TrimPrefix(key, l.Names().LatchPrefix())] = model.Latch{Result: r, ExpiresAt: server + ttl.Milliseconds()}
	}
	return l, nil
}

func TestScalableMiniredis(t *testing.T) { checkScalable(t, miniBackend{}) }

func TestScalableRedisServer(t *testing.T) { checkScalable(t, newRealBackend(t)) }

func checkScalable(t *testing.T, b backend) {
	var c counts
	rapid.Check(t, scalableMachine(b, wire.ScalableDefault(), &c))
	t.Logf("%v; %d notifications (%d carrying their reply), longest queue %d, %d direct handoffs", &c, c.notified, c.sleepNotes, c.maxQueue, c.grants)
}

func FuzzScalableMiniredis(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(scalableMachine(miniBackend{}, wire.ScalableDefault(), new(counts))))
}

// scalableBroken are deliberately wrong scalable scripts, each a plausible
// slip in the relative representation (queue_scalable.lua, in every
// script) or in the shared rules (fair_common.lua); the machine must catch
// every one.
var scalableBroken = []struct{ name, file, old, new string }{
	{"acquire does not lower the remaining deadlines", "queue_scalable.lua",
		"        sq_remove(owner, wait)", "        sq_remove(owner, 0)"},
	{"mid-queue removal drops the leaver's own gap", "queue_scalable.lua",
		"'d:' .. n, d + nd - drop", "'d:' .. n, nd - drop"},
	{"tail removal keeps the old tail deadline", "queue_scalable.lua",
		"'td', td - d, ", "'td', td, "},
	{"head removal forgets the drop", "queue_scalable.lua",
		"hd + nd - drop", "hd + nd"},
	{"append forgets the old tail's link", "queue_scalable.lua",
		"'n:' .. tail, owner,", ""},
	{"append does not advance the tail's join sequence", "queue_scalable.lua",
		"seq_field(set, 'ts', ts + 1)", ""},
	{"head removal keeps the old head's join sequence", "queue_scalable.lua",
		"seq_field(set, 'hs', ns)", ""},
	{"the position counts from the tail, not the head", "queue_scalable.lua",
		"'s:' .. owner, 'hs')", "'s:' .. owner, 'ts')"},
	{"every queued waiter gets the head's grace poll", "fair_common.lua",
		"return sleep_held(pttl, grace, second == owner)", "return sleep_held(pttl, grace, true)"},
	{"a waiter moving up is not woken", "fair_common.lua",
		"(freed or started or second ~= second0)", "(freed or started)"},
	// The direct handoff (issue 23).
	{"a grant does not bump the fencing token", "fair_common.lua",
		"local token = token_incr(token_key, true)", "local token = tonumber(redis.call('get', token_key) or 1)"},
	{"a grant goes to the waiter behind the head", "fair_unlock.lua",
		"handoff(owner, q_front(), grace,", "handoff(owner, select(2, q_front()), grace,"},
	{"a grant keeps the head's whole lease (a dead head holds the lock for it)", "fair_common.lua",
		"local ttl = math.min(lease, 2 * grace)", "local ttl = lease"},
	{"a grant does not lower the remaining deadlines", "fair_common.lua",
		"    q_take(head, slot)\n", "    q_take(head, 0)\n"},
	{"a grant overwrites the latch of a request given up", "fair_common.lua",
		"            or redis.call('exists', latch) == 1 then", "            then"},
	{"a retried copy of a granted request does not claim the grant", "latch_common.lua",
		"                redis.call('pexpire', lock, lease)\n", ""},
	// Wake-ups that carry their reply (issue 23).
	{"a sleep note lets the waiter behind the head sleep past the grace", "fair_common.lua",
		"note(owner, sleep_held(pttl, grace, second))", "note(owner, pttl)"},
	{"a sleep note says every waiter is the head", "fair_common.lua",
		"':' .. int_str(q_ahead(owner)))", "':0')"},
	{"fast path: a free lock is taken while a queue exists", "fair_fast_take.lua",
		"FAST_FREE and redis.call('exists', KEYS[2], KEYS[3], KEYS[4], KEYS[8]) == 0", "FAST_FREE"},
}

func TestScalableBrokenVariantsFail(t *testing.T) {
	redistest.Long(t)
	for _, v := range scalableBroken {
		t.Run(v.name, func(t *testing.T) {
			// A shared part is prepended to each script without the
			// functions that script does not use, so its text is counted
			// in the file; an edit that changes a script is applied to it
			// composed whole (wire.EditScalable).
			var src string
			if slices.Contains(wire.ScalableFiles, v.file) {
				src = wire.ScalableSource(v.file)
			} else {
				b, err := fs.ReadFile(lua.FS, v.file)
				if err != nil {
					t.Fatal(err)
				}
				src = string(b)
			}
			if n := strings.Count(src, v.old); n != 1 {
				t.Fatalf("%q occurs %d times in %s", v.old, n, v.file)
			}
			scripts := wire.EditScalable(func(file, src string) string {
				return strings.Replace(src, v.old, v.new, 1)
			})
			requireCaught(t, v.name, func(b backend, c *counts) func(*rapid.T) { return scalableMachine(b, scripts, c) })
		})
	}
}

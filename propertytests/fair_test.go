package propertytests

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/model"
)

// fairMachine is the state machine of the fair lock's scripts: tryLock with
// and without queueing (fresh, re-entry, contended, queued, polling),
// acquireFailed (with the slot the waiter queued with, or another), unlock by
// the holder, by a stranger and as a retry, forceUnlock, renewal, lease
// expiry, both clocks, and per-client skew of the client clock.
func fairMachine(b backend, scripts *wire.Scripts, c *counts) func(*rapid.T) {
	return func(t *rapid.T) {
		h := newHarness(t, b, scripts, c)
		h.fair = true
		t.Repeat(weighted(h.check, []action{
			{"join", 3, func(t *rapid.T) { h.fairTryLockWait(t, h.owner(t)) }},
			{"headPolls", 2, h.actHeadPolls},
			{"holderUnlocks", 2, h.actHolderUnlocks},
			{"acquireFailed", 1, h.actAcquireFailed},
			{"advanceClient", 1, h.actAdvanceClient},
			{"pollQueued", 1, h.actPollQueued},
			{"tryLock", 1, func(t *rapid.T) { h.fairTryLock(t, h.owner(t)) }},
			{"reenter", 1, h.actFairReenter},
			{"unlock", 1, func(t *rapid.T) { h.fairUnlock(t, h.owner(t)) }},
			{"advanceServer", 1, h.actAdvanceServer},
			{"expireLease", 1, h.actExpireLease},
			{"forceUnlock", 1, h.actFairForceUnlock},
			{"renew", 1, h.actRenew},
			{"skewClient", 1, h.actSkew},
			{"persistLease", 1, h.actPersist},
			{"reentrantForceUnlock", 1, h.actForceUnlock}, // the plain script on a fair lock: deletes the hash only
		}))
	}
}

// queued draws a waiter in the queue, or skips.
func (h *harness) queued(t *rapid.T) string {
	if len(h.m.Queue) == 0 {
		t.Skip("nobody queued")
	}
	return rapid.SampledFrom(h.m.Queue).Draw(t, "waiter")
}

func (h *harness) args(owner string, lease, wait int64) wire.Args {
	return wire.Args{Owner: owner, LeaseMs: lease, WaitMs: wait, NowMs: h.now(owner), GraceMs: h.grace[clientOf(owner)]}
}

// acquireID: drawAcquireID. With an id, a waiter of this library's clients
// joins with a handoff note, and a release may grant it the lock (issue 33).
func (h *harness) acquireID(t *rapid.T, owner string) (string, int64) {
	return drawAcquireID(t, owner, h.lastAcq, &h.nextReq, h.u)
}

func (h *harness) fairTryLockWait(t *rapid.T, owner string) {
	lease, wait := h.lease(t), h.wait(t)
	a := h.args(owner, lease, wait)
	a.AcquireID, a.LatchMs = h.acquireID(t, owner)
	before := h.begin()
	wantOK, wantTTL, wantTok, wantErr := h.m.FairTryLockWaitRequest(h.server, a.NowMs, owner, lease, wait, a.GraceMs, a.AcquireID, a.LatchMs)
	gotOK, gotTTL, gotTok, err := h.scripts.Fair().TryLockWaitToken(h.ctx, h.rdb, h.keys, a)
	if (wantErr != nil) != (err != nil) {
		t.Fatalf("fairTryLockWait by %s (request %q): model error %v, Redis %v", owner, a.AcquireID, wantErr, err)
	}
	if err != nil {
		h.end(t, model.Step{Op: model.OpTime}, before) // a latched refusal changes nothing
		return
	}
	if wantOK != gotOK {
		t.Fatalf("fairTryLockWait by %s: model acquired=%v, Redis %v\nbefore: %v", owner, wantOK, gotOK, before)
	}
	if wantTok != gotTok {
		t.Fatalf("fairTryLockWait by %s: model token %d, Redis %d\nbefore: %v", owner, wantTok, gotTok, before)
	}
	if !wantOK {
		h.checkTTL(t, "fairTryLockWait ttl of "+owner, wantTTL, gotTTL)
	}
	s := model.Step{Op: model.OpFairTryLockWait, Owner: owner, Now: a.NowMs, WaitMs: wait, GraceMs: a.GraceMs, Acquired: gotOK,
		Reply: gotTTL, Before: before, After: h.m}
	if model.Requeued(s) {
		h.slot[owner] = wait
	}
	h.end(t, s, before)
}

// actPollQueued is a queued waiter's retry: the head taking a free lock, or
// anyone re-checking.
func (h *harness) actPollQueued(t *rapid.T) { h.fairTryLockWait(t, h.queued(t)) }

// actHeadPolls is the head's retry, typically after its wake-up message;
// sometimes a no-wait attempt by the same owner.
func (h *harness) actHeadPolls(t *rapid.T) {
	if len(h.m.Queue) == 0 {
		t.Skip("nobody queued")
	}
	if rapid.IntRange(0, 3).Draw(t, "no-wait") == 0 {
		h.fairTryLock(t, h.m.Queue[0])
	} else {
		h.fairTryLockWait(t, h.m.Queue[0])
	}
}

func (h *harness) fairTryLock(t *rapid.T, owner string) {
	lease, wait := h.lease(t), h.wait(t)
	a := h.args(owner, lease, wait)
	before := h.begin()
	want, wantTok := h.m.FairTryLockToken(h.server, a.NowMs, owner, lease, wait, a.GraceMs)
	got, gotTok, err := h.scripts.Fair().TryLockToken(h.ctx, h.rdb, h.keys, a)
	h.noErr(t, "fairTryLock", err)
	if want != got || wantTok != gotTok {
		t.Fatalf("fairTryLock by %s: model %v token %d, Redis %v token %d\nbefore: %v", owner, want, wantTok, got, gotTok, before)
	}
	h.end(t, model.Step{Op: model.OpFairTryLock, Owner: owner, Now: a.NowMs, WaitMs: wait, GraceMs: a.GraceMs, Acquired: got}, before)
}

func (h *harness) actFairReenter(t *rapid.T) {
	hd := h.m.Holder()
	if hd == "" {
		t.Skip("nobody holds the lock")
	}
	if rapid.Bool().Draw(t, "wait") {
		h.fairTryLockWait(t, hd)
	} else {
		h.fairTryLock(t, hd)
	}
}

func (h *harness) actAcquireFailed(t *rapid.T) {
	var owner string
	if len(h.m.Queue) > 0 && rapid.IntRange(0, 4).Draw(t, "queued") > 0 {
		owner = h.queued(t)
	} else {
		owner = h.owner(t)
	}
	wait, ok := h.slot[owner]
	if !ok || rapid.IntRange(0, 5).Draw(t, "other slot") == 0 {
		wait = h.wait(t) // not the slot it queued with (Redisson's H3)
	}
	grace := h.grace[clientOf(owner)]
	before := h.begin()
	h.m.FairAcquireFailed(h.server, owner, wait, grace)
	err := h.scripts.FairAcquireFailed(h.ctx, h.rdb, h.keys, wire.Args{Owner: owner, WaitMs: wait, GraceMs: grace})
	h.noErr(t, "fairAcquireFailed", err)
	h.end(t, model.Step{Op: model.OpFairAcquireFailed, Owner: owner, WaitMs: wait, GraceMs: grace}, before)
}

func (h *harness) fairUnlock(t *rapid.T, owner string) {
	lease := h.lease(t)
	latch := h.dur(t, "latch", 1, 20)
	req := h.request(t, owner)
	a := h.args(owner, lease, 0)
	a.RequestID, a.LatchMs = req, latch
	before := h.begin()
	want := h.m.FairUnlock(h.server, a.NowMs, owner, lease, req, latch, a.GraceMs)
	got, err := h.scripts.FairUnlock(h.ctx, h.rdb, h.keys, a)
	h.noErr(t, "fairUnlock", err)
	if int(want) != int(got) {
		t.Fatalf("fairUnlock by %s (%s): model %v, Redis %v\nbefore: %v", owner, req, want, got, before)
	}
	h.end(t, model.Step{Op: model.OpFairUnlock, Owner: owner, Now: a.NowMs, GraceMs: a.GraceMs}, before)
}

func (h *harness) actFairForceUnlock(t *rapid.T) {
	c := rapid.SampledFrom(clients).Draw(t, "client")
	now, grace := h.client+h.skew[c], h.grace[c]
	before := h.begin()
	want := h.m.FairForceUnlock(h.server, now, grace)
	got, err := h.scripts.FairForceUnlock(h.ctx, h.rdb, h.keys, wire.Args{NowMs: now, GraceMs: grace})
	h.noErr(t, "fairForceUnlock", err)
	if want != got {
		t.Fatalf("fairForceUnlock: model %v, Redis %v", want, got)
	}
	h.end(t, model.Step{Op: model.OpFairForceUnlock, Now: now, GraceMs: grace}, before)
}

func TestFairMiniredis(t *testing.T) { check(t, fairMachine, miniBackend{}) }

func TestFairRedisServer(t *testing.T) { check(t, fairMachine, newRealBackend(t)) }

func FuzzFairMiniredis(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(fairMachine(miniBackend{}, wire.Default(), new(counts))))
}

func FuzzFairRedisServer(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(fairMachine(newRealBackend(f), wire.Default(), new(counts))))
}

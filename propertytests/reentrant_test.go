package propertytests

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/model"
)

// reentrantMachine is the state machine of the reentrant lock's scripts:
// acquire (fresh, re-entry, contended), unlock by the holder, by a
// stranger and as a retry, forceUnlock, renewal, and time.
func reentrantMachine(b backend, scripts *wire.Scripts, c *counts) func(*rapid.T) {
	return func(t *rapid.T) {
		h := newHarness(t, b, scripts, c)
		t.Repeat(weighted(h.check, []action{
			{"acquire", 2, func(t *rapid.T) { h.acquire(t, h.owner(t)) }},
			{"reenter", 1, h.actReenter},
			{"holderUnlocks", 2, h.actHolderUnlocks},
			{"advanceServer", 1, h.actAdvanceServer},
			{"unlock", 1, func(t *rapid.T) { h.unlock(t, h.owner(t)) }},
			{"renew", 1, h.actRenew},
			{"expireLease", 1, h.actExpireLease},
			{"forceUnlock", 1, h.actForceUnlock},
			{"persistLease", 1, h.actPersist},
		}))
	}
}

func (h *harness) acquire(t *rapid.T, owner string) {
	lease := h.lease(t)
	before := h.begin()
	wantOK, wantTTL := h.m.Acquire(h.server, owner, lease)
	gotOK, gotTTL, err := h.scripts.Acquire(h.ctx, h.rdb, h.keys, wire.Args{Owner: owner, LeaseMs: lease})
	h.noErr(t, "acquire", err)
	if wantOK != gotOK {
		t.Fatalf("acquire by %s: model acquired=%v, Redis %v", owner, wantOK, gotOK)
	}
	if !wantOK {
		h.checkTTL(t, "acquire ttl", wantTTL, gotTTL)
	}
	h.end(t, model.Step{Op: model.OpAcquire, Owner: owner, Acquired: gotOK}, before)
}

func (h *harness) actReenter(t *rapid.T) {
	hd := h.m.Holder()
	if hd == "" {
		t.Skip("nobody holds the lock")
	}
	h.acquire(t, hd)
}

func (h *harness) unlock(t *rapid.T, owner string) {
	lease := h.lease(t)
	latch := h.dur(t, "latch", 1, 20)
	req := h.request(t, owner)
	before := h.begin()
	want := h.m.Unlock(h.server, owner, lease, req, latch)
	got, err := h.scripts.Unlock(h.ctx, h.rdb, h.keys, wire.Args{Owner: owner, LeaseMs: lease, RequestID: req, LatchMs: latch})
	h.noErr(t, "unlock", err)
	if int(want) != int(got) {
		t.Fatalf("unlock by %s (%s): model %v, Redis %v", owner, req, want, got)
	}
	h.end(t, model.Step{Op: model.OpUnlock, Owner: owner}, before)
}

func (h *harness) actHolderUnlocks(t *rapid.T) {
	hd := h.m.Holder()
	if hd == "" {
		t.Skip("nobody holds the lock")
	}
	if h.fair {
		h.fairUnlock(t, hd)
	} else {
		h.unlock(t, hd)
	}
}

func (h *harness) actForceUnlock(t *rapid.T) {
	before := h.begin()
	want := h.m.ForceUnlock(h.server)
	got, err := h.scripts.ForceUnlock(h.ctx, h.rdb, h.keys, wire.Args{})
	h.noErr(t, "forceUnlock", err)
	if want != got {
		t.Fatalf("forceUnlock: model %v, Redis %v", want, got)
	}
	h.end(t, model.Step{Op: model.OpForceUnlock}, before)
}

func TestReentrantMiniredis(t *testing.T) { check(t, reentrantMachine, miniBackend{}) }

func TestReentrantRedisServer(t *testing.T) { check(t, reentrantMachine, newRealBackend(t)) }

func FuzzReentrantMiniredis(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(reentrantMachine(miniBackend{}, wire.Default(), new(counts))))
}

// machine builds a state machine on a backend with a set of scripts.
type machine func(b backend, scripts *wire.Scripts, c *counts) func(*rapid.T)

// check runs a machine with the real scripts and logs how much it ran.
func check(t *testing.T, m machine, b backend) {
	t.Helper()
	var c counts
	rapid.Check(t, m(b, wire.Default(), &c))
	t.Logf("%v", &c)
}

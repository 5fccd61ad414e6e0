package propertytests

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/model"
)

// fencedMachine is the state machine of the fenced lock (Redisson's
// RedissonFencedLock, reference section 8): fenced_acquire.lua (fresh,
// re-entry, contended, repeated copies of one request id, with and without
// an acquisition latch), abandon.lua, and the reentrant unlock, forceUnlock
// and renewal it shares, against model.FencedAcquire step by step. On top
// of the model comparison, tokenRules checks Redisson's promise over the
// replies, stated without the model: every acquisition that runs gets a
// token larger than every token issued before it (re-entries included); a
// copy of a granted request, while its latch lives, gets the first copy's
// token and changes nothing; the token key never goes down and no refused
// acquisition moves it.
func fencedMachine(b backend, scripts *wire.Scripts, c *counts) func(*rapid.T) {
	return func(t *rapid.T) {
		h := newHarness(t, b, scripts, c)
		f := &fencedState{h: h, granted: map[string]grant{}, lastReq: map[string]string{}, latchOf: map[string]int64{}}
		t.Repeat(weighted(h.check, []action{
			{"acquire", 3, func(t *rapid.T) { f.acquire(t, h.owner(t), f.newRequest()) }},
			{"reenter", 2, f.actReenter},
			{"copy", 2, f.actCopy},
			{"holderUnlocks", 2, h.actHolderUnlocks},
			{"advanceServer", 1, h.actAdvanceServer},
			{"abandon", 1, f.actAbandon},
			{"unlock", 1, func(t *rapid.T) { h.unlock(t, h.owner(t)) }},
			{"renew", 1, h.actRenew},
			{"expireLease", 1, h.actExpireLease},
			{"forceUnlock", 1, h.actForceUnlock},
			{"persistLease", 1, h.actPersist},
		}))
	}
}

type grant struct {
	token    int64
	latchEnd int64 // server ms until which the latch recognises a copy
}

type fencedState struct {
	h       *harness
	next    int
	granted map[string]grant  // request id -> the first grant's token
	lastReq map[string]string // owner -> its last acquisition request id
	latchOf map[string]int64  // request id -> the latch lifetime it is sent with
	maxTok  int64             // the largest token issued so far
}

func (f *fencedState) newRequest() string {
	f.next++
	return "a" + strconv.Itoa(f.next)
}

func (f *fencedState) actReenter(t *rapid.T) {
	hd := f.h.m.Holder()
	if hd == "" {
		t.Skip("nobody holds the lock")
	}
	f.acquire(t, hd, f.newRequest())
}

// actCopy sends again an owner's last request (go-redis resending after a
// read timeout, or a stalled server running a buffered copy).
func (f *fencedState) actCopy(t *rapid.T) {
	o := f.h.owner(t)
	req, ok := f.lastReq[o]
	if !ok {
		t.Skip("no request by " + o)
	}
	f.acquire(t, o, req)
}

func (f *fencedState) acquire(t *rapid.T, owner, req string) {
	h := f.h
	lease := h.lease(t)
	// Every copy of a request carries the same id and latch lifetime.
	latch, sent := f.latchOf[req]
	if !sent && rapid.IntRange(0, 4).Draw(t, "latched") > 0 {
		latch = h.dur(t, "latch", 1, 20)
	}
	f.latchOf[req] = latch
	f.lastReq[owner] = req
	before := h.begin()
	wantOK, wantTTL, wantTok, wantErr := h.m.FencedAcquire(h.server, owner, lease, req, latch)
	a := wire.Args{Owner: owner, LeaseMs: lease, AcquireID: req, LatchMs: latch}
	if latch == 0 {
		a.AcquireID = "" // no latch: the scripts skip it
	}
	gotOK, gotTTL, gotTok, gotErr := h.scripts.FencedAcquire(h.ctx, h.rdb, h.keys, a)
	if errKind(wantErr) != errKind(gotErr) {
		t.Fatalf("fencedAcquire by %s (%s): model error %v, Redis %v", owner, req, wantErr, gotErr)
	}
	if wantOK != gotOK || wantTok != gotTok {
		t.Fatalf("fencedAcquire by %s (%s): model acquired=%v token %d, Redis acquired=%v token %d\nbefore: %v", owner, req, wantOK, wantTok, gotOK, gotTok, before)
	}
	if !wantOK && wantErr == nil {
		h.checkTTL(t, "fencedAcquire ttl", wantTTL, gotTTL)
	}
	f.tokenRules(t, owner, req, latch, before, gotOK, gotTok, gotErr)
	h.end(t, model.Step{Op: model.OpAcquire, Owner: owner, Acquired: gotOK}, before)
}

// tokenRules checks one acquisition's reply against Redisson's promise and
// the latch rule (docs/design.md), with what the test itself sent and saw.
func (f *fencedState) tokenRules(t *rapid.T, owner, req string, latch int64, before *model.Lock, ok bool, tok int64, err error) {
	h := f.h
	g, copied := f.granted[req]
	copied = copied && h.server < g.latchEnd
	keyNow, kerr := h.rdb.Get(h.ctx, h.keys.Token()).Int64()
	if kerr != nil && !errors.Is(kerr, redis.Nil) {
		t.Fatalf("token key: %v", kerr)
	}
	switch {
	case copied && ok:
		if tok != g.token {
			t.Fatalf("a copy of granted request %s got token %d, the first copy got %d", req, tok, g.token)
		}
		if keyNow != f.maxTok {
			t.Fatalf("a copy of %s moved the token key from %d to %d", req, f.maxTok, keyNow)
		}
	case ok:
		if tok <= f.maxTok {
			t.Fatalf("acquisition %s by %s got token %d, not above the %d already issued", req, owner, tok, f.maxTok)
		}
		f.maxTok = tok
		if latch > 0 {
			f.granted[req] = grant{token: tok, latchEnd: h.server + latch}
		}
		if keyNow != tok {
			t.Fatalf("acquisition %s replied token %d, the key holds %d", req, tok, keyNow)
		}
	default:
		if keyNow != f.maxTok {
			t.Fatalf("a refused acquisition (%v) moved the token key from %d to %d", err, f.maxTok, keyNow)
		}
	}
}

func (f *fencedState) actAbandon(t *rapid.T) {
	h := f.h
	o := h.owner(t)
	req, ok := f.lastReq[o]
	if !ok {
		t.Skip("no request by " + o)
	}
	latch := h.dur(t, "latch", 1, 20)
	before := h.begin()
	want := h.m.Abandon(h.server, o, req, latch)
	got, err := h.scripts.Abandon(h.ctx, h.rdb, h.keys, wire.Args{Owner: o, AcquireID: req, LatchMs: latch})
	h.noErr(t, "abandon", err)
	if want != got {
		t.Fatalf("abandon %s by %s: model %v, Redis %v", req, o, want, got)
	}
	delete(f.granted, req)
	h.end(t, model.Step{Op: model.OpTime, Owner: o}, before)
}

// errKind names an acquisition error for comparison.
func errKind(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, model.ErrAbandoned), errors.Is(err, wire.ErrAbandoned):
		return "abandoned"
	case errors.Is(err, model.ErrGrantOver), errors.Is(err, wire.ErrGrantOver):
		return "grant over"
	}
	return fmt.Sprintf("other: %v", err)
}

func TestFencedMiniredis(t *testing.T) { check(t, fencedMachine, miniBackend{}) }

func TestFencedRedisServer(t *testing.T) { check(t, fencedMachine, newRealBackend(t)) }

// fencedBrokenVariants: each must make the fenced machine fail.
var fencedBrokenVariants = []brokenVariant{
	{
		name: "token not incremented on re-entry", machine: fencedMachine, file: wire.FileFencedAcquire,
		old: "local token, refused = token_incr(KEYS[2])",
		new: "local token, refused = redis.call('hexists', KEYS[1], ARGV[2]) == 1 and tonumber(redis.call('get', KEYS[2])) or token_incr(KEYS[2])",
	},
	{
		name: "a repeated copy is INCRed again", machine: fencedMachine, file: wire.FileFencedAcquire,
		old: "return {-1, latch_token(state)}",
		new: "return {-1, redis.call('incr', KEYS[2])}",
	},
	{
		name: "the latch keeps no token (plain 'held')", machine: fencedMachine, file: wire.FileFencedAcquire,
		old: "latch_grant(KEYS[3], ARGV[3], token)",
		new: "latch_grant(KEYS[3], ARGV[3])",
	},
	{
		name: "abandon ignores a 'held:<token>' latch", machine: fencedMachine, file: wire.FileAbandon,
		old: "held = held and (was == 'held' or latch_token(was) ~= nil)",
		new: "held = held and was == 'held'",
	},
	{
		name: "fair re-entry takes a new token", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "if not fresh and TOKEN and TOKEN > 0 then",
		new: "if false then",
	},
}

func TestFencedBrokenVariantsFail(t *testing.T) {
	redistest.Long(t)
	for _, v := range fencedBrokenVariants {
		t.Run(v.name, func(t *testing.T) {
			scripts := v.scripts(t)
			requireCaught(t, v.name, func(b backend, c *counts) func(*rapid.T) { return v.machine(b, scripts, c) })
		})
	}
}

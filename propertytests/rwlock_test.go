package propertytests

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/model"
)

// The read-write lock's machine: both halves' acquisitions, unlocks (with
// latch retries), forceUnlock, watchdog renewal and time, run on the model
// (model.RW) and on Redis through package lua, step by step: same replies,
// same keys (hash, read-hold keys, latches) and same messages.
//
// Independently of both, every state Redis holds is checked against the
// lock's promise, stated from the client's side:
//   - exclusion: free, or one writer (with at most its own reads), or
//     readers only (model.RW.CheckShape, on the dump of Redis);
//   - validity: an owner that the replies so far say holds the lock (its
//     latest grant, and no reply since saying its holds are gone) holds it
//     in Redis, until the lease of its latest acquisition or confirmed
//     renewal has run out (a re-entry with a shorter lease: the longer
//     one), and the lock's TTL is never below that lease: this is what
//     internal/core's ValidUntil promises the holder.

var rwReaders = []string{"cA:1", "cA:2", "cB:1"}

type rwHarness struct {
	ctx     context.Context
	scripts *wire.Scripts
	rdb     *redis.Client
	keys    wire.Keys
	clock   serverClock
	sub     *subscriber
	u, tol  int64

	m       *model.RW
	server  int64
	promise map[string]int64 // owner -> server time until which a client believes its hold valid
	lastReq map[string]string
	nextReq int
	steps   int
	counts  *counts
}

func rwMachine(b backend, scripts *wire.Scripts, c *counts) func(*rapid.T) {
	return func(t *rapid.T) {
		rdb, name, clock := b.start(t)
		h := &rwHarness{
			ctx: context.Background(), scripts: scripts, rdb: rdb, keys: wire.KeysFor(name), clock: clock,
			u: b.unit(), tol: b.tolerance(), m: model.NewRW(name),
			promise: map[string]int64{}, lastReq: map[string]string{}, counts: c,
		}
		c.sequences++
		t.Cleanup(func() { c.steps += h.steps })
		n := h.m.Names()
		if n.Channel != h.keys.RWChannel() || n.TimeoutKey("u:1", 2) != h.keys.RWTimeoutKey("u:1", 2) ||
			n.LatchPrefix()+"r" != h.keys.Latch("r") || model.WriterOf("u:1") != wire.WriterOwner("u:1") {
			t.Fatalf("model names %+v differ from lua's", n)
		}
		h.sub = subscribe(t, rdb, model.Names{Channel: n.Channel})
		t.Repeat(weighted(func(*rapid.T) {}, []action{
			{"readAcquire", 3, func(t *rapid.T) { h.acquire(t, h.reader(t), false) }},
			{"writeAcquire", 2, func(t *rapid.T) { h.acquire(t, model.WriterOf(h.reader(t)), true) }},
			{"writerReads", 1, h.actWriterReads},
			{"holderUnlocks", 3, h.actHolderUnlocks},
			{"writerUnlocks", 1, h.actWriterUnlocks},
			{"advanceServer", 2, func(t *rapid.T) { h.advance(t, h.dur(t, "d", 0, 10)) }},
			{"unlock", 1, func(t *rapid.T) {
				o := h.reader(t)
				if rapid.Bool().Draw(t, "write") {
					o = model.WriterOf(o)
				}
				h.unlock(t, o)
			}},
			{"renew", 1, h.actRenew},
			{"forceUnlock", 1, func(t *rapid.T) { h.force(t, rapid.Bool().Draw(t, "write")) }},
			{"otherKind", 1, h.actOtherKind},
		}))
	}
}

func (h *rwHarness) dur(t *rapid.T, label string, lo, hi int64) int64 {
	return rapid.Int64Range(lo, hi).Draw(t, label) * h.u
}

func (h *rwHarness) reader(t *rapid.T) string { return rapid.SampledFrom(rwReaders).Draw(t, "reader") }

func (h *rwHarness) request(t *rapid.T, owner string) string {
	if last, ok := h.lastReq[owner]; ok && rapid.IntRange(0, 4).Draw(t, "retry") == 0 {
		return last
	}
	h.nextReq++
	id := "req" + strconv.Itoa(h.nextReq)
	h.lastReq[owner] = id
	return id
}

func (h *rwHarness) args(owner string, lease int64) wire.Args {
	return wire.Args{Owner: owner, LeaseMs: lease}
}

func (h *rwHarness) acquire(t *rapid.T, owner string, write bool) {
	lease := h.dur(t, "lease", 1, 30)
	reader := strings.TrimSuffix(owner, ":write")
	var wantOK, gotOK bool
	var wantTTL, gotTTL int64
	var err error
	n := len(h.m.Published)
	if write {
		wantOK, wantTTL = h.m.WriteAcquire(h.server, owner, lease)
		gotOK, gotTTL, err = h.scripts.WriteAcquire(h.ctx, h.rdb, h.keys, h.args(owner, lease))
	} else {
		wantOK, wantTTL = h.m.ReadAcquire(h.server, reader, lease)
		gotOK, gotTTL, err = h.scripts.ReadAcquire(h.ctx, h.rdb, h.keys, h.args(reader, lease))
	}
	h.noErr(t, "acquire", err)
	if gotOK {
		// The holder's validity: a re-entry keeps the longer of the hold's
		// and its own lease, as the scripts keep max(TTL, lease) (issue 30;
		// internal/core's ReentryKeepsLonger).
		h.promise[owner] = max(h.promise[owner], h.server+lease)
	}
	h.end(t, fmt.Sprintf("acquire by %s (lease %d)", owner, lease), n, func() error {
		if wantOK != gotOK {
			return fmt.Errorf("acquired: model %v, Redis %v", wantOK, gotOK)
		}
		if !wantOK && !h.within(wantTTL, gotTTL) {
			return fmt.Errorf("ttl: model %d, Redis %d", wantTTL, gotTTL)
		}
		return nil
	})
}

func (h *rwHarness) unlock(t *rapid.T, owner string) {
	lease := h.dur(t, "lease", 1, 30)
	latch := h.dur(t, "latch", 1, 20)
	req := h.request(t, owner)
	n := len(h.m.Published)
	var want, got wire.UnlockResult
	var err error
	if model.IsWriter(owner) {
		want = wire.UnlockResult(h.m.WriteUnlock(h.server, owner, lease, req, latch))
		got, err = h.scripts.WriteUnlock(h.ctx, h.rdb, h.keys, wire.Args{Owner: owner, LeaseMs: lease, RequestID: req, LatchMs: latch})
	} else {
		want = wire.UnlockResult(h.m.ReadUnlock(h.server, owner, req, latch))
		got, err = h.scripts.ReadUnlock(h.ctx, h.rdb, h.keys, wire.Args{Owner: owner, RequestID: req, LatchMs: latch})
	}
	h.noErr(t, "unlock", err)
	if got != wire.StillHeld {
		delete(h.promise, owner) // the client ends its hold (internal/core)
	}
	h.end(t, fmt.Sprintf("unlock by %s (%s)", owner, req), n, func() error {
		if want != got {
			return fmt.Errorf("reply: model %v, Redis %v", want, got)
		}
		return nil
	})
}

func (h *rwHarness) actHolderUnlocks(t *rapid.T) {
	h.m.Advance(h.server)
	holders := slices.Sorted(maps.Keys(h.m.Holds))
	if len(holders) == 0 {
		t.Skip("nobody holds the lock")
	}
	h.unlock(t, rapid.SampledFrom(holders).Draw(t, "holder"))
}

// actWriterUnlocks: the writer, if any, releases a write hold (its own
// reads may have run out meanwhile).
func (h *rwHarness) actWriterUnlocks(t *rapid.T) {
	h.m.Advance(h.server)
	for _, o := range slices.Sorted(maps.Keys(h.m.Holds)) {
		if model.IsWriter(o) {
			h.unlock(t, o)
			return
		}
	}
	t.Skip("no writer")
}

// actWriterReads: the writer, if any, takes a read hold.
func (h *rwHarness) actWriterReads(t *rapid.T) {
	h.m.Advance(h.server)
	for o := range h.m.Holds {
		if model.IsWriter(o) {
			h.acquire(t, strings.TrimSuffix(o, ":write"), false)
			return
		}
	}
	t.Skip("no writer")
}

func (h *rwHarness) force(t *rapid.T, write bool) {
	n := len(h.m.Published)
	want := h.m.ForceUnlock(h.server, write)
	got, err := h.scripts.RWForceUnlock(h.ctx, h.rdb, h.keys, wire.Args{}, write)
	h.noErr(t, "forceUnlock", err)
	if got {
		clear(h.promise) // every holder loses the lock (and learns it)
	}
	h.end(t, fmt.Sprintf("forceUnlock (write %v)", write), n, func() error {
		if want != got {
			return fmt.Errorf("reply: model %v, Redis %v", want, got)
		}
		return nil
	})
}

// actOtherKind: a lock of another kind on the same name (a reentrant
// lock's hash: its owner's field, no mode) is taken when the name is free,
// or released when it holds.
func (h *rwHarness) actOtherKind(t *rapid.T) {
	h.m.Advance(h.server)
	n := len(h.m.Published)
	if h.m.Holds[model.OtherOwner] > 0 {
		h.m.OtherUnlock(h.server)
		h.noErr(t, "other kind's unlock", h.rdb.Del(h.ctx, h.keys.Name).Err())
		h.end(t, "other kind's unlock", n, func() error { return nil })
		return
	}
	lease := h.dur(t, "lease", 1, 30)
	want := h.m.OtherLock(h.server, lease)
	// acquire.lua's rule: take the name when no key is there.
	got, _, err := h.scripts.Acquire(h.ctx, h.rdb, h.keys, wire.Args{Owner: model.OtherOwner, LeaseMs: lease})
	h.noErr(t, "other kind's lock", err)
	h.end(t, fmt.Sprintf("other kind's lock (lease %d)", lease), n, func() error {
		if want != got {
			return fmt.Errorf("other kind acquired: model %v, Redis %v", want, got)
		}
		return nil
	})
}

func (h *rwHarness) actRenew(t *rapid.T) {
	lease := h.dur(t, "lease", 1, 30)
	k := rapid.IntRange(1, 3).Draw(t, "batch")
	var owners, names []string
	for range k {
		o := h.reader(t)
		if rapid.IntRange(0, 2).Draw(t, "writer") == 0 {
			o = model.WriterOf(o)
		}
		owners = append(owners, o)
		names = append(names, h.keys.Name)
	}
	n := len(h.m.Published)
	var want []bool
	for _, o := range owners {
		want = append(want, h.m.Renew(h.server, o, lease))
	}
	st, err := h.scripts.RWRenewEach(h.ctx, h.rdb, names, owners, lease)
	h.noErr(t, "renew", err)
	got := make([]bool, len(st))
	for i, s := range st {
		got[i] = s == wire.RenewOK
		if got[i] {
			h.promise[owners[i]] = max(h.promise[owners[i]], h.server+lease)
		} else {
			delete(h.promise, owners[i]) // the watchdog reports the loss
		}
	}
	h.end(t, fmt.Sprintf("renew %v (lease %d)", owners, lease), n, func() error {
		if !slices.Equal(want, got) {
			return fmt.Errorf("renewed: model %v, Redis %v", want, got)
		}
		return nil
	})
}

func (h *rwHarness) advance(t *rapid.T, d int64) {
	n := len(h.m.Published)
	h.server += d
	h.noErr(t, "fast-forward", h.clock(h.ctx, d))
	h.end(t, fmt.Sprintf("time +%d", d), n, func() error { return nil })
}

func (h *rwHarness) noErr(t *rapid.T, what string, err error) {
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (h *rwHarness) within(want, got int64) bool {
	if h.tol == 0 || want == model.NoLock || want == model.NoExpiry {
		return want == got
	}
	return want-h.tol < got && got <= want
}

// end dumps Redis, checks the promise on it, then compares the reply
// (replyErr) and the state with the model's.
func (h *rwHarness) end(t *rapid.T, what string, published int, replyErr func() error) {
	h.steps++
	msgs, err := h.sub.drain(h.ctx)
	h.noErr(t, "pub/sub", err)
	got, err := rwDump(h.ctx, h.rdb, h.m.Names(), h.server)
	h.noErr(t, "dump", err)
	h.m.Advance(h.server)
	if err := h.checkPromise(got); err != nil {
		t.Fatalf("after %s: the lock's promise is broken: %v\nredis: %v", what, err, got)
	}
	if err := replyErr(); err != nil {
		t.Fatalf("after %s: %v\nmodel: %v\nredis: %v", what, err, h.m, got)
	}
	if err := h.compare(got, msgs, h.m.Published[published:]); err != nil {
		t.Fatalf("after %s: Redis differs from the model: %v\nmodel: %v\nredis: %v", what, err, h.m, got)
	}
	if h.m.Mode != "" {
		h.counts.joins++ // held steps, for the log
	}
}

// checkPromise checks exclusion and validity on a dump of Redis.
func (h *rwHarness) checkPromise(got *model.RW) error {
	if err := got.CheckShape(); err != nil {
		return err
	}
	if err := got.CheckReadLive(h.server, h.tol); err != nil {
		return err // nobody holds a read, yet writers are kept out
	}
	for _, o := range slices.Sorted(maps.Keys(h.promise)) {
		until := h.promise[o]
		if until <= h.server {
			delete(h.promise, o) // its lease is over: nothing promised any more
			continue
		}
		if got.Holds[o] == 0 {
			return fmt.Errorf("%s was granted the lock with a lease until %d and no reply ended its hold, but it does not hold it at %d", o, until, h.server)
		}
		if got.LeaseEnd != model.NoExpiry && got.LeaseEnd < until-h.tol {
			return fmt.Errorf("the lock expires at %d, before the lease of %s's latest grant or renewal (until %d)", got.LeaseEnd, o, until)
		}
	}
	return nil
}

func (h *rwHarness) compare(got *model.RW, published, wantPub []model.Message) error {
	want := h.m
	if want.Mode != got.Mode || !maps.Equal(want.Holds, got.Holds) {
		return fmt.Errorf("hash mode %q %v, want %q %v", got.Mode, got.Holds, want.Mode, want.Holds)
	}
	if want.Mode != "" && ((want.LeaseEnd == model.NoExpiry) != (got.LeaseEnd == model.NoExpiry) ||
		want.LeaseEnd != model.NoExpiry && !h.within(want.LeaseEnd-h.server, got.LeaseEnd-h.server)) {
		return fmt.Errorf("lease ends %d, want %d", got.LeaseEnd, want.LeaseEnd)
	}
	if !maps.EqualFunc(want.Timeouts, got.Timeouts, func(w, g int64) bool { return h.within(w-h.server, g-h.server) }) {
		return fmt.Errorf("read-hold keys %v, want %v", got.Timeouts, want.Timeouts)
	}
	if !maps.EqualFunc(want.Latches, got.Latches, func(w, g model.Latch) bool {
		return w.Result == g.Result && h.within(w.ExpiresAt-h.server, g.ExpiresAt-h.server)
	}) {
		return fmt.Errorf("latches %v, want %v", got.Latches, want.Latches)
	}
	if !slices.Equal(wantPub, published) {
		return fmt.Errorf("published %v, want %v", published, wantPub)
	}
	return nil
}

// rwDump reads every key of the read-write lock into a model.RW, as of
// server time server. It fails on a key the lock's state does not explain.
func rwDump(ctx context.Context, rdb *redis.Client, names model.RWNames, server int64) (*model.RW, error) {
	pipe := rdb.Pipeline()
	all := pipe.Keys(ctx, "*"+names.Lock+"*")
	hash := pipe.HGetAll(ctx, names.Lock)
	pttl := pipe.PTTL(ctx, names.Lock)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	l := model.NewRW(names.Lock)
	for f, v := range hash.Val() {
		if f == "mode" {
			l.Mode = v
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("hold count of %s: %q", f, v)
		}
		l.Holds[f] = n
	}
	if len(hash.Val()) > 0 {
		if l.Mode == "" && l.Holds[model.OtherOwner] == 0 {
			return nil, fmt.Errorf("hash without mode: %v", hash.Val())
		}
		l.LeaseEnd = model.NoExpiry
		if p := pttl.Val(); p > 0 {
			l.LeaseEnd = server + p.Milliseconds()
		}
	}
	var other []string
	for _, k := range all.Val() {
		switch {
		case k == names.Lock:
		case strings.HasPrefix(k, names.TimeoutPrefix()), strings.HasPrefix(k, names.LatchPrefix()):
			other = append(other, k)
		default:
			return nil, fmt.Errorf("unexpected key %q", k)
		}
	}
	if len(other) == 0 {
		return l, nil
	}
	slices.Sort(other)
	pipe = rdb.Pipeline()
	vals := make([]*redis.StringCmd, len(other))
	ttls := make([]*redis.DurationCmd, len(other))
	for i, k := range other {
		vals[i] = pipe.Get(ctx, k)
		ttls[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	for i, k := range other {
		if ttls[i].Val() <= 0 {
			return nil, fmt.Errorf("%s has no expiry", k)
		}
		exp := server + ttls[i].Val().Milliseconds()
		if strings.HasPrefix(k, names.TimeoutPrefix()) {
			if vals[i].Val() != "1" {
				return nil, fmt.Errorf("read-hold key %s holds %q", k, vals[i].Val())
			}
			l.Timeouts[k] = exp
			continue
		}
		var r model.UnlockResult
		switch vals[i].Val() {
		case "0":
			r = model.StillHeld
		case "1":
			r = model.Released
		default:
			return nil, fmt.Errorf("latch %s holds %q", k, vals[i].Val())
		}
		l.Latches[strings.TrimPrefix(k, names.LatchPrefix())] = model.Latch{Result: r, ExpiresAt: exp}
	}
	return l, nil
}

func TestRWMiniredis(t *testing.T) { check(t, rwMachine, miniBackend{}) }

func TestRWRedisServer(t *testing.T) { check(t, rwMachine, newRealBackend(t)) }

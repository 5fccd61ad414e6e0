package propertytests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/model"
)

// The fair semaphore (lua/sem_fair_*.lua) against its model
// (model.SemFair): semFairMachine runs random operations on both, and after
// every step compares the replies, the wake-ups published and the whole
// state, on miniredis and on redis-server.
//
// The scripts read the server's clock (TIME). On miniredis the machine
// sets that clock (SetTime) and moves the keys' TTLs with it
// (FastForward), so every value compares exactly. A real server's clock
// cannot be moved: moving it by d rewrites the state as if d had passed
// (every PTTL less d, every absolute instant stored, the lease ends and
// the queue's deadlines, less d), durations are drawn in units of
// realUnit and values read from the clock may lag the model by the real
// time elapsed (under a unit), as the fair lock's machines do.

// semBackend is where a sequence runs.
type semBackend interface {
	start(t *rapid.T) (rdb *redis.Client, name string, advance func(ctx context.Context, d int64) error)
	unit() int64
	tolerance() int64
	real() bool
}

// semV0 is the model's clock at the start of every sequence, Unix ms.
const semV0 int64 = 1_700_000_000_000

type semMini struct{}

func (semMini) start(t *rapid.T) (*redis.Client, string, func(context.Context, int64) error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatalf("miniredis: %v", err)
	}
	now := semV0
	m.SetTime(time.UnixMilli(now))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close(); m.Close() })
	return rdb, "sem", func(_ context.Context, d int64) error {
		now += d
		m.SetTime(time.UnixMilli(now))
		m.FastForward(time.Duration(d) * time.Millisecond)
		return nil
	}
}
func (semMini) unit() int64      { return 1 }
func (semMini) tolerance() int64 { return 0 }
func (semMini) real() bool       { return false }

type semReal struct{ rdb *redis.Client }

func newSemReal(t testing.TB) semReal { return semReal{rdb: redistest.Real(t).Client(t)} }

// semForwardScript moves a semaphore's state d ms into the future: PTTLs
// (deleting the keys that expire), lease ends and the queue's absolute
// deadlines (the head's and the tail's; the others are relative).
var semForwardScript = redis.NewScript(`
local d = tonumber(ARGV[1])
for _, k in ipairs(redis.call('keys', ARGV[2])) do
    local p = redis.call('pttl', k)
    if p > 0 then
        if p <= d then
            redis.call('del', k)
        else
            redis.call('pexpire', k, p - d)
        end
    end
end
local z = redis.call('zrange', KEYS[1], 0, -1, 'withscores')
for i = 1, #z, 2 do
    redis.call('zadd', KEYS[1], tonumber(z[i + 1]) - d, z[i])
end
if d > 0 and redis.call('exists', KEYS[2]) == 1 then
    redis.call('hincrby', KEYS[2], 'hd', 0 - d)
    redis.call('hincrby', KEYS[2], 'td', 0 - d)
end
return 0`)

func (b semReal) start(t *rapid.T) (*redis.Client, string, func(context.Context, int64) error) {
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := "pt:" + hex.EncodeToString(r[:]) + ":sem"
	k := wire.SemFairKeysFor(name)
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := b.rdb.Keys(ctx, "*"+name+"*").Result()
		if len(keys) > 0 {
			_ = b.rdb.Del(ctx, keys...).Err()
		}
	})
	return b.rdb, name, func(ctx context.Context, d int64) error {
		return semForwardScript.Run(ctx, b.rdb, []string{k.Leases, k.Queue}, d, "*"+name+"*").Err()
	}
}
func (semReal) unit() int64      { return realUnit }
func (semReal) tolerance() int64 { return realUnit }
func (semReal) real() bool       { return true }

type semFairHarness struct {
	ctx     context.Context
	rdb     *redis.Client
	scripts *wire.SemFairScripts
	k       wire.SemFairKeys
	advance func(context.Context, int64) error
	sub     *subscriber
	u, tol  int64
	m       *model.SemFair
	got     *model.SemFair
	mWoken  int
	now     int64 // the model's server clock
	grace   map[string]int64
	lastAcq map[string]string // owner -> its last acquisition request id
	lastRel map[string]string // owner -> its last release request id
	slot    map[string]int64  // queued owner -> the slot it queued with
	nextReq int
	c       *counts

	prevQueue []string
}

func semFairMachine(b semBackend, scripts *wire.SemFairScripts, c *counts) func(*rapid.T) {
	return func(t *rapid.T) {
		rdb, name, advance := b.start(t)
		h := &semFairHarness{ctx: context.Background(), rdb: rdb, scripts: scripts, k: wire.SemFairKeysFor(name),
			advance: advance, u: b.unit(), tol: b.tolerance(), m: model.NewSemFair(), got: model.NewSemFair(),
			now: semV0, grace: map[string]int64{}, lastAcq: map[string]string{}, lastRel: map[string]string{},
			slot: map[string]int64{}, c: c}
		h.sub = subscribe(t, rdb, model.Names{Channel: h.k.Channel})
		c.sequences++
		for _, cl := range clients {
			h.grace[cl] = rapid.SampledFrom([]int64{0, 0, 1, 2, 5}).Draw(t, "grace "+cl) * h.u
		}
		if rapid.IntRange(0, 9).Draw(t, "no pool") > 0 {
			h.setPermits(t, rapid.Int64Range(1, 4).Draw(t, "pool"))
		}
		t.Repeat(weighted(h.check, []action{
			{"acquire", 4, func(t *rapid.T) { h.acquire(t, h.owner(t), true) }},
			{"headPolls", 3, h.actHeadPolls},
			{"release", 2, func(t *rapid.T) { h.release(t, h.holderOr(t)) }},
			{"leave", 1, h.actLeave},
			{"advance", 2, func(t *rapid.T) { h.forward(t, h.dur(t, "d", 0, 10)) }},
			// around and past the keys' ends (model.SemKeep after their
			// last entry; on miniredis's 1 ms unit only this reaches them)
			{"advanceFar", 1, h.actAdvanceFar},
			{"tryAcquire", 1, func(t *rapid.T) { h.acquire(t, h.owner(t), false) }},
			{"pollQueued", 1, h.actPollQueued},
			{"expireLease", 1, h.actExpireLease},
			{"abandon", 1, h.actAbandon},
			{"renew", 1, h.actRenew},
			{"setPermits", 1, func(t *rapid.T) { h.setPermits(t, rapid.Int64Range(0, 5).Draw(t, "pool")) }},
			{"addPermits", 1, h.actAddPermits},
		}))
	}
}

func (h *semFairHarness) dur(t *rapid.T, label string, lo, hi int64) int64 {
	return rapid.Int64Range(lo, hi).Draw(t, label) * h.u
}
func (h *semFairHarness) owner(t *rapid.T) string { return rapid.SampledFrom(owners).Draw(t, "owner") }

func (h *semFairHarness) holderOr(t *rapid.T) string {
	if len(h.m.Holders) > 0 && rapid.IntRange(0, 3).Draw(t, "pick") > 0 {
		return rapid.SampledFrom(slices.Sorted(maps.Keys(h.m.Holders))).Draw(t, "holder")
	}
	return h.owner(t)
}

func (h *semFairHarness) fail(t *rapid.T, format string, args ...any) {
	t.Fatalf(format+"\nmodel: %v\nredis: %v", append(args, h.m, h.got)...)
}

// semErrKind maps the wire's errors and the model's to one name.
func semErrKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, wire.ErrSemNotSet), errors.Is(err, model.ErrSemNotSet):
		return "not set"
	case errors.Is(err, wire.ErrSemTooMany), errors.Is(err, model.ErrSemTooMany):
		return "too many"
	case errors.Is(err, wire.ErrSemAlreadyHolds), errors.Is(err, model.ErrSemAlreadyHolds):
		return "already holds"
	case errors.Is(err, wire.ErrSemNegative), errors.Is(err, model.ErrSemNegative):
		return "negative"
	case errors.Is(err, wire.ErrAbandoned), errors.Is(err, model.ErrSemFairAbandoned):
		return "abandoned"
	case errors.Is(err, wire.ErrGrantOver), errors.Is(err, model.ErrSemFairGrantOver):
		return "grant over"
	}
	return "other: " + err.Error()
}

func (h *semFairHarness) acquire(t *rapid.T, owner string, queue bool) {
	n := rapid.Int64Range(1, 3).Draw(t, "n")
	if w, ok := h.m.Wants[owner]; ok && rapid.IntRange(0, 3).Draw(t, "same ask") > 0 {
		n = w
	}
	h.acquireN(t, owner, n, queue)
}

func (h *semFairHarness) acquireN(t *rapid.T, owner string, n int64, queue bool) {
	a := wire.SemArgs{Owner: owner, Permits: n, LeaseMs: h.dur(t, "lease", 1, 30), WaitMs: h.dur(t, "wait", 1, 40),
		GraceMs: h.grace[clientOf(owner)], Queue: queue, LatchMs: h.dur(t, "latch", 1, 40)}
	if last, ok := h.lastAcq[owner]; ok && rapid.IntRange(0, 4).Draw(t, "replay") == 0 {
		a.AcquireID = last
	} else if rapid.IntRange(0, 5).Draw(t, "no id") > 0 {
		h.nextReq++
		a.AcquireID = "acq" + strconv.Itoa(h.nextReq)
		h.lastAcq[owner] = a.AcquireID
	}
	latch := int64(0)
	if a.AcquireID != "" {
		latch = a.LatchMs
	}
	wasQueued := slices.Contains(h.m.Queue, owner)
	a.Position = rapid.Bool().Draw(t, "position")
	mg, mv, merr := h.m.Acquire(h.now, model.SemAcquire{Owner: owner, N: n, Lease: a.LeaseMs, Wait: a.WaitMs,
		Grace: a.GraceMs, Queue: queue, Request: a.AcquireID, LatchMs: latch})
	r, err := h.scripts.Acquire(h.ctx, h.rdb, h.k, a)
	if semErrKind(merr) != semErrKind(err) {
		h.fail(t, "acquire %s n=%d queue=%v: model error %v, redis %v", owner, n, queue, merr, err)
	}
	if err == nil {
		got := r.Token
		if !r.Granted {
			got = r.SleepMs
		}
		if mg != r.Granted || mg && mv != got || !mg && !semWithin(h.tol, mv, got) {
			h.fail(t, "acquire %s n=%d queue=%v: model (%v, %d), redis (%v, %d)", owner, n, queue, mg, mv, r.Granted, got)
		}
		if !r.Granted {
			want := wire.Ahead{Ahead: -1}
			if a.Position && queue {
				want = wire.Ahead{Ahead: h.m.Ahead(owner), Joined: h.m.Joined}
				h.c.positions++
			}
			if r.Ahead != want {
				h.fail(t, "acquire %s n=%d queue=%v position=%v: position %+v, model %+v (queue %v, seqs %v)",
					owner, n, queue, a.Position, r.Ahead, want, h.m.Queue, h.m.Seqs)
			}
		}
		if !r.Granted && queue && !wasQueued {
			h.slot[owner] = a.WaitMs
			h.c.joins++
		}
		if r.Granted && wasQueued {
			h.c.queueGrants++
		}
	}
	h.end(t, fmt.Sprintf("acquire %s n=%d queue=%v", owner, n, queue))
}

func countNotes(sent []string) int {
	n := 0
	for _, p := range sent {
		if _, ok := wire.ParseNote(p); ok {
			n++
		}
	}
	return n
}

func semWithin(tol, want, got int64) bool {
	if tol == 0 || want == -1 || want == 1 {
		return want == got
	}
	return want-tol < got && got <= want
}

func (h *semFairHarness) actHeadPolls(t *rapid.T) {
	if len(h.m.Queue) == 0 {
		t.Skip("nobody queued")
	}
	head := h.m.Queue[0]
	h.acquireN(t, head, h.m.Wants[head], rapid.IntRange(0, 3).Draw(t, "try") > 0)
}

func (h *semFairHarness) actPollQueued(t *rapid.T) {
	if len(h.m.Queue) == 0 {
		t.Skip("nobody queued")
	}
	w := rapid.SampledFrom(h.m.Queue).Draw(t, "waiter")
	h.acquireN(t, w, h.m.Wants[w], true)
}

func (h *semFairHarness) release(t *rapid.T, owner string) {
	a := wire.SemArgs{Owner: owner, GraceMs: h.grace[clientOf(owner)], LatchMs: h.dur(t, "latch", 1, 20)}
	if last, ok := h.lastRel[owner]; ok && rapid.IntRange(0, 4).Draw(t, "retry") == 0 {
		a.ReleaseID = last
	} else {
		h.nextReq++
		a.ReleaseID = "rel" + strconv.Itoa(h.nextReq)
		h.lastRel[owner] = a.ReleaseID
	}
	mr := h.m.Release(h.now, owner, a.ReleaseID, a.LatchMs, a.GraceMs)
	ok, err := h.scripts.Release(h.ctx, h.rdb, h.k, a)
	if err != nil {
		h.fail(t, "release: %v", err)
	}
	if (mr == 1) != ok {
		h.fail(t, "release %s: model %d, redis %v", owner, mr, ok)
	}
	h.end(t, "release "+owner)
}

func (h *semFairHarness) actLeave(t *rapid.T) {
	owner := h.owner(t)
	if len(h.m.Queue) > 0 && rapid.IntRange(0, 4).Draw(t, "queued") > 0 {
		owner = rapid.SampledFrom(h.m.Queue).Draw(t, "waiter")
	}
	wait, ok := h.slot[owner]
	if !ok || rapid.IntRange(0, 5).Draw(t, "other slot") == 0 {
		wait = h.dur(t, "wait", 1, 40)
	}
	a := wire.SemArgs{Owner: owner, WaitMs: wait, GraceMs: h.grace[clientOf(owner)]}
	mw := h.m.Leave(h.now, owner, wait, a.GraceMs)
	was, err := h.scripts.Leave(h.ctx, h.rdb, h.k, a)
	if err != nil || was != mw {
		h.fail(t, "leave %s: model %v, redis %v %v", owner, mw, was, err)
	}
	h.end(t, "leave "+owner)
}

func (h *semFairHarness) actAbandon(t *rapid.T) {
	owner := h.owner(t)
	// Half the time a queued owner: a request given up while it waits in
	// the queue is what a release must not hand the permits to.
	if len(h.m.Queue) > 0 && rapid.Bool().Draw(t, "queued") {
		owner = rapid.SampledFrom(h.m.Queue).Draw(t, "queued owner")
	}
	id, ok := h.lastAcq[owner]
	if !ok {
		t.Skip("no request to abandon")
	}
	a := wire.SemArgs{Owner: owner, AcquireID: id, LatchMs: h.dur(t, "latch", 1, 40), GraceMs: h.grace[clientOf(owner)]}
	mg := h.m.Abandon(h.now, owner, id, a.LatchMs, a.GraceMs)
	g, err := h.scripts.Abandon(h.ctx, h.rdb, h.k, a)
	if err != nil || g != mg {
		h.fail(t, "abandon %s %s: model %v, redis %v %v", owner, id, mg, g, err)
	}
	h.end(t, "abandon "+owner)
}

func (h *semFairHarness) actRenew(t *rapid.T) {
	owner, lease := h.holderOr(t), h.dur(t, "lease", 1, 30)
	mr := h.m.Renew(h.now, owner, lease)
	st, err := h.scripts.RenewEach(h.ctx, h.rdb, []wire.SemFairKeys{h.k}, []string{owner}, lease)
	if err != nil || (st[0] == wire.RenewOK) != mr || st[0] == wire.RenewWrongType {
		h.fail(t, "renew %s: model %v, redis %v %v", owner, mr, st, err)
	}
	h.end(t, "renew "+owner)
}

func (h *semFairHarness) setPermits(t *rapid.T, pool int64) {
	grace := h.grace[rapid.SampledFrom(clients).Draw(t, "client")]
	mo := h.m.SetPermits(h.now, pool, grace)
	old, was, err := h.scripts.SetPermits(h.ctx, h.rdb, h.k, pool, wire.SemArgs{GraceMs: grace})
	if err != nil || was != (mo >= 0) || was && old != mo {
		h.fail(t, "setPermits %d: model %d, redis %d %v %v", pool, mo, old, was, err)
	}
	h.end(t, "setPermits "+strconv.FormatInt(pool, 10))
}

func (h *semFairHarness) actAddPermits(t *rapid.T) {
	delta := rapid.Int64Range(-2, 3).Draw(t, "delta")
	grace := h.grace[rapid.SampledFrom(clients).Draw(t, "client")]
	mp, merr := h.m.AddPermits(h.now, delta, grace)
	p, err := h.scripts.AddPermits(h.ctx, h.rdb, h.k, delta, wire.SemArgs{GraceMs: grace})
	if semErrKind(merr) != semErrKind(err) || err == nil && p != mp {
		h.fail(t, "addPermits %d: model %d %v, redis %d %v", delta, mp, merr, p, err)
	}
	h.end(t, "addPermits "+strconv.FormatInt(delta, 10))
}

func (h *semFairHarness) forward(t *rapid.T, d int64) {
	if end, ok := h.m.HoldersEnd(); ok && end <= h.now+d {
		h.c.expired++
	}
	if end, ok := h.m.QueueEnd(); ok && end <= h.now+d {
		h.c.expired++
	}
	h.now += d
	if err := h.advance(h.ctx, d); err != nil {
		t.Fatalf("advance: %v", err)
	}
	h.end(t, "time +"+strconv.FormatInt(d, 10))
}

// actAdvanceFar moves the clock to around the end of the holders' or the
// queue's keys (model.SemKeep after their last entry), or SemKeep and
// more when neither exists: on miniredis's 1 ms unit only this reaches
// them.
func (h *semFairHarness) actAdvanceFar(t *rapid.T) {
	var ends []int64
	if end, ok := h.m.HoldersEnd(); ok {
		ends = append(ends, end)
	}
	if end, ok := h.m.QueueEnd(); ok {
		ends = append(ends, end)
	}
	if len(ends) == 0 {
		h.forward(t, model.SemKeep+h.dur(t, "far", 0, 40))
		return
	}
	end := rapid.SampledFrom(ends).Draw(t, "end")
	h.forward(t, max(0, (end-h.now+h.u-1)/h.u*h.u+h.dur(t, "around", -2, 2)))
}

// actExpireLease moves the clock to the end of the first lease to end.
func (h *semFairHarness) actExpireLease(t *rapid.T) {
	if len(h.m.Leases) == 0 {
		t.Skip("nobody holds")
	}
	end := slices.Min(slices.Collect(maps.Values(h.m.Leases)))
	h.forward(t, max(0, (end-h.now+h.u-1)/h.u*h.u))
}

// end reads the backend's state and wake-ups and compares them with the
// model's.
func (h *semFairHarness) end(t *rapid.T, what string) {
	h.c.steps++
	h.m.Advance(h.now)
	pub, err := h.sub.drain(h.ctx)
	if err != nil {
		t.Fatalf("pub/sub: %v", err)
	}
	got, err := semFairDump(h.ctx, h.rdb, h.k, h.now)
	if err != nil {
		t.Fatalf("after %s: dump: %v", what, err)
	}
	h.got = got
	var woken, sent []string
	for _, m := range pub {
		_, note := wire.ParseNote(m.Payload)
		_, grant := wire.ParseGrant(m.Payload)
		if grant {
			h.c.grants++
		}
		if !strings.HasPrefix(m.Channel, h.k.Channel+":") || m.Payload != wire.UnlockMessage && !note && !grant {
			t.Fatalf("after %s: unexpected message %v", what, m)
		}
		woken = append(woken, strings.TrimPrefix(m.Channel, h.k.Channel+":"))
		sent = append(sent, m.Payload)
	}
	h.c.notified += len(woken)
	for _, w := range h.prevQueue {
		if !slices.Contains(got.Queue, w) && !strings.Contains(what, " "+w) {
			h.c.pruned++ // left the queue in someone else's call
		}
	}
	h.prevQueue = slices.Clone(got.Queue)
	h.c.maxQueue = max(h.c.maxQueue, len(got.Queue))
	want, wantSent := h.m.Woken[h.mWoken:], h.m.Sent[h.mWoken:]
	h.mWoken = len(h.m.Woken)
	if !slices.Equal(want, woken) {
		h.fail(t, "after %s: woken %v, model %v", what, woken, want)
	}
	// A note carries an attempt's reply: its place exactly, its sleep as
	// an attempt's (within the backend's tolerance).
	if !slices.EqualFunc(wantSent, sent, func(w, g string) bool {
		wn, wok := wire.ParseNote(w)
		gn, gok := wire.ParseNote(g)
		if !wok || !gok {
			return w == g
		}
		return wn.Ahead == gn.Ahead && semWithin(h.tol, wn.SleepMs, gn.SleepMs)
	}) {
		h.fail(t, "after %s: messages %v, model %v (to %v)", what, sent, wantSent, woken)
	}
	h.c.sleepNotes += countNotes(sent)
	if err := h.compare(got); err != nil {
		h.fail(t, "after %s: %v", what, err)
	}
	// Safety, independently of the model: live holders never hold more
	// than the pool at a grant.
	if strings.HasPrefix(what, "acquire") && got.PoolSet && got.Pool >= h.m.Pool && got.Available(h.now) < 0 && h.m.Available(h.now) >= 0 {
		h.fail(t, "after %s: %d permits held of a pool of %d", what, got.Pool-got.Available(h.now), got.Pool)
	}
}

func (h *semFairHarness) within(a, b int64) bool { return semWithin(h.tol, a, b) }

func (h *semFairHarness) compare(g *model.SemFair) error {
	m := h.m
	switch {
	case m.PoolSet != g.PoolSet || m.Pool != g.Pool:
		return fmt.Errorf("pool %d (set %v), model %d (set %v)", g.Pool, g.PoolSet, m.Pool, m.PoolSet)
	case !maps.Equal(m.Holders, g.Holders):
		return fmt.Errorf("holders %v, model %v", g.Holders, m.Holders)
	case !maps.EqualFunc(m.Leases, g.Leases, h.within):
		return fmt.Errorf("leases %v, model %v", g.Leases, m.Leases)
	case !slices.Equal(m.Queue, g.Queue):
		return fmt.Errorf("queue %v, model %v", g.Queue, m.Queue)
	case !maps.Equal(m.Wants, g.Wants):
		return fmt.Errorf("asks %v, model %v", g.Wants, m.Wants)
	case !maps.EqualFunc(m.Deadlines, g.Deadlines, h.within):
		return fmt.Errorf("deadlines %v, model %v", g.Deadlines, m.Deadlines)
	case !maps.Equal(m.Notes, g.Notes):
		return fmt.Errorf("handoff notes %v, model %v", g.Notes, m.Notes)
	case m.Token != g.Token:
		return fmt.Errorf("token %d, model %d", g.Token, m.Token)
	case m.GraceOwner != g.GraceOwner || m.GraceOwner != "" && (m.GraceSecond != g.GraceSecond || !h.within(m.GraceEnd, g.GraceEnd)):
		return fmt.Errorf("grace %q@%d (second %v), model %q@%d (second %v)", g.GraceOwner, g.GraceEnd, g.GraceSecond, m.GraceOwner, m.GraceEnd, m.GraceSecond)
	}
	latchEq := func(a, b model.SemLatch) bool {
		return a.State == b.State && a.Token == b.Token && a.Result == b.Result && h.within(a.ExpiresAt, b.ExpiresAt)
	}
	if !maps.EqualFunc(m.Acquires, g.Acquires, latchEq) {
		return fmt.Errorf("acquisition latches %v, model %v", g.Acquires, m.Acquires)
	}
	if !maps.EqualFunc(m.Releases, g.Releases, latchEq) {
		return fmt.Errorf("release latches %v, model %v", g.Releases, m.Releases)
	}
	return nil
}

func (h *semFairHarness) check(t *rapid.T) {
	if err := h.m.CheckSemInvariants(); err != nil {
		t.Fatalf("model: %v\n%v", err, h.m)
	}
	if err := h.got.CheckSemInvariants(); err != nil {
		t.Fatalf("redis: %v\n%v", err, h.got)
	}
}

// semFairDump reads every key of the semaphore into a model.SemFair, with its
// instants on the model's clock (now): an instant stored on the server's
// clock is now plus its distance from the server's TIME, a key's expiry
// now plus its PTTL. It fails on any key the state does not explain, and
// on a queue hash whose links do not hold together.
func semFairDump(ctx context.Context, rdb *redis.Client, k wire.SemFairKeys, now int64) (*model.SemFair, error) {
	pipe := rdb.Pipeline()
	tm := pipe.Time(ctx)
	all := pipe.Keys(ctx, "*"+k.Name+"*")
	holders := pipe.HGetAll(ctx, k.Holders)
	leases := pipe.ZRangeWithScores(ctx, k.Leases, 0, -1)
	pool := pipe.Get(ctx, k.Permits)
	wants := pipe.HGetAll(ctx, k.Wants)
	token := pipe.Get(ctx, k.Token)
	grace := pipe.Get(ctx, k.Grace)
	gracePTTL := pipe.PTTL(ctx, k.Grace)
	sq := pipe.HGetAll(ctx, k.Queue)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	server := tm.Val().UnixMilli()
	s := model.NewSemFair()
	for o, v := range holders.Val() {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("holder %s: %q", o, v)
		}
		s.Holders[o] = n
	}
	for _, z := range leases.Val() {
		s.Leases[z.Member.(string)] = now + int64(z.Score) - server
	}
	if v, err := pool.Result(); err == nil {
		s.Pool, s.PoolSet = mustInt(v), true
	}
	for o, v := range wants.Val() {
		s.Wants[o] = mustInt(v)
	}
	if v, err := token.Result(); err == nil {
		s.Token = mustInt(v)
	}
	if o, err := grace.Result(); err == nil {
		if gracePTTL.Val() <= 0 {
			return nil, fmt.Errorf("the grace key does not expire")
		}
		s.GraceSecond = strings.HasPrefix(o, "+")
		s.GraceOwner = strings.TrimPrefix(o, "+")
		s.GraceEnd = now + gracePTTL.Val().Milliseconds() - model.GraceMargin
	}
	// The queue: walk the links, then map the absolute deadlines to the
	// model's clock.
	queue, deadlines, err := walkQueue(sq.Val())
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	s.Queue = queue
	for _, o := range queue {
		// a handoff note after the join sequence:
		// "<seq>|<lease>|<slot>|<latch ms>|<latch key>"
		if _, note, ok := strings.Cut(sq.Val()["s:"+o], "|"); ok {
			f := strings.SplitN(note, "|", 4)
			if len(f) != 4 || !strings.HasPrefix(f[3], k.AcquireLatch("")) {
				return nil, fmt.Errorf("handoff note of %s: %q", o, note)
			}
			s.Notes[o] = model.SemNote{Lease: mustInt(f[0]), Slot: mustInt(f[1]), LatchMs: mustInt(f[2]),
				Request: strings.TrimPrefix(f[3], k.AcquireLatch(""))}
		}
	}
	for o, d := range deadlines {
		s.Deadlines[o] = now + d - server
	}
	for _, key := range all.Val() {
		var m map[string]model.SemLatch
		var id string
		switch {
		case key == k.Holders, key == k.Leases, key == k.Permits, key == k.Wants, key == k.Token, key == k.Grace, key == k.Queue:
			continue
		case strings.HasPrefix(key, k.AcquireLatch("")):
			m, id = s.Acquires, strings.TrimPrefix(key, k.AcquireLatch(""))
		case strings.HasPrefix(key, k.ReleaseLatch("")):
			m, id = s.Releases, strings.TrimPrefix(key, k.ReleaseLatch(""))
		default:
			return nil, fmt.Errorf("unexpected key %s", key)
		}
		v, err := rdb.Get(ctx, key).Result()
		if err != nil {
			return nil, err
		}
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil || ttl <= 0 {
			return nil, fmt.Errorf("latch %s: ttl %v, %v", key, ttl, err)
		}
		l := model.SemLatch{ExpiresAt: now + ttl.Milliseconds()}
		switch {
		case m == nil:
		case strings.HasPrefix(key, k.ReleaseLatch("")):
			l.Result = mustInt(v)
		case strings.HasPrefix(v, "held:"):
			l.State, l.Token = "held", mustInt(strings.TrimPrefix(v, "held:"))
		case strings.HasPrefix(v, "granted:"):
			l.State, l.Token = "granted", mustInt(strings.TrimPrefix(v, "granted:"))
		default:
			l.State = v
		}
		m[id] = l
	}
	return s, nil
}

// walkQueue reads queue_scalable.lua's hash: the waiters from the head,
// each one's absolute deadline (the head's plus the deltas up to it). It
// fails on broken links, a wrong tail or stray fields.
func walkQueue(f map[string]string) ([]string, map[string]int64, error) {
	deadlines := map[string]int64{}
	if len(f) == 0 {
		return nil, deadlines, nil
	}
	num := func(field string) (int64, error) {
		v, ok := f[field]
		if !ok {
			return 0, fmt.Errorf("no field %s in %v", field, f)
		}
		return strconv.ParseInt(v, 10, 64)
	}
	d, err := num("hd")
	if err != nil {
		return nil, nil, err
	}
	var queue []string
	prev := ""
	var prevSeq, headSeq int64
	for o := f["h"]; o != ""; o = f["n:"+o] {
		if _, ok := f["n:"+o]; !ok || f["p:"+o] != prev || len(queue) > len(f) {
			return nil, nil, fmt.Errorf("broken links at %s: %v", o, f)
		}
		delta, err := num("d:" + o)
		if err != nil {
			return nil, nil, err
		}
		v, _, _ := strings.Cut(f["s:"+o], "|") // (a handoff note follows)
		seq, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("join sequence of %s: %q", o, f["s:"+o])
		}
		if prev == "" {
			headSeq = seq
		} else if seq <= prevSeq {
			return nil, nil, fmt.Errorf("join sequences do not increase at %s: %v", o, f)
		}
		prevSeq = seq
		d += delta
		queue = append(queue, o)
		deadlines[o] = d
		prev = o
	}
	td, err := num("td")
	if err != nil {
		return nil, nil, err
	}
	hs, err := num("hs")
	if err != nil {
		return nil, nil, err
	}
	ts, err := num("ts")
	if err != nil {
		return nil, nil, err
	}
	if prev == "" || prev != f["t"] || td != d || len(f) != 6+4*len(queue) || hs != headSeq || ts != prevSeq {
		return nil, nil, fmt.Errorf("tail %q (td %d), join sequences or fields wrong: %v", f["t"], td, f)
	}
	return queue, deadlines, nil
}

func mustInt(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -999_999
	}
	return n
}

func TestSemFairMiniredis(t *testing.T) { checkSemFair(t, semMini{}) }

func TestSemFairRedisServer(t *testing.T) { checkSemFair(t, newSemReal(t)) }

func checkSemFair(t *testing.T, b semBackend) {
	var c counts
	rapid.Check(t, semFairMachine(b, wire.SemFairDefault(), &c))
	t.Logf("%v; %d wake-ups carrying their reply, %d direct handoffs", &c, c.sleepNotes, c.grants)
}

func FuzzSemFairMiniredis(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(semFairMachine(semMini{}, wire.SemFairDefault(), new(counts))))
}

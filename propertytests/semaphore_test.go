package propertytests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/model"
)

// The permit-expirable semaphore's machine: random sequences of every
// semaphore script on model.Sem and on a backend, compared step by step
// (replies, the pool, the permits with their scores, the latches, the
// messages on redisson_sc:{name}), with one statement outside the model:
// available + acquired is the total that trySet / set / add made it.
// Every "now" is a client clock (Redisson's contract), so redis-server is
// compared exactly too.

type semRequest struct {
	ids   []string
	latch bool
}

type semHarness struct {
	ctx     context.Context
	scripts *wire.Scripts
	rdb     *redis.Client
	keys    wire.SemKeys
	sub     *subscriber
	m       *model.Sem
	clock   int64            // true client clock
	skew    map[string]int64 // per client
	reqs    []semRequest
	nextID  int
	unlocks int
	total   int64 // available + acquired, by the set / add calls
	hasPool bool
	steps   int
}

const semLatchMs = 1_000_000_000 // never expires within a sequence

func semMachine(b backend, scripts *wire.Scripts, c *counts) func(*rapid.T) {
	return func(t *rapid.T) {
		rdb, name, _ := b.start(t)
		k := wire.SemKeysFor(name)
		h := &semHarness{ctx: context.Background(), scripts: scripts, rdb: rdb, keys: k,
			m: model.NewSem(k.Channel), clock: t0, skew: map[string]int64{}}
		h.sub = subscribe(t, rdb, model.Names{Channel: k.Channel})
		for _, cl := range clients {
			h.skew[cl] = rapid.Int64Range(-5, 5).Draw(t, "skew "+cl)
		}
		c.sequences++
		t.Cleanup(func() { c.steps += h.steps })
		acts := []action{
			{"trySet", 1, h.actTrySet},
			{"acquire", 5, h.actAcquire},
			{"release", 2, h.actRelease},
			{"releaseMany", 2, h.actReleaseMany},
			{"releaseHold", 1, h.actReleaseHold},
			{"advance", 3, h.actAdvance},
			{"replay", 2, h.actReplay},
			{"abandon", 1, h.actAbandon},
			{"set", 1, h.actSet},
			{"add", 1, h.actAdd},
			{"counts", 1, h.actCounts},
			{"updateLease", 1, h.actUpdateLease},
			{"leaseTime", 1, h.actLeaseTime},
		}
		t.Repeat(weighted(func(*rapid.T) {}, acts))
	}
}

func (h *semHarness) now(t *rapid.T) int64 {
	return h.clock + h.skew[rapid.SampledFrom(clients).Draw(t, "client")]
}

func (h *semHarness) lease(t *rapid.T) int64 {
	if rapid.IntRange(0, 3).Draw(t, "no lease") == 0 {
		return model.NoLeaseMs
	}
	return rapid.Int64Range(0, 30).Draw(t, "lease")
}

// id draws a held permit's id most of the time, else any id ever made or
// one never made.
func (h *semHarness) id(t *rapid.T) string {
	held := slices.Sorted(maps.Keys(h.m.Permits))
	if len(held) > 0 && rapid.IntRange(0, 3).Draw(t, "held") > 0 {
		return rapid.SampledFrom(held).Draw(t, "id")
	}
	if h.nextID > 0 && rapid.Bool().Draw(t, "old") {
		return "p" + strconv.Itoa(rapid.IntRange(1, h.nextID).Draw(t, "old id"))
	}
	return "never"
}

func (h *semHarness) noErr(t *rapid.T, what string, err error) {
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (h *semHarness) actTrySet(t *rapid.T) {
	n := rapid.Int64Range(0, 4).Draw(t, "n")
	want := h.m.TrySetPermits(n)
	got, err := h.scripts.SemTrySetPermits(h.ctx, h.rdb, h.keys, n, "")
	h.noErr(t, "trySetPermits", err)
	if want {
		h.total, h.hasPool = n, true
	}
	h.end(t, fmt.Sprintf("trySetPermits(%d)", n), want, got)
}

func (h *semHarness) actSet(t *rapid.T) {
	n := rapid.Int64Range(0, 5).Draw(t, "n")
	h.m.SetPermits(n)
	h.noErr(t, "setPermits", h.scripts.SemSetPermits(h.ctx, h.rdb, h.keys, n, ""))
	h.total, h.hasPool = n, true
	h.end(t, fmt.Sprintf("setPermits(%d)", n), nil, nil)
}

func (h *semHarness) actAdd(t *rapid.T) {
	n := rapid.Int64Range(-3, 4).Draw(t, "n")
	h.m.AddPermits(n)
	h.noErr(t, "addPermits", h.scripts.SemAddPermits(h.ctx, h.rdb, h.keys, n, ""))
	h.total += n
	h.hasPool = true
	h.end(t, fmt.Sprintf("addPermits(%d)", n), nil, nil)
}

type acqReply struct {
	ok   bool
	wait int64
	err  string
}

func semErr(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, wire.ErrAbandoned), errors.Is(err, model.ErrSemAbandoned):
		return "abandoned"
	case errors.Is(err, wire.ErrGrantOver), errors.Is(err, model.ErrSemGrantOver):
		return "grant over"
	}
	return err.Error()
}

func (h *semHarness) send(t *rapid.T, r semRequest, lease, now int64, what string) {
	wok, wwait, werr := h.m.Acquire(r.ids, lease, now, r.latch)
	latch := int64(0)
	if r.latch {
		latch = semLatchMs
	}
	gok, gwait, gerr := h.scripts.SemAcquire(h.ctx, h.rdb, h.keys, wire.SemAcquireArgs{IDs: r.ids, LeaseMs: lease, NowMs: now, LatchMs: latch})
	if gerr != nil && semErr(gerr) == gerr.Error() {
		t.Fatalf("%s: %v", what, gerr)
	}
	h.end(t, what, acqReply{wok, wwait, semErr(werr)}, acqReply{gok, gwait, semErr(gerr)})
}

func (h *semHarness) actAcquire(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "n")
	r := semRequest{latch: rapid.IntRange(0, 3).Draw(t, "latch") > 0}
	for range n {
		h.nextID++
		r.ids = append(r.ids, "p"+strconv.Itoa(h.nextID))
	}
	h.reqs = append(h.reqs, r)
	lease, now := h.lease(t), h.now(t)
	h.send(t, r, lease, now, fmt.Sprintf("acquire(%v, lease %d, now %d, latch %v)", r.ids, lease, now-t0, r.latch))
}

// actReplay sends a copy of an earlier request (a resend, a delayed copy).
func (h *semHarness) actReplay(t *rapid.T) {
	if len(h.reqs) == 0 {
		t.Skip("no request")
	}
	r := rapid.SampledFrom(h.reqs).Draw(t, "request")
	lease, now := h.lease(t), h.now(t)
	h.send(t, r, lease, now, fmt.Sprintf("copy of acquire(%v, lease %d, now %d, latch %v)", r.ids, lease, now-t0, r.latch))
}

func (h *semHarness) actAbandon(t *rapid.T) {
	if len(h.reqs) == 0 {
		t.Skip("no request")
	}
	r := rapid.SampledFrom(h.reqs).Draw(t, "request")
	want := h.m.Abandon(r.ids)
	got, err := h.scripts.SemAbandon(h.ctx, h.rdb, h.keys, wire.SemAcquireArgs{IDs: r.ids, LatchMs: semLatchMs})
	h.noErr(t, "abandon", err)
	h.end(t, fmt.Sprintf("abandon(%v)", r.ids), want, got)
}

// actReleaseHold releases an earlier request's permits as a Permit's
// Release does (each call with a new unlock latch: the latch's replay is
// the wire contract test's).
func (h *semHarness) actReleaseHold(t *rapid.T) {
	if len(h.reqs) == 0 {
		t.Skip("no request")
	}
	r := rapid.SampledFrom(h.reqs).Draw(t, "request")
	now := h.now(t)
	h.unlocks++
	want := h.m.ReleaseHold(r.ids, now)
	got, err := h.scripts.SemReleaseHold(h.ctx, h.rdb, h.keys, r.ids, "u"+strconv.Itoa(h.unlocks), semLatchMs, now, "")
	h.noErr(t, "releaseHold", err)
	h.end(t, fmt.Sprintf("releaseHold(%v, now %d)", r.ids, now-t0), want, got)
}

func (h *semHarness) actRelease(t *rapid.T) {
	id, now := h.id(t), h.now(t)
	want := h.m.Release(id, now)
	got, err := h.scripts.SemRelease(h.ctx, h.rdb, h.keys, id, now, "")
	h.noErr(t, "release", err)
	h.end(t, fmt.Sprintf("release(%s, now %d)", id, now-t0), want, got)
}

func (h *semHarness) actReleaseMany(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "n")
	var ids []string
	for range n {
		ids = append(ids, h.id(t))
	}
	now := h.now(t)
	want := h.m.ReleaseMany(ids, now)
	got, err := h.scripts.SemReleaseMany(h.ctx, h.rdb, h.keys, ids, now, "")
	h.noErr(t, "releaseMany", err)
	h.end(t, fmt.Sprintf("releaseMany(%v, now %d)", ids, now-t0), want, got)
}

func (h *semHarness) actCounts(t *rapid.T) {
	now := h.now(t)
	a, acq, ex := h.m.Counts(now)
	got, err := h.scripts.SemCounts(h.ctx, h.rdb, h.keys, now, "")
	h.noErr(t, "counts", err)
	h.end(t, fmt.Sprintf("counts(now %d)", now-t0), wire.SemCounts{Available: a, Acquired: acq, Exists: ex}, got)
}

func (h *semHarness) actUpdateLease(t *rapid.T) {
	id, lease, now := h.id(t), h.lease(t), h.now(t)
	want := h.m.UpdateLease(id, lease, now)
	got, err := h.scripts.SemUpdateLease(h.ctx, h.rdb, h.keys, id, lease, now, "")
	h.noErr(t, "updateLease", err)
	h.end(t, fmt.Sprintf("updateLease(%s, %d, now %d)", id, lease, now-t0), want, got)
}

func (h *semHarness) actLeaseTime(t *rapid.T) {
	id, now := h.id(t), h.now(t)
	want := h.m.LeaseTime(id, now)
	got, err := h.scripts.SemLeaseTime(h.ctx, h.rdb, h.keys, id, now, "")
	h.noErr(t, "leaseTime", err)
	h.end(t, fmt.Sprintf("leaseTime(%s, now %d)", id, now-t0), want, got)
}

func (h *semHarness) actAdvance(t *rapid.T) {
	h.clock += rapid.Int64Range(1, 20).Draw(t, "advance")
}

// end compares the step's reply, the backend's state and messages with the
// model's, and checks the total.
func (h *semHarness) end(t *rapid.T, what string, want, got any) {
	h.steps++
	if fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("%s: reply %v, model %v", what, got, want)
	}
	pub, err := h.sub.drain(h.ctx)
	h.noErr(t, "drain", err)
	if fmt.Sprint(pub) != fmt.Sprint(h.m.Published) {
		t.Fatalf("%s: published %v, model %v", what, pub, h.m.Published)
	}
	dump, err := semDump(h.ctx, h.rdb, h.keys)
	h.noErr(t, "dump", err)
	if dump.HasPool != h.m.HasPool || dump.Pool != h.m.Pool || !maps.Equal(dump.Permits, h.m.Permits) || !maps.Equal(dump.Latches, h.m.Latches) || dump.Token != h.m.Token {
		t.Fatalf("%s:\nredis pool %v/%d permits %v latches %v token %d\nmodel pool %v/%d permits %v latches %v token %d", what,
			dump.HasPool, dump.Pool, dump.Permits, dump.Latches, dump.Token, h.m.HasPool, h.m.Pool, h.m.Permits, h.m.Latches, h.m.Token)
	}
	if h.hasPool && dump.Pool+int64(len(dump.Permits)) != h.total {
		t.Fatalf("%s: available %d + acquired %d != the %d permits set", what, dump.Pool, len(dump.Permits), h.total)
	}
}

// semDump reads the semaphore's keys; any other key of the run is an error.
func semDump(ctx context.Context, rdb *redis.Client, k wire.SemKeys) (*model.Sem, error) {
	s := model.NewSem(k.Channel)
	v, err := rdb.Get(ctx, k.Pool).Result()
	switch {
	case err == redis.Nil:
	case err != nil:
		return nil, err
	default:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("pool %q", v)
		}
		s.HasPool, s.Pool = true, n
	}
	zs, err := rdb.ZRangeWithScores(ctx, k.Timeouts, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	for _, z := range zs {
		if z.Score != math.Trunc(z.Score) {
			return nil, fmt.Errorf("score of %v is not whole: %v", z.Member, z.Score)
		}
		s.Permits[z.Member.(string)] = int64(z.Score)
	}
	keys, err := rdb.Keys(ctx, "*"+strings.Trim(k.Timeouts, ":timeout")+"*").Result()
	if err != nil {
		return nil, err
	}
	for _, key := range keys {
		switch {
		case key == k.Pool, key == k.Timeouts, strings.HasPrefix(key, k.UnlockLatch("")):
		case key == k.Token:
			if s.Token, err = rdb.Get(ctx, key).Int64(); err != nil {
				return nil, err
			}
		case strings.HasPrefix(key, k.LatchPrefix()):
			st, err := rdb.Get(ctx, key).Result()
			if err != nil {
				return nil, err
			}
			raw, err := hexDecode(strings.TrimPrefix(key, k.LatchPrefix()))
			if err != nil {
				return nil, err
			}
			s.Latches[raw] = st
		default:
			return nil, fmt.Errorf("unexpected key %q", key)
		}
	}
	return s, nil
}

func hexDecode(h string) (string, error) {
	b := make([]byte, len(h)/2)
	for i := range b {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return "", fmt.Errorf("latch id %q: %w", h, err)
		}
		b[i] = byte(v)
	}
	return string(b), nil
}

func TestSemaphoreMiniredis(t *testing.T)   { check(t, semMachine, miniBackend{}) }
func TestSemaphoreRedisServer(t *testing.T) { check(t, semMachine, newRealBackend(t)) }

// Broken variants of the semaphore scripts, each shown caught on both
// backends.
var semBrokenVariants = []brokenVariant{
	{
		name: "a copy of a request takes its permits again (no replay check)", machine: semMachine, file: wire.FileSemAcquire,
		old: "if held == n then\n    local token = redis.call('incr', KEYS[5])\n    sem_follow(KEYS[1], KEYS[5])\n    return {1, token, sem_kept(KEYS[2])}\nend\nif held > 0 then", new: "if false then",
	},
	{
		name: "a reclaim publishes nothing", machine: semMachine, file: wire.FileSemCounts,
		old: "        redis.call(pubcmd, channel, value)\n", new: "",
	},
	{
		name: "a grant without a token", machine: semMachine, file: wire.FileSemAcquire,
		old: "    local token = redis.call('incr', KEYS[5])\n    redis.call('decrby'", new: "    local token = 0\n    redis.call('decrby'",
	},
	{
		name: "releaseHold reports a partly expired hold as held", machine: semMachine, file: wire.FileSemReleaseHold,
		old: "    if e ~= false and tonumber(e) > now then", new: "    if e ~= false then",
	},
	{
		name: "abandon leaves the taken permits held", machine: semMachine, file: wire.FileSemAbandon,
		old: "removed = removed + redis.call('zrem', KEYS[2], ARGV[i])", new: "removed = removed + 0",
	},
	{
		name: "releaseMany gives back permits that expired", machine: semMachine, file: wire.FileSemReleaseMany,
		old: "if expiry == false or tonumber(expiry) <= now then", new: "if expiry == false then",
	},
}

func TestSemaphoreBrokenVariantsFail(t *testing.T) {
	redistest.Long(t)
	setFlag(t, "rapid.checks", "1000")
	for _, v := range semBrokenVariants {
		t.Run(v.name, func(t *testing.T) {
			scripts := v.scripts(t)
			requireCaught(t, v.name, func(b backend, c *counts) func(*rapid.T) { return v.machine(b, scripts, c) })
		})
	}
}

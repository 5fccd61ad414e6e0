package propertytests

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/model"
)

// Clients and their owners. An owner is "<client>:<thread>"; each client
// has its own clock skew and head grace. The third client's id is a
// version-8 UUID, as this library's clients' are (model.TakesNotes): on
// the Redisson engine it is sent notes where the other two, like Java
// clients, get plain wake-ups.
const goClient = "0000000c-0000-8000-8000-00000000000c"

var (
	clients = []string{"cA", "cB", goClient}
	owners  = []string{"cA:1", "cA:2", "cB:1", "cB:2", goClient + ":1", goClient + ":2"}
)

func clientOf(owner string) string { c, _, _ := strings.Cut(owner, ":"); return c }

// t0 is the client clock at the start of every sequence, Unix ms (a
// multiple of every unit).
const t0 int64 = 1_700_000_000_000

// harness runs one sequence: each operation on the model and on the
// backend, then compares replies, keys and messages, and feeds both
// histories.
type harness struct {
	ctx     context.Context
	scripts *wire.Scripts
	rdb     *redis.Client
	keys    wire.Keys
	clock   serverClock
	sub     *subscriber
	u, tol  int64

	m      *model.Lock // the model
	got    *model.Lock // the backend's state after the last step
	mHist  model.History
	gotHis model.History

	server int64            // server clock, ms since the sequence started
	client int64            // the true client clock, Unix ms
	skew   map[string]int64 // per client: its clock is client + skew
	grace  map[string]int64 // per client: its head grace

	lastReq map[string]string // per owner: its last unlock request id
	lastAcq map[string]string // per owner: its last acquisition request id
	nextReq int
	slot    map[string]int64 // per queued owner: the slot it queued with
	steps   int
	counts  *counts
	fair    bool
}

// action is one action of a machine with its weight: how many times more
// often rapid picks it than an action of weight 1.
type action struct {
	name   string
	weight int
	run    func(*rapid.T)
}

// weighted builds t.Repeat's map. Rapid draws the index into the sorted
// keys with a bias towards small indices, so the keys are prefixed with
// letters in the order given ("a.join", "b.headPolls", ...): list the
// actions that build interesting states first. An action of weight n also
// appears n times ("a.join", "a.join#2", ...).
func weighted(check func(*rapid.T), actions []action) map[string]func(*rapid.T) {
	m := map[string]func(*rapid.T){"": check}
	for i, a := range actions {
		name := string(rune('a'+i)) + "." + a.name
		m[name] = a.run
		for j := 2; j <= a.weight; j++ {
			m[name+"#"+strconv.Itoa(j)] = a.run
		}
	}
	return m
}

// counts are the sequences and steps a test ran, for its log.
type counts struct {
	sequences, steps int
	joins            int // a waiter joined the queue
	queueGrants      int // a queued waiter took the lock
	maxQueue         int // longest queue seen
	notified         int // fair-lock waiter notifications
	pruned           int // waiters removed without taking the lock or giving up
	positions        int // queue positions compared (scalable and fair semaphore machines)
	grants           int // direct handoffs
	sleepNotes       int // wake-ups that carried their reply (the scalable machine)
	expired          int // keys that ended by their TTL, every entry past (fair semaphore, seats)
}

func (c *counts) String() string {
	if c.expired > 0 {
		d := *c
		d.expired = 0
		return fmt.Sprintf("%v; %d key expiries", &d, c.expired)
	}
	if c.positions > 0 {
		d := *c
		d.positions = 0
		return fmt.Sprintf("%v, %d queue positions compared", &d, c.positions)
	}
	if c.joins == 0 {
		return fmt.Sprintf("%d sequences, %d steps", c.sequences, c.steps)
	}
	return fmt.Sprintf("%d sequences, %d steps; %d joins, %d grants from the queue (%d of them direct handoffs), %d notifications, %d prunes, longest queue %d",
		c.sequences, c.steps, c.joins, c.queueGrants, c.grants, c.notified, c.pruned, c.maxQueue)
}

func (c *counts) observe(s model.Step) {
	c.maxQueue = max(c.maxQueue, len(s.After.Queue))
	if model.Requeued(s) {
		c.joins++
	}
	grantee := ""
	for _, m := range s.Published {
		switch {
		case strings.HasPrefix(m.Payload, "g:"):
			c.grants++
			grantee = strings.TrimPrefix(m.Channel, s.After.Names().Channel+":")
		case m.Channel != s.After.Names().Channel:
			c.notified++
		}
	}
	for _, w := range s.Before.Queue {
		if slices.Contains(s.After.Queue, w) {
			continue
		}
		switch {
		case w == s.Owner && s.Acquired, w == grantee:
			c.queueGrants++
		case w == s.Owner && s.Op == model.OpFairAcquireFailed:
		default:
			c.pruned++
		}
	}
}

func newHarness(t *rapid.T, b backend, scripts *wire.Scripts, c *counts) *harness {
	rdb, name, clock := b.start(t)
	h := &harness{
		ctx:     context.Background(),
		scripts: scripts,
		rdb:     rdb,
		keys:    wire.KeysFor(name),
		clock:   clock,
		u:       b.unit(),
		tol:     b.tolerance(),
		m:       model.New(name),
		client:  t0,
		skew:    map[string]int64{},
		grace:   map[string]int64{},
		lastReq: map[string]string{},
		lastAcq: map[string]string{},
		slot:    map[string]int64{},
	}
	h.got = model.New(name)
	h.gotHis.Slack = h.tol
	h.counts = c
	c.sequences++
	t.Cleanup(func() { c.steps += h.steps })
	n := h.m.Names()
	if n.Channel != h.keys.Channel || n.Queue != h.keys.Queue || n.Timeouts != h.keys.Timeouts || n.Latch("r") != h.keys.Latch("r") ||
		n.Grace != h.keys.Grace() {
		t.Fatalf("model names %+v differ from lua's %+v", n, h.keys)
	}
	h.sub = subscribe(t, rdb, n)
	for _, c := range clients {
		h.grace[c] = rapid.SampledFrom([]int64{0, 0, 1, 2, 5}).Draw(t, "grace "+c) * h.u
	}
	return h
}

// Draws, in units of the backend.

// drawAcquireID draws the acquisition request id of a tryLockWait: none (no
// latch, as before the handoff), a new one ("acq<n>", n counted in *next),
// or (a retried copy) the owner's last one (last); and its latch lifetime
// (1-40 units of u).
func drawAcquireID(t *rapid.T, owner string, last map[string]string, next *int, u int64) (string, int64) {
	latch := func() int64 { return rapid.Int64Range(1, 40).Draw(t, "acquire latch") * u }
	switch k := rapid.IntRange(0, 5).Draw(t, "acquire id"); {
	case k == 0:
		return "", 0
	case k == 1 && last[owner] != "":
		return last[owner], latch()
	}
	*next++
	id := "acq" + strconv.Itoa(*next)
	last[owner] = id
	return id, latch()
}

func (h *harness) dur(t *rapid.T, label string, lo, hi int64) int64 {
	return rapid.Int64Range(lo, hi).Draw(t, label) * h.u
}
func (h *harness) lease(t *rapid.T) int64 { return h.dur(t, "lease", 1, 30) }
func (h *harness) wait(t *rapid.T) int64  { return h.dur(t, "wait", 1, 40) }

func (h *harness) owner(t *rapid.T) string { return rapid.SampledFrom(owners).Draw(t, "owner") }

// holderOr draws the holder most of the time, else anyone.
func (h *harness) holderOr(t *rapid.T) string {
	if hd := h.m.Holder(); hd != "" && rapid.IntRange(0, 3).Draw(t, "pick") > 0 {
		return hd
	}
	return h.owner(t)
}

func (h *harness) now(owner string) int64 { return h.client + h.skew[clientOf(owner)] }

// request returns an unlock request id: a fresh one, or (a retry) the
// owner's last one.
func (h *harness) request(t *rapid.T, owner string) string {
	if last, ok := h.lastReq[owner]; ok && rapid.IntRange(0, 4).Draw(t, "retry") == 0 {
		return last
	}
	h.nextReq++
	id := "req" + strconv.Itoa(h.nextReq)
	h.lastReq[owner] = id
	return id
}

// begin brings the model to the current server time and snapshots it.
func (h *harness) begin() *model.Lock {
	h.m.Advance(h.server)
	return h.m.Clone()
}

func (h *harness) noErr(t *rapid.T, what string, err error) {
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// within compares a value that may come from the server's clock. The
// special PTTL replies (no key, no expiry) are exact; on the real backend a
// computed value is a multiple of the unit and never equals them.
func (h *harness) within(want, got int64) bool {
	if h.tol == 0 || want == model.NoLock || want == model.NoExpiry {
		return want == got
	}
	return want-h.tol < got && got <= want
}

func (h *harness) checkTTL(t *rapid.T, what string, want, got int64) {
	if !h.within(want, got) {
		t.Fatalf("%s: model replied %d, Redis %d (tolerance %d)", what, want, got, h.tol)
	}
}

// end dumps the backend and compares it with the model, then checks both
// histories with the step.
func (h *harness) end(t *rapid.T, s model.Step, before *model.Lock) {
	h.steps++
	s.Server = h.server
	published, err := h.sub.drain(h.ctx)
	h.noErr(t, "pub/sub", err)
	got, err := dump(h.ctx, h.rdb, h.m.Names(), h.server)
	h.noErr(t, "dump", err)

	h.m.Advance(h.server)
	if err := h.compare(got, published, before); err != nil {
		t.Fatalf("after %s by %s: Redis differs from the model: %v\nmodel: %v\nredis: %v", s.Op, s.Owner, err, h.m, got)
	}

	ms := s
	ms.Before, ms.After, ms.Published = before, h.m.Clone(), h.m.Published[len(before.Published):]
	if err := h.mHist.Observe(ms); err != nil {
		t.Fatalf("model history: %v\nbefore: %v\nafter:  %v", err, ms.Before, ms.After)
	}
	gs := s
	gs.Before, gs.After, gs.Published = h.got, got, published
	if err := h.gotHis.Observe(gs); err != nil {
		t.Fatalf("Redis history: %v\nbefore: %v\nafter:  %v", err, gs.Before, gs.After)
	}
	h.got = got
	h.counts.observe(ms)
}

func (h *harness) compare(got *model.Lock, published []model.Message, before *model.Lock) error {
	want := h.m
	if !maps.Equal(want.Holds, got.Holds) {
		return fmt.Errorf("hash %v, want %v", got.Holds, want.Holds)
	}
	if want.Locked() && (want.LeaseEnd == model.NoExpiry) != (got.LeaseEnd == model.NoExpiry) ||
		want.Locked() && want.LeaseEnd != model.NoExpiry && !h.within(want.LeaseEnd-h.server, got.LeaseEnd-h.server) {
		return fmt.Errorf("lease ends %d, want %d", got.LeaseEnd, want.LeaseEnd)
	}
	if !slices.Equal(want.Queue, got.Queue) {
		return fmt.Errorf("queue %v, want %v", got.Queue, want.Queue)
	}
	if !maps.EqualFunc(want.Deadlines, got.Deadlines, func(w, g int64) bool { return h.within(w, g) }) {
		return fmt.Errorf("deadlines %v, want %v", got.Deadlines, want.Deadlines)
	}
	if want.GraceOwner != got.GraceOwner || want.GraceOwner != "" && (!h.within(want.GraceEnd-h.server, got.GraceEnd-h.server) || want.GraceSecond != got.GraceSecond) {
		return fmt.Errorf("head grace %q until %d (second %v), want %q until %d (second %v)", got.GraceOwner, got.GraceEnd, got.GraceSecond, want.GraceOwner, want.GraceEnd, want.GraceSecond)
	}
	if !maps.EqualFunc(want.Latches, got.Latches, func(w, g model.Latch) bool {
		return w.Result == g.Result && h.within(w.ExpiresAt-h.server, g.ExpiresAt-h.server)
	}) {
		return fmt.Errorf("latches %v, want %v", got.Latches, want.Latches)
	}
	if want.Token != got.Token {
		return fmt.Errorf("token key %d, want %d", got.Token, want.Token)
	}
	if (want.NotesEnd == 0) != (got.NotesEnd == 0) || want.NotesEnd != 0 && !h.within(want.NotesEnd-h.server, got.NotesEnd-h.server) {
		return fmt.Errorf("handoff notes hash expires at %d, want %d (0: none)", got.NotesEnd, want.NotesEnd)
	}
	for _, o := range want.Queue {
		w, wok := want.Notes[o]
		g, gok := got.Notes[o]
		if model.TakesNotes(o) && (wok != gok || w != g) {
			return fmt.Errorf("handoff note of %s %+v (%v), want %+v (%v)", o, g, gok, w, wok)
		}
	}
	if !maps.EqualFunc(want.AcquireLatches, got.AcquireLatches, func(w, g model.AcquireLatch) bool {
		return w.State == g.State && w.Token == g.Token && h.within(w.ExpiresAt-h.server, g.ExpiresAt-h.server)
	}) {
		return fmt.Errorf("acquisition latches %v, want %v", got.AcquireLatches, want.AcquireLatches)
	}
	if wantPub := want.Published[len(before.Published):]; !slices.EqualFunc(wantPub, published, func(w, g model.Message) bool { return sameMessage(h.tol, w, g) }) {
		return fmt.Errorf("published %v, want %v", published, wantPub)
	}
	return nil
}

// check is the "" action: the state invariants, on the model and on what
// Redis holds.
func (h *harness) check(t *rapid.T) {
	if err := h.m.CheckInvariants(); err != nil {
		t.Fatalf("model: %v\n%v", err, h.m)
	}
	if err := h.got.CheckInvariants(); err != nil {
		t.Fatalf("Redis: %v\n%v", err, h.got)
	}
}

// Actions shared by both machines.

func (h *harness) advanceServer(t *rapid.T, d int64) {
	before := h.begin()
	h.server += d
	h.noErr(t, "fast-forward", h.clock(h.ctx, d))
	h.end(t, model.Step{Op: model.OpTime}, before)
}

func (h *harness) actAdvanceServer(t *rapid.T) { h.advanceServer(t, h.dur(t, "d", 0, 10)) }

// actExpireLease moves the server clock exactly to the end of the lease.
func (h *harness) actExpireLease(t *rapid.T) {
	h.m.Advance(h.server)
	if !h.m.Locked() || h.m.LeaseEnd == model.NoExpiry {
		t.Skip("no lease running")
	}
	h.advanceServer(t, h.m.LeaseEnd-h.server)
}

// actPersist removes the lock's lease (PERSIST, Redisson's clearExpire), so
// that the scripts meet a lock without expiry.
func (h *harness) actPersist(t *rapid.T) {
	before := h.begin()
	want := h.m.Persist(h.server)
	got, err := h.rdb.Persist(h.ctx, h.keys.Name).Result()
	h.noErr(t, "persist", err)
	if want != got {
		t.Fatalf("persist: model %v, Redis %v", want, got)
	}
	h.end(t, model.Step{Op: model.OpTime}, before)
}

func (h *harness) actAdvanceClient(t *rapid.T) { h.client += h.dur(t, "d", 0, 10) }

func (h *harness) actSkew(t *rapid.T) {
	c := rapid.SampledFrom(clients).Draw(t, "client")
	h.skew[c] = h.dur(t, "skew", -6, 6)
}

func (h *harness) actRenew(t *rapid.T) {
	n := rapid.IntRange(1, 2).Draw(t, "batch")
	lease := h.lease(t)
	var os []string
	for range n {
		os = append(os, h.holderOr(t))
	}
	before := h.begin()
	var want []bool
	for _, o := range os {
		want = append(want, h.m.Renew(h.server, o, lease))
	}
	names := slices.Repeat([]string{h.keys.Name}, n)
	got, err := h.scripts.Renew(h.ctx, h.rdb, names, os, lease)
	h.noErr(t, "renew", err)
	if !slices.Equal(want, got) {
		t.Fatalf("renew %v: model %v, Redis %v", os, want, got)
	}
	h.end(t, model.Step{Op: model.OpRenew, Owner: os[0]}, before)
}

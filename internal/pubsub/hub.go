// Package pubsub multiplexes every lock waiter of one client over shared
// Redis pub/sub connections: one connection in classic mode, one per
// cluster shard (primary) in sharded mode.
//
// A waiter subscribes to a channel and receives wake-ups on a buffered
// channel of capacity 1, so a message that arrives between a waiter's retry
// and its wait is kept, not lost. Subscriptions are reference-counted per
// channel: the first waiter makes the hub subscribe, the last one to leave
// makes it unsubscribe. There is no goroutine per waiter.
//
// # Connections and the recovery path
//
// Each connection has one manager goroutine, which does all of its network
// writes (SUBSCRIBE, UNSUBSCRIBE, PING, and the dial they may cause), and
// one reader goroutine per generation. A generation is one *redis.PubSub:
// when anything goes wrong with it the manager throws it away and starts
// the next generation on a fresh PubSub, so there is one recovery path for
// every fault:
//
//   - a failed write (SUBSCRIBE, UNSUBSCRIBE or PING, including a dial that
//     fails or times out),
//   - a read error (the connection dropped, CLIENT KILL, an error reply),
//   - a PING not answered within replyTimeout (a stalled or black-holed
//     connection), or answers that skip one (bytes were lost).
//
// The new generation subscribes again every channel the hub holds on that
// connection, and when a channel's subscription is confirmed on the new
// connection every waiter on it is woken to re-check (a message may have
// been lost while it was down). Failures in a row are retried with a
// backoff from 50 ms to 1 s; in a cluster each retry first asks go-redis to
// reload its slot map, so that the next connection goes to the node that
// serves the slots now.
// go-redis's own reconnect inside a PubSub is not relied on: it
// re-subscribes only the channels that PubSub knew before the failing call,
// and it cannot tell the hub when it happened.
//
// Confirmation: after each round of writes the manager sends a PING whose
// payload is a sequence number. Redis answers in order, so its PONG proves
// that every subscription written before it is in effect; a subscription is
// confirmed by the first PONG that follows it. (Counting SUBSCRIBE replies
// per channel cannot tell the reply to an earlier SUBSCRIBE of the same
// channel from the latest one's, and one lost reply leaves a count wrong
// for good.)
//
// # Bounds
//
//   - Subscribe returns once the subscription is confirmed, or after
//     confirmTimeout (3 s) with the waiter registered and a wake-up pending
//     in its C(), so that its owner re-checks its lock at once; the waiter
//     is woken again when the subscription is confirmed later. It fails
//     only when its ctx ends (nothing is left behind) or the hub is closed
//     (ErrClosed).
//   - One round of writes, dial included, is bounded by writeTimeout (5 s),
//     and its PING must be answered within replyTimeout (5 s). A broken
//     connection is noticed at once when the socket reports it, else within
//     replyTimeout of the next write; an idle one is checked with a PING
//     after pingEvery of silence, so a dead idle connection is noticed
//     within pingEvery + replyTimeout.
//   - Close makes every pending Subscribe return ErrClosed, wakes every live
//     waiter, closes the connections (which unblocks their readers) and
//     waits at most closeWait (5 s) for the hub's goroutines.
//   - The hub's mutex is never held across network I/O or a sleep: a slow
//     write on one connection delays nothing on another, and wake-ups are
//     handed out while a write is in progress.
//
// # Sharded mode
//
// Sharded mode (SSUBSCRIBE, Redis 7+): a shard channel can only be
// subscribed on the primary that serves its hash slot, and one go-redis
// PubSub talks to one node, so the hub keeps one connection per primary and
// puts each channel on the connection of the primary that serves it
// (SSUBSCRIBEs are grouped by slot). When the server refuses a subscription
// with MOVED (the slot moved, or our view of the cluster was stale), or
// drops it with an unrequested SUNSUBSCRIBE (Redis does this when a slot
// leaves the node), the manager asks go-redis for a new slot map and moves
// the channel to the connection of its new primary, waking its waiters so
// they re-check; a connection that was opened to the wrong node is rebuilt.
// When a primary fails, its connection fails, and the next generation is
// opened (after a slot map reload) to whichever node then serves the slots.
package pubsub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("pubsub: hub closed")

const (
	// confirmTimeout bounds Subscribe's wait for the confirmation.
	confirmTimeout = 3 * time.Second
	// replyTimeout is how long a PING may stay unanswered before its
	// connection is rebuilt.
	replyTimeout = 5 * time.Second
	// writeTimeout bounds one round of writes on a connection, including
	// the dial it may need.
	writeTimeout = 5 * time.Second
	// closeWait bounds Close's wait for the hub's goroutines.
	closeWait = 5 * time.Second
	// minBackoff and maxBackoff bound the pause before rebuilding a
	// connection that failed again without ever answering.
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
	// batchMax is the most channels sent in one (S)SUBSCRIBE.
	batchMax = 256
)

// Hub is one client's shared subscription.
type Hub struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // rdb, when it is one
	slotFn  func(string) int
	mode    atomic.Int32 // modeClassic, modeSharded, or modeAuto while undecided
	probeMu sync.Mutex
	probeAt time.Time // last failed probe
	ping    time.Duration
	// onRecover runs when a failed connection works again (OnRecover).
	onRecover func()

	stop    context.Context // ends at Close: aborts writes, dials and backoffs
	halt    context.CancelFunc
	closing chan struct{} // closed at Close
	wg      sync.WaitGroup

	mu     sync.Mutex
	conns  map[string]*conn // by primary address ("" outside a sharded cluster)
	chans  map[string]*entry
	closed bool
}

// conn is one pub/sub connection: a manager goroutine that writes and
// rebuilds, and the PubSub of the current generation with its reader.
// Every field but kick and lastReload is guarded by h.mu.
type conn struct {
	key  string
	kick chan struct{} // capacity 1: there is work for the manager

	ps        *redis.PubSub // nil between generations
	gen       uint64
	genCtx    context.Context // ends when the generation ends
	genCancel context.CancelFunc
	reading   bool // this generation's reader runs
	broken    bool // this generation failed: rebuild
	healthy   bool // a PONG was read in this generation
	fails     int  // rebuilds since the last healthy generation
	failed    bool // a generation failed and none has been healthy since

	subs   map[string]*entry   // every channel the hub keeps on this connection
	todo   map[string]struct{} // channels to subscribe in this generation
	unconf map[string]*entry   // subscribed in this generation, not yet confirmed
	drop   map[string]struct{} // subscribed in this generation, no longer wanted
	moving map[string]bool     // to re-home: refused with MOVED (true), dropped by the server (false)
	unsent map[string]unsub    // our own SUNSUBSCRIBEs whose reply is not read yet

	seq       uint64    // last PING sequence number given out
	written   uint64    // last PING written
	acked     uint64    // last PING answered
	waitSince time.Time // an answer has been owed since (zero: none)
	lastRead  time.Time

	lastReload time.Time // manager only
}

type unsub struct {
	n   int
	seq uint64 // the PING written after the last one
}

type entry struct {
	channel   string
	c         *conn  // the connection the channel is kept on
	gen       uint64 // c's generation its subscription was written in (0: not yet)
	seq       uint64 // the PING that follows that write
	confirmed bool
	ready     chan struct{} // closed when confirmed
	waiters   []*Waiter     // in arrival order
}

// Waiter is one subscriber's view of a channel.
type Waiter struct {
	hub         *Hub
	channel     string
	c           chan struct{}
	closed      bool
	subscribing bool // its Subscribe is still waiting for the confirmation
}

// Option configures a Hub.
type Option func(*Hub)

// Sharded makes the hub use SSUBSCRIBE (the scripts must then publish with
// SPUBLISH). slot maps a channel to its cluster hash slot.
func Sharded(on bool, slot func(string) int) Option {
	return func(h *Hub) {
		h.slotFn = slot
		if on {
			h.mode.Store(modeSharded)
		} else {
			h.mode.Store(modeClassic)
		}
	}
}

// AutoSharded makes the hub decide at first use, as Redisson's
// shardedSubscriptionMode AUTO does: sharded when the client is a
// *redis.ClusterClient and the server knows PUBSUB SHARDNUMSUB (Redis 7+),
// classic otherwise.
func AutoSharded(slot func(string) int) Option {
	return func(h *Hub) {
		h.slotFn = slot
		h.mode.Store(modeAuto)
	}
}

// OnRecover sets f to run (on a goroutine of its own) when a connection
// that failed is working again: its next generation had a PING answered.
// After a restart or a failover that is the first sign that Redis is back,
// and what it kept may be gone (the session re-checks its holds).
func OnRecover(f func()) Option { return func(h *Hub) { h.onRecover = f } }

const (
	modeClassic int32 = iota
	modeSharded
	modeAuto
)

// probeRetry is how long after a failed probe (Redis unreachable) the next
// one may be sent; until then the hub reports classic pub/sub.
const probeRetry = time.Second

// New makes a hub over rdb. Nothing is sent to Redis until the first
// Subscribe. pingEvery is how long a connection may be silent before it is
// checked with a PING (0: never).
func New(rdb redis.UniversalClient, pingEvery time.Duration, opts ...Option) *Hub {
	h := &Hub{rdb: rdb, ping: pingEvery, conns: map[string]*conn{}, chans: map[string]*entry{},
		closing: make(chan struct{})}
	h.stop, h.halt = context.WithCancel(context.Background())
	h.cluster, _ = rdb.(*redis.ClusterClient)
	for _, o := range opts {
		o(h)
	}
	return h
}

// Sharded reports whether the hub uses sharded pub/sub, so the scripts
// publish to match (SPUBLISH). In auto mode the first call decides, with a
// probe of at most 2 s; while Redis cannot be reached it reports false and
// probes again at most once a second.
func (h *Hub) Sharded() bool {
	on, _ := h.decide(context.Background())
	return on
}

// decide returns the mode, probing in auto mode; err is the probe's error
// while undecided.
func (h *Hub) decide(ctx context.Context) (bool, error) {
	switch h.mode.Load() {
	case modeSharded:
		return true, nil
	case modeClassic:
		return false, nil
	}
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	if m := h.mode.Load(); m != modeAuto {
		return m == modeSharded, nil
	}
	if h.cluster == nil {
		h.mode.Store(modeClassic)
		return false, nil
	}
	if !h.probeAt.IsZero() && time.Since(h.probeAt) < probeRetry {
		return false, errors.New("pubsub: cannot tell whether the cluster has sharded pub/sub (Redis unreachable)")
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := h.cluster.Do(pctx, "pubsub", "shardnumsub").Err()
	var re redis.Error
	switch {
	case err == nil:
		h.mode.Store(modeSharded)
		return true, nil
	case errors.As(err, &re): // an unknown subcommand: before Redis 7
		h.mode.Store(modeClassic)
		return false, nil
	}
	h.probeAt = time.Now()
	return false, fmt.Errorf("pubsub: probing for sharded pub/sub: %w", err)
}

func (h *Hub) isSharded() bool { return h.mode.Load() == modeSharded }

// C is where wake-ups arrive. It has room for one: wake-ups coalesce.
func (w *Waiter) C() <-chan struct{} { return w.c }

// shardKey is the connection a channel belongs on: its primary's address
// in a sharded cluster, else "".
func (h *Hub) shardKey(ctx context.Context, channel string) (string, error) {
	if !h.isSharded() || h.cluster == nil {
		return "", nil
	}
	node, err := h.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return "", err
	}
	return node.Options().Addr, nil
}

// connLocked returns the connection for key, starting its manager if
// needed. h.mu is held and the hub is open.
func (h *Hub) connLocked(key string) *conn {
	if c := h.conns[key]; c != nil {
		return c
	}
	c := &conn{
		key:    key,
		kick:   make(chan struct{}, 1),
		subs:   map[string]*entry{},
		todo:   map[string]struct{}{},
		unconf: map[string]*entry{},
		drop:   map[string]struct{}{},
		moving: map[string]bool{},
		unsent: map[string]unsub{},
	}
	h.conns[key] = c
	h.wg.Add(1)
	go h.manage(c)
	return c
}

// wake tells the manager there is work.
func (c *conn) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Subscribe subscribes to channel and returns once the server has confirmed
// the subscription, so that every message published afterwards is seen; or,
// when no confirmation came within confirmTimeout (the connection is being
// rebuilt), with the waiter registered and a wake-up already pending, so
// that the caller re-checks at once; the waiter is woken again when the
// subscription is confirmed. It fails only when ctx ends (ctx's error,
// nothing left behind) or the hub is closed (ErrClosed), or when the mode
// or a channel's primary cannot be determined (Redis unreachable).
func (h *Hub) Subscribe(ctx context.Context, channel string) (*Waiter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := h.decide(ctx); err != nil {
		return nil, err
	}
	key, err := h.shardKey(ctx, channel)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	w := &Waiter{hub: h, channel: channel, c: make(chan struct{}, 1), subscribing: true}
	e := h.chans[channel]
	if e == nil {
		c := h.connLocked(key)
		e = &entry{channel: channel, c: c, ready: make(chan struct{})}
		h.chans[channel] = e
		c.subs[channel] = e
		c.todo[channel] = struct{}{}
		c.wake()
	}
	e.waiters = append(e.waiters, w)
	ready := e.ready
	h.mu.Unlock()

	timer := time.NewTimer(confirmTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		h.mu.Lock()
		w.subscribing = false
		h.mu.Unlock()
		return w, nil
	case <-timer.C:
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			w.Close()
			return nil, ErrClosed
		}
		w.subscribing = false
		if !e.confirmed {
			notify(w)
		}
		h.mu.Unlock()
		return w, nil
	case <-h.closing:
		w.Close()
		return nil, ErrClosed
	case <-ctx.Done():
		w.Close()
		return nil, ctx.Err()
	}
}

// Close removes the waiter. A wake-up it received but did not consume passes
// to the next waiter on the channel, so that it is not lost. The last waiter
// to leave unsubscribes.
func (w *Waiter) Close() {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	e := h.chans[w.channel]
	if e == nil {
		return
	}
	for i, x := range e.waiters {
		if x == w {
			e.waiters = append(e.waiters[:i], e.waiters[i+1:]...)
			break
		}
	}
	select {
	case <-w.c:
		wakeOne(e)
	default:
	}
	if len(e.waiters) > 0 {
		return
	}
	delete(h.chans, w.channel)
	c := e.c
	_, moving := c.moving[w.channel]
	delete(c.subs, w.channel)
	delete(c.todo, w.channel)
	delete(c.unconf, w.channel)
	delete(c.moving, w.channel)
	if !h.closed && !moving && e.gen != 0 && e.gen == c.gen {
		// Subscribed (or being subscribed) on this generation's
		// connection: the manager unsubscribes after it.
		c.drop[w.channel] = struct{}{}
		c.wake()
	}
}

func notify(w *Waiter) {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func wakeOne(e *entry) {
	for _, w := range e.waiters {
		select {
		case w.c <- struct{}{}:
			return
		default: // already has a wake-up pending: try the next one
		}
	}
}

func wakeAll(e *entry) {
	for _, w := range e.waiters {
		notify(w)
	}
}

// wakeSettled wakes the waiters whose Subscribe has returned: a re-check
// the hub asks for (a connection failed, a subscription was confirmed
// late). A waiter still in Subscribe re-checks when it returns anyway.
func wakeSettled(e *entry) {
	for _, w := range e.waiters {
		if !w.subscribing {
			notify(w)
		}
	}
}

// unconfirmLocked makes e wait for a new confirmation.
func unconfirmLocked(e *entry) {
	if e.confirmed {
		e.confirmed = false
		e.ready = make(chan struct{})
	}
}

func confirmLocked(e *entry) {
	if e.confirmed {
		return
	}
	e.confirmed = true
	close(e.ready)
	wakeSettled(e)
}

// Channels reports how many channels are subscribed (for tests).
func (h *Hub) Channels() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.chans)
}

// Has reports whether channel is subscribed (for tests).
func (h *Hub) Has(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.chans[channel] != nil
}

// Conns reports how many pub/sub connections the hub holds (for tests).
func (h *Hub) Conns() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// Close ends the subscriptions and their goroutines. Every Subscribe still
// waiting returns ErrClosed, and every waiter still subscribed gets one
// last wake-up (so that its owner notices the close); no more follow. Close
// waits at most closeWait for the goroutines, and reports when some still
// run.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.closing)
	for _, e := range h.chans {
		wakeAll(e)
	}
	var open []*redis.PubSub
	for _, c := range h.conns {
		if c.ps != nil {
			open = append(open, c.ps)
		}
	}
	h.mu.Unlock()
	h.halt() // ends every generation's context, write, dial and backoff
	for _, ps := range open {
		h.closePubSub(ps) // unblocks its reader
	}
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(closeWait):
		return fmt.Errorf("pubsub: close: connections still closing after %v", closeWait)
	}
}

// closePubSub closes ps in the background: Close waits for a write or a
// dial in progress on it.
func (h *Hub) closePubSub(ps *redis.PubSub) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		_ = ps.Close()
	}()
}

// sleep pauses for d, or until the hub closes.
func (h *Hub) sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-h.stop.Done():
	}
}

// manage runs one connection: it starts generations, writes what the hub
// wants subscribed and unsubscribed, checks that the connection answers,
// and moves channels whose slot moved. It never holds h.mu across I/O.
func (h *Hub) manage(c *conn) {
	defer h.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return
		}
		if c.ps == nil || c.broken {
			h.rebuild(c)
			continue
		}
		if len(c.moving) > 0 {
			h.relocate(c)
			continue
		}
		wait := time.Hour
		ping := false
		now := time.Now()
		if !c.waitSince.IsZero() {
			wait = c.waitSince.Add(replyTimeout).Sub(now)
			if wait <= 0 { // a PING went unanswered
				c.broken = true
				h.mu.Unlock()
				continue
			}
		} else if c.reading && h.ping > 0 {
			wait = c.lastRead.Add(h.ping).Sub(now)
			ping = wait <= 0 // silent for pingEvery
		}
		if b := h.collectLocked(c, ping); b != nil {
			h.mu.Unlock()
			h.write(c, b)
			continue
		}
		h.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-c.kick:
		case <-timer.C:
		case <-h.stop.Done():
		}
	}
}

// rebuild ends c's generation and starts the next one on a fresh PubSub,
// on which every channel of c is subscribed again. h.mu is held; rebuild
// releases it.
func (h *Hub) rebuild(c *conn) {
	old, oldCancel := c.ps, c.genCancel
	var delay time.Duration
	if c.gen > 0 {
		if c.healthy {
			c.fails = 0
		}
		c.fails++
		c.failed = true
		delay = min(minBackoff<<min(c.fails-1, 8), maxBackoff)
	}
	c.gen++
	gen := c.gen
	c.ps, c.genCtx, c.genCancel = nil, nil, nil
	c.reading, c.broken, c.healthy = false, false, false
	clear(c.todo)
	clear(c.unconf)
	clear(c.drop)
	clear(c.moving)
	clear(c.unsent)
	c.written, c.acked, c.waitSince = c.seq, c.seq, time.Time{}
	for ch, e := range c.subs {
		// Its waiters are woken when the new subscription is
		// confirmed, not now: a re-check while the connection is down
		// would meet the same outage (a failed primary not yet
		// replaced), and an error there ends the waiter's Lock.
		e.gen = 0
		unconfirmLocked(e)
		c.todo[ch] = struct{}{}
	}
	h.mu.Unlock()

	if oldCancel != nil {
		oldCancel()
	}
	if old != nil {
		h.closePubSub(old)
	}
	if delay > 0 {
		if h.cluster != nil {
			// The node may be gone: let go-redis learn who serves its
			// slots now, so that the next generation goes there.
			h.cluster.ReloadState(h.stop)
		}
		h.sleep(delay)
	}
	var ps *redis.PubSub
	if h.isSharded() {
		ps = h.rdb.SSubscribe(h.stop) // no channel: no I/O yet
	} else {
		ps = h.rdb.Subscribe(h.stop)
	}
	ctx, cancel := context.WithCancel(h.stop)
	h.mu.Lock()
	if h.closed || c.gen != gen {
		h.mu.Unlock()
		cancel()
		_ = ps.Close()
		return
	}
	c.ps, c.genCtx, c.genCancel = ps, ctx, cancel
	h.mu.Unlock()
}

// batch is one round of writes.
type batch struct {
	ps     *redis.PubSub
	ctx    context.Context
	gen    uint64
	seq    uint64 // the PING that ends the round
	subs   []string
	unsubs []string
}

// collectLocked takes what c owes the server: unsubscriptions, then
// subscriptions, then a PING that confirms them. ping asks for a PING
// alone. nil: nothing to write. h.mu is held.
func (h *Hub) collectLocked(c *conn, ping bool) *batch {
	if len(c.drop) == 0 && len(c.todo) == 0 && !ping {
		return nil
	}
	c.seq++
	b := &batch{ps: c.ps, ctx: c.genCtx, gen: c.gen, seq: c.seq}
	for ch := range c.drop {
		b.unsubs = append(b.unsubs, ch)
		if h.isSharded() {
			u := c.unsent[ch]
			c.unsent[ch] = unsub{n: u.n + 1, seq: b.seq}
		}
	}
	clear(c.drop)
	for ch := range c.todo {
		e := c.subs[ch]
		if e == nil {
			continue
		}
		e.gen, e.seq = c.gen, b.seq
		c.unconf[ch] = e
		b.subs = append(b.subs, ch)
	}
	clear(c.todo)
	return b
}

// write sends b outside h.mu; a failure ends the generation.
func (h *Hub) write(c *conn, b *batch) {
	ctx, cancel := context.WithTimeout(b.ctx, writeTimeout)
	err := h.send(ctx, b)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || c.gen != b.gen {
		return
	}
	if err != nil {
		c.broken = true
		return
	}
	c.written = b.seq
	if c.acked < b.seq && c.waitSince.IsZero() {
		c.waitSince = time.Now()
	}
	if !c.reading {
		// Started only after the first subscription was written, so
		// that go-redis opens the connection to the node serving that
		// channel (with no channel it picks a random node).
		c.reading = true
		c.lastRead = time.Now()
		h.wg.Add(1)
		go h.read(c, b.ps, b.gen, b.ctx)
	}
}

func (h *Hub) send(ctx context.Context, b *batch) error {
	sharded := h.isSharded()
	for _, g := range h.groups(b.unsubs, sharded) {
		var err error
		if sharded {
			err = b.ps.SUnsubscribe(ctx, g...)
		} else {
			err = b.ps.Unsubscribe(ctx, g...)
		}
		if err != nil {
			return err
		}
	}
	for _, g := range h.groups(b.subs, sharded) {
		var err error
		if sharded {
			err = b.ps.SSubscribe(ctx, g...)
		} else {
			err = b.ps.Subscribe(ctx, g...)
		}
		if err != nil {
			return err
		}
	}
	return b.ps.Ping(ctx, strconv.FormatUint(b.seq, 10))
}

// groups splits channels into commands: at most batchMax each, and in
// sharded mode one slot each (a command across slots is refused).
func (h *Hub) groups(chs []string, sharded bool) [][]string {
	var out [][]string
	add := func(g []string) {
		for len(g) > batchMax {
			out = append(out, g[:batchMax])
			g = g[batchMax:]
		}
		if len(g) > 0 {
			out = append(out, g)
		}
	}
	switch {
	case len(chs) == 0:
	case !sharded:
		add(chs)
	case h.slotFn == nil:
		for _, ch := range chs {
			out = append(out, []string{ch})
		}
	default:
		bySlot := map[int][]string{}
		var order []int
		for _, ch := range chs {
			s := h.slotFn(ch)
			if _, ok := bySlot[s]; !ok {
				order = append(order, s)
			}
			bySlot[s] = append(bySlot[s], ch)
		}
		for _, s := range order {
			add(bySlot[s])
		}
	}
	return out
}

// read reads one generation's PubSub until it fails or the generation
// ends (its PubSub is closed then, which unblocks the read).
func (h *Hub) read(c *conn, ps *redis.PubSub, gen uint64, ctx context.Context) {
	defer h.wg.Done()
	for {
		msg, err := ps.ReceiveTimeout(ctx, 0)
		h.mu.Lock()
		if h.closed || c.gen != gen {
			h.mu.Unlock()
			return
		}
		if err != nil {
			if slot, _, ok := movedSlot(err); ok && h.slotFn != nil {
				// A subscription was refused: its slot is served
				// elsewhere. Not a connection failure.
				c.lastRead = time.Now()
				h.refusedLocked(c, slot)
				h.mu.Unlock()
				continue
			}
			c.broken = true
			c.wake()
			h.mu.Unlock()
			return
		}
		c.lastRead = time.Now()
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "sunsubscribe" {
				h.droppedLocked(c, m.Channel)
			}
		case *redis.Message:
			h.deliverLocked(m.Channel, m.Payload)
		case *redis.Pong:
			h.ackLocked(c, m.Payload)
		}
		h.mu.Unlock()
	}
}

// ackLocked handles the answer to PING seq: every subscription written
// before it is in effect. Answers come in order, one per PING; a skipped
// one means the connection lost bytes, and it is rebuilt.
func (h *Hub) ackLocked(c *conn, payload string) {
	seq, err := strconv.ParseUint(payload, 10, 64)
	if err != nil || seq <= c.acked {
		return
	}
	if seq != c.acked+1 {
		c.broken = true
		c.wake()
		return
	}
	c.acked = seq
	c.healthy = true
	if c.failed {
		c.failed = false
		if h.onRecover != nil {
			go h.onRecover()
		}
	}
	if c.acked >= c.written {
		c.waitSince = time.Time{}
	} else {
		c.waitSince = time.Now()
	}
	for ch, e := range c.unconf {
		if e.seq <= seq {
			delete(c.unconf, ch)
			confirmLocked(e)
		}
	}
	for ch, u := range c.unsent {
		if u.seq <= seq { // its reply, if any, was read before
			delete(c.unsent, ch)
		}
	}
}

// movedSlot parses a "MOVED <slot> <addr>" error reply.
func movedSlot(err error) (int, string, bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return 0, "", false
	}
	f := strings.Fields(re.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return 0, "", false
	}
	slot, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, "", false
	}
	return slot, f[2], true
}

// refusedLocked marks the subscriptions of c in slot that are still
// unconfirmed as refused: the manager moves them.
func (h *Hub) refusedLocked(c *conn, slot int) {
	for ch, e := range c.unconf {
		if h.slotFn(ch) == slot {
			delete(c.unconf, ch)
			if e.gen == c.gen {
				c.moving[ch] = true
			}
		}
	}
	c.wake()
}

// droppedLocked handles an SUNSUBSCRIBE reply: ours, or the server's
// notice that the channel's slot left the node.
func (h *Hub) droppedLocked(c *conn, channel string) {
	if u, ok := c.unsent[channel]; ok {
		if u.n <= 1 {
			delete(c.unsent, channel)
		} else {
			u.n--
			c.unsent[channel] = u
		}
		return
	}
	e := c.subs[channel]
	if e == nil || e.gen != c.gen {
		return
	}
	if _, ok := c.moving[channel]; !ok {
		c.moving[channel] = false
	}
	delete(c.unconf, channel)
	c.wake()
}

// relocate moves the channels in c.moving to the connection of the primary
// that serves them now, and wakes their waiters: a message published while
// the slot moved went to the other node. A channel refused with MOVED whose
// primary, in our view, is still c's means c was opened to the wrong node
// (with a stale view): c is rebuilt. h.mu is held; relocate releases it.
func (h *Hub) relocate(c *conn) {
	moves := maps.Clone(c.moving)
	clear(c.moving)
	refused := false
	for _, r := range moves {
		refused = refused || r
	}
	h.mu.Unlock()

	// Reload the slot map and give the reload a moment; this also keeps a
	// refusal loop (our view still stale) from spinning. A slot that moves
	// drops its channels one SUNSUBSCRIBE at a time: one reload serves the
	// whole burst, and refusals always wait.
	if refused || time.Since(c.lastReload) > 200*time.Millisecond {
		if h.cluster != nil {
			h.cluster.ReloadState(h.stop)
		}
		h.sleep(50 * time.Millisecond)
		c.lastReload = time.Now()
	}
	keys := make(map[string]string, len(moves))
	for ch := range moves {
		ctx, cancel := context.WithTimeout(h.stop, 2*time.Second)
		if key, err := h.shardKey(ctx, ch); err == nil {
			keys[ch] = key
		}
		cancel()
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	for ch, ref := range moves {
		e := c.subs[ch]
		if e == nil {
			continue // gone, or moved already
		}
		key, ok := keys[ch]
		if !ok {
			key = c.key
		}
		switch {
		case key != c.key:
			h.rehomeLocked(e, h.connLocked(key))
		case ref:
			c.broken = true
		default:
			h.rehomeLocked(e, c) // dropped here, still served here: again
		}
	}
}

// rehomeLocked subscribes e on nc (perhaps its own connection again) and
// wakes its waiters to re-check. The server no longer holds e's
// subscription on its old connection. h.mu is held.
func (h *Hub) rehomeLocked(e *entry, nc *conn) {
	old := e.c
	delete(old.subs, e.channel)
	delete(old.todo, e.channel)
	delete(old.unconf, e.channel)
	delete(old.moving, e.channel)
	e.c, e.gen = nc, 0
	nc.subs[e.channel] = e
	nc.todo[e.channel] = struct{}{}
	unconfirmLocked(e)
	wakeSettled(e)
	nc.wake()
}

func (h *Hub) deliverLocked(channel, payload string) {
	e := h.chans[channel]
	if e == nil {
		return
	}
	if payload == "0" { // UNLOCK_MESSAGE: one waiter may take the lock
		wakeOne(e)
		return
	}
	wakeAll(e)
}

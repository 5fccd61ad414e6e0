package pubsub

import (
	"context"
	"errors"
	"fmt"
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
	// closeWait bounds Close's wait for the hub's goroutines.
	closeWait = 5 * time.Second
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
	// linger is how long a channel stays subscribed after its last waiter
	// left (Linger; 0: it is unsubscribed at once).
	linger time.Duration

	stop    context.Context // ends at Close: aborts writes, dials and backoffs
	halt    context.CancelFunc
	closing chan struct{} // closed at Close
	wg      sync.WaitGroup

	mu     sync.Mutex
	conns  map[string]*conn // by primary address ("" outside a sharded cluster)
	chans  map[string]*entry
	closed bool
}

type entry struct {
	channel   string
	c         *conn  // the connection the channel is kept on
	gen       uint64 // c's generation its subscription was written in (0: not yet)
	seq       uint64 // the PING that follows that write
	confirmed bool
	ready     chan struct{} // closed when confirmed
	waiters   []*Waiter     // in arrival order
	// idle counts the times the entry was left without waiters: a
	// lingering entry (Linger) is dropped only by the expiry of its
	// latest idle spell.
	idle uint64
}

// Waiter is one subscriber's view of a channel.
type Waiter struct {
	hub     *Hub
	channel string
	c       chan struct{}
	grant   string // the last grant message not yet taken (Grant); "": none
	// note is the last sleep message ("s:...", Note) when the pending
	// wake-up on c came from sleep messages only; any other wake-up clears
	// it, so that it is never taken for one that asks for an attempt.
	note string
	// fence: the PING (conn.seq) whose answer the waiter's notes wait for
	// (Attach); 0: none. A note read before that answer may have been
	// published before the waiter attached, for its owner's previous wait.
	fence       uint64
	closed      bool
	subscribing bool // its Subscribe is still waiting for the confirmation
}

// Option configures a Hub.
type Option func(*Hub)

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

// Linger keeps a channel subscribed for d after its last waiter left, so
// that the next wait of the same owner (or of any waiter of the channel)
// finds its subscription live: no SUBSCRIBE and confirming PING, and no
// UNSUBSCRIBE, per wait. Only a confirmed subscription lingers; messages
// that arrive while no waiter is registered are dropped, as they are on an
// unsubscribed channel. d <= 0 (the default): unsubscribe at once.
func Linger(d time.Duration) Option { return func(h *Hub) { h.linger = max(d, 0) } }

// C is where wake-ups arrive. It has room for one: wake-ups coalesce.
func (w *Waiter) C() <-chan struct{} { return w.c }

// Grant returns and forgets the last grant message (a payload starting
// with "g:", the scalable fair lock's direct handoff) delivered to the
// waiter and not yet taken, or ok false. A grant also wakes the waiter (C):
// call Grant after each wake-up. Grants do not coalesce with each other:
// a later one replaces an earlier one not taken (each names its request).
func (w *Waiter) Grant() (payload string, ok bool) { return w.take(&w.grant) }

// Note returns and forgets the sleep message (a payload starting with
// "s:", the scalable fair lock's wake-up that carries the reply an attempt
// would get) behind the waiter's last wake-up, or ok false when that
// wake-up (also) came from anything else: a plain wake-up, a grant, the
// hub's own re-checks. Call it after each wake-up (after Grant): ok true
// means nothing but sleep messages woke the waiter since the last call,
// so it may re-arm its timer instead of running an attempt.
func (w *Waiter) Note() (payload string, ok bool) { return w.take(&w.note) }

// take returns and clears one of the waiter's kept payloads, under h.mu.
func (w *Waiter) take(p *string) (payload string, ok bool) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	payload, *p = *p, ""
	return payload, payload != ""
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
	if len(e.waiters) == 0 {
		e.idle++ // a lingering entry in use again: its expiry is void
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

// Attach registers a waiter on channel without waiting, when the channel's
// subscription is already confirmed (another waiter holds it, or it
// lingers: Linger): every message published after Attach returns reaches
// the waiter, and should the connection fail, the waiter is woken once the
// subscription is confirmed again, as Subscribe's are. Otherwise (no
// subscription, or one not confirmed) it returns nil and changes nothing:
// use Subscribe. A caller that attaches before it checks its lock need not
// check again before it waits. notes: the channel carries notes ("s:",
// Note; a fair lock's waiter channel): the waiter takes them only once a
// PING written after Attach is answered, so never one published before.
func (h *Hub) Attach(channel string, notes bool) *Waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.chans[channel]
	if h.closed || e == nil || !e.confirmed {
		return nil
	}
	if _, moving := e.c.moving[channel]; moving {
		return nil
	}
	if len(e.waiters) == 0 {
		e.idle++
	}
	w := &Waiter{hub: h, channel: channel, c: make(chan struct{}, 1)}
	if notes {
		// Messages published before Attach may still be on their way (a
		// note for the owner's previous wait, whose place is stale): the
		// waiter takes notes only after the answer to a PING written
		// after Attach, which comes after every message published before.
		w.fence = e.c.seq + 1
		e.c.pingWanted = true
		e.c.wake()
	}
	e.waiters = append(e.waiters, w)
	return w
}

// Close removes the waiter. A wake-up it received but did not consume passes
// to the next waiter on the channel, so that it is not lost. The last waiter
// to leave unsubscribes (after the hub's Linger).
func (w *Waiter) Close() { w.close(true) }

// CloseNow is Close, but the last waiter to leave unsubscribes at once, on
// a hub with Linger too: for a channel that the waiter's own client
// publishes on (a reentrant lock's, shared by every waiter), where a
// lingering subscription would receive the client's own releases (issue
// 33: the releaser's read wakes on the two cores the handoff needs).
func (w *Waiter) CloseNow() { w.close(false) }

func (w *Waiter) close(keep bool) {
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
	e.idle++
	if _, moving := e.c.moving[w.channel]; keep && h.linger > 0 && !h.closed && e.confirmed && !moving {
		// Kept for the next wait: dropped when it stays unused.
		idle := e.idle
		time.AfterFunc(h.linger, func() { h.expire(e, idle) })
		return
	}
	h.dropLocked(e)
}

// expire drops a lingering entry that had no waiter since its idle spell
// idle began.
func (h *Hub) expire(e *entry, idle uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.chans[e.channel] != e || len(e.waiters) > 0 || e.idle != idle {
		return
	}
	h.dropLocked(e)
}

// dropLocked forgets e, which has no waiters, and unsubscribes its channel.
// h.mu is held.
func (h *Hub) dropLocked(e *entry) {
	ch := e.channel
	delete(h.chans, ch)
	c := e.c
	_, moving := c.moving[ch]
	delete(c.subs, ch)
	delete(c.todo, ch)
	delete(c.unconf, ch)
	delete(c.moving, ch)
	if !h.closed && !moving && e.gen != 0 && e.gen == c.gen {
		// Subscribed (or being subscribed) on this generation's
		// connection: the manager unsubscribes after it.
		c.drop[ch] = struct{}{}
		c.wake()
	}
}

func notify(w *Waiter) {
	w.note = "" // this wake-up asks for an attempt
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func wakeOne(e *entry) {
	for _, w := range e.waiters {
		select {
		case w.c <- struct{}{}:
			w.note = ""
			return
		default: // already has a wake-up pending
			if w.note != "" {
				// from sleep messages only: it now asks for an attempt too
				w.note = ""
				return
			}
			// try the next one
		}
	}
}

// noteAll delivers a sleep message: each waiter keeps it, unless a
// wake-up that asks for an attempt is pending already.
func noteAll(e *entry, payload string) {
	for _, w := range e.waiters {
		if w.fence > e.c.acked {
			continue // maybe published before it attached (Attach)
		}
		select {
		case w.c <- struct{}{}:
			w.note = payload
		default:
			if w.note != "" {
				w.note = payload // the later of two sleep messages
			}
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

// Waited reports how many channels have waiters: Channels but those that
// only linger (for tests).
func (h *Hub) Waited() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.chans {
		if len(e.waiters) > 0 {
			n++
		}
	}
	return n
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

// deliverLocked hands a message on channel to its waiters: an unlock
// message ("0") wakes the first one without a wake-up pending (one waiter
// may take the lock), any other message wakes them all. h.mu is held.
func (h *Hub) deliverLocked(channel, payload string) {
	e := h.chans[channel]
	if e == nil {
		return
	}
	if payload == "0" { // UNLOCK_MESSAGE: one waiter may take the lock
		wakeOne(e)
		return
	}
	if strings.HasPrefix(payload, "s:") {
		noteAll(e, payload)
		return
	}
	if strings.HasPrefix(payload, "g:") {
		// A grant (direct handoff) names its request: every waiter of
		// the owner gets it and keeps only its own.
		for _, w := range e.waiters {
			w.grant = payload
		}
	}
	wakeAll(e)
}

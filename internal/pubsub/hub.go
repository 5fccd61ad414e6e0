// Package pubsub multiplexes every lock waiter of one client over shared
// Redis pub/sub connections: one connection in classic mode, one per
// cluster shard (primary) in sharded mode.
//
// A waiter subscribes to a channel and receives wake-ups on a buffered
// channel of capacity 1, so a message that arrives between a waiter's retry
// and its wait is kept, not lost. Subscriptions are reference-counted per
// channel: the first waiter sends SUBSCRIBE (SSUBSCRIBE) and waits for the
// server's confirmation, the last one to leave sends UNSUBSCRIBE. One
// goroutine reads each connection; there is no goroutine per waiter. After a
// connection drops and go-redis re-subscribes, every waiter on it is woken so
// it re-checks its lock at once (a message may have been lost while the
// connection was down).
//
// Sharded mode (SSUBSCRIBE, Redis 7+): a shard channel can only be
// subscribed on the primary that serves its hash slot, and one go-redis
// PubSub talks to one node, so the hub keeps one PubSub per primary and puts
// each channel on the PubSub of the primary that serves it. When the server
// refuses a subscription with MOVED (the slot moved, or our view of the
// cluster was stale), or drops it with an unrequested SUNSUBSCRIBE (Redis
// does this when a slot leaves the node), the hub moves the channel to the
// PubSub of its new primary and wakes its waiters so they re-check. When a
// primary fails, go-redis reconnects the PubSub to whichever node then
// serves the slots (the promoted replica) once the cluster view is reloaded,
// which the hub asks for.
package pubsub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("pubsub: hub closed")

// Hub is one client's shared subscription.
type Hub struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // rdb, when it is one
	slotFn  func(string) int
	mode    atomic.Int32 // modeClassic, modeSharded, or modeAuto while undecided
	probeMu sync.Mutex
	probeAt time.Time // last failed probe
	ping    time.Duration

	mu      sync.Mutex
	conns   map[string]*conn // by primary address ("" outside a sharded cluster)
	retired []*conn          // replaced connections whose reader may still run
	chans   map[string]*entry
	closed  bool
}

// conn is one PubSub and the goroutine reading it.
type conn struct {
	key  string
	ps   *redis.PubSub
	done chan struct{}
	// sent counts SUBSCRIBEs per channel whose confirmation has not been
	// read yet, so an old confirmation never confirms a newer subscription.
	sent map[string]int
	// unsent counts our own SUNSUBSCRIBEs not yet confirmed, to tell them
	// from the server dropping a channel whose slot moved away.
	unsent map[string]int
	// started: the reader runs. It is started only after the first
	// subscription was sent, so that go-redis opens the connection to the
	// node serving that channel (with no channel it picks a random node).
	started bool
	retired bool // replaced: the reader stops
	resync  bool // a write failed: the counts in sent cannot be trusted
	// lastReload: when this connection's reader last asked for a new slot
	// map (read and written by the reader only).
	lastReload time.Time
}

type entry struct {
	c         *conn // the connection the channel is subscribed on
	confirmed bool
	ready     chan struct{} // closed at the first confirmation
	waiters   []*Waiter     // in arrival order
}

// Waiter is one subscriber's view of a channel.
type Waiter struct {
	hub     *Hub
	channel string
	c       chan struct{}
	closed  bool
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
// checked with a PING.
func New(rdb redis.UniversalClient, pingEvery time.Duration, opts ...Option) *Hub {
	h := &Hub{rdb: rdb, ping: pingEvery, conns: map[string]*conn{}, chans: map[string]*entry{}}
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

// connLocked returns the connection for key, starting it if needed.
// h.mu is held.
func (h *Hub) connLocked(ctx context.Context, key string) *conn {
	if c := h.conns[key]; c != nil {
		return c
	}
	c := &conn{key: key, done: make(chan struct{}), sent: map[string]int{}, unsent: map[string]int{}}
	ctx = context.WithoutCancel(ctx)
	if h.isSharded() {
		c.ps = h.rdb.SSubscribe(ctx)
	} else {
		c.ps = h.rdb.Subscribe(ctx)
	}
	h.conns[key] = c
	return c
}

// writeTimeout bounds the write of one SUBSCRIBE or UNSUBSCRIBE.
const writeTimeout = 5 * time.Second

// subscribeLocked sends the subscription of channel on c. h.mu is held.
//
// The write does not use the caller's context: a context that ends during
// the write would leave it unknown whether the server got the SUBSCRIBE,
// and a count in c.sent that no confirmation ever pays off would make every
// later subscription to the channel wait forever. When the write fails
// anyway (a broken connection), go-redis keeps the channel in its set and
// subscribes again when it reconnects, and c.resync makes the next
// confirmation start the counts afresh.
func (h *Hub) subscribeLocked(c *conn, channel string) {
	c.sent[channel]++
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	var err error
	if h.isSharded() {
		err = c.ps.SSubscribe(ctx, channel)
	} else {
		err = c.ps.Subscribe(ctx, channel)
	}
	if err != nil {
		c.resync = true
	}
	if !c.started {
		c.started = true
		go h.read(c)
	}
}

// Subscribe subscribes to channel and returns once the server has confirmed
// the subscription, so that every message published afterwards is seen.
// When ctx ends first, nothing is left behind and ctx's error is returned.
func (h *Hub) Subscribe(ctx context.Context, channel string) (*Waiter, error) {
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
	w := &Waiter{hub: h, channel: channel, c: make(chan struct{}, 1)}
	e := h.chans[channel]
	if e == nil {
		e = &entry{ready: make(chan struct{}), c: h.connLocked(ctx, key)}
		h.chans[channel] = e
		h.subscribeLocked(e.c, channel)
	}
	e.waiters = append(e.waiters, w)
	ready := e.ready
	h.mu.Unlock()

	select {
	case <-ready:
		return w, nil
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
	if !h.closed {
		h.unsubscribeLocked(e.c, w.channel)
	}
}

// unsubscribeLocked drops channel from c. h.mu is held.
func (h *Hub) unsubscribeLocked(c *conn, channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if h.isSharded() {
		c.unsent[channel]++
		if err := c.ps.SUnsubscribe(ctx, channel); err != nil {
			// Perhaps never sent: do not wait for its confirmation.
			delete(c.unsent, channel)
		}
		return
	}
	_ = c.ps.Unsubscribe(ctx, channel)
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
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}

// Channels reports how many channels are subscribed (for tests).
func (h *Hub) Channels() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.chans)
}

// Conns reports how many pub/sub connections the hub holds (for tests).
func (h *Hub) Conns() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// Close ends the subscriptions and their goroutines. Waiters still
// subscribed get no more wake-ups.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	conns := h.retired
	for _, c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	var first error
	for _, c := range conns {
		if err := c.ps.Close(); err != nil && first == nil && !c.retired {
			first = err
		}
		if c.started {
			<-c.done
		}
	}
	return first
}

// stopped reports whether c's reader should end.
func (h *Hub) stopped(c *conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed || c.retired
}

func (h *Hub) read(c *conn) {
	defer close(c.done)
	ctx := context.Background()
	failed := false
	for {
		msg, err := c.ps.ReceiveTimeout(ctx, h.ping)
		if err != nil {
			if h.stopped(c) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Silence: check the connection. A failed PING makes
				// go-redis reconnect and re-subscribe.
				pctx, cancel := context.WithTimeout(ctx, h.ping)
				_ = c.ps.Ping(pctx)
				cancel()
				continue
			}
			if slot, _, ok := movedSlot(err); ok {
				// A subscription was refused: its slot is served
				// elsewhere. Not a connection failure.
				h.relocate(c, slot)
				continue
			}
			failed = true
			if h.cluster != nil {
				// The node may be gone: let go-redis learn who serves
				// its slots now, so the reconnect goes there.
				h.cluster.ReloadState(ctx)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				h.confirmed(c, m.Channel, failed)
			case "sunsubscribe":
				h.dropped(c, m.Channel)
			}
		case *redis.Message:
			failed = false
			h.deliver(m.Channel, m.Payload)
		case *redis.Pong:
			failed = false
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

// relocate moves every channel of c in slot to the connection of the
// primary that now serves it.
func (h *Hub) relocate(c *conn, slot int) {
	if h.slotFn == nil {
		return
	}
	h.mu.Lock()
	var moving []string
	for ch, e := range h.chans {
		if e.c == c && h.slotFn(ch) == slot {
			moving = append(moving, ch)
		}
	}
	h.mu.Unlock()
	h.move(c, moving, true)
}

// dropped handles an SUNSUBSCRIBE confirmation: ours, or the server's
// notice that the channel's slot left the node.
func (h *Hub) dropped(c *conn, channel string) {
	h.mu.Lock()
	if c.unsent[channel] > 0 {
		c.unsent[channel]--
		if c.unsent[channel] == 0 {
			delete(c.unsent, channel)
		}
		h.mu.Unlock()
		return
	}
	e := h.chans[channel]
	mine := e != nil && e.c == c
	h.mu.Unlock()
	if mine {
		h.move(c, []string{channel}, false)
	}
}

// move re-subscribes channels (still subscribed, according to the hub, on
// c) on the connection of their current primary, and wakes their waiters at
// once: a message published while the slot moved went to the other node.
// refused says the server refused them with MOVED: when our view still
// names c's node as their primary, c is connected to the wrong node (it
// was opened with a stale view) and is replaced.
func (h *Hub) move(c *conn, channels []string, refused bool) {
	if len(channels) == 0 {
		return
	}
	// Reload the slot map and give the reload a moment; this also keeps a
	// refusal loop (our view still stale) from spinning. A slot that moves
	// drops its channels one SUNSUBSCRIBE at a time: one reload serves the
	// whole burst, and refusals always wait.
	if refused || time.Since(c.lastReload) > 200*time.Millisecond {
		if h.cluster != nil {
			h.cluster.ReloadState(context.Background())
		}
		time.Sleep(50 * time.Millisecond)
		c.lastReload = time.Now()
	}
	for _, ch := range channels {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		key, err := h.shardKey(ctx, ch)
		cancel()
		h.mu.Lock()
		e := h.chans[ch]
		if h.closed || e == nil || e.c != c {
			h.mu.Unlock()
			continue
		}
		if err != nil {
			key = c.key
		}
		if key == c.key && refused {
			h.replaceLocked(c)
			h.mu.Unlock()
			return
		}
		// Forget the channel on c without waiting for the server: the
		// server already dropped or refused it.
		delete(c.sent, ch)
		h.unsubscribeLocked(c, ch)
		e.c = h.connLocked(context.Background(), key)
		h.subscribeLocked(e.c, ch)
		wakeAll(e)
		h.mu.Unlock()
	}
}

// replaceLocked retires c and subscribes all its channels on a new
// connection for the same primary, opened with the current view of the
// cluster. h.mu is held.
func (h *Hub) replaceLocked(c *conn) {
	c.retired = true
	live := h.retired[:0]
	for _, r := range h.retired { // forget those whose reader has ended
		select {
		case <-r.done:
		default:
			live = append(live, r)
		}
	}
	h.retired = append(live, c)
	if h.conns[c.key] == c {
		delete(h.conns, c.key)
	}
	nc := h.connLocked(context.Background(), c.key)
	for ch, e := range h.chans {
		if e.c != c {
			continue
		}
		e.c = nc
		h.subscribeLocked(nc, ch)
		wakeAll(e)
	}
	// Closing makes c's reader return (it sees c.retired).
	go func() { _ = c.ps.Close() }()
}

// confirmed handles a subscription confirmation. One that follows a
// connection failure is a re-subscription: every waiter on the channel
// re-checks its lock.
func (h *Hub) confirmed(c *conn, channel string, afterFailure bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if afterFailure || c.resync {
		clear(c.sent)
		c.resync = false
	} else if c.sent[channel] > 0 {
		c.sent[channel]--
	}
	e := h.chans[channel]
	if e == nil || e.c != c || c.sent[channel] > 0 {
		return
	}
	if !e.confirmed {
		e.confirmed = true
		close(e.ready)
		return
	}
	wakeAll(e)
}

func (h *Hub) deliver(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
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

package pubsub

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// replyTimeout is how long a PING may stay unanswered before its
	// connection is rebuilt.
	replyTimeout = 5 * time.Second
	// writeTimeout bounds one round of writes on a connection, including
	// the dial it may need.
	writeTimeout = 5 * time.Second
	// minBackoff and maxBackoff bound the pause before rebuilding a
	// connection that failed again without ever answering.
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

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

	seq        uint64    // last PING sequence number given out
	pingWanted bool      // a waiter attached (Attach): write a PING
	written    uint64    // last PING written
	acked      uint64    // last PING answered
	waitSince  time.Time // an answer has been owed since (zero: none)
	lastRead   time.Time

	lastReload time.Time // manager only
}

type unsub struct {
	n   int
	seq uint64 // the PING written after the last one
}

// OnRecover sets f to run (on a goroutine of its own) when a connection
// that failed is working again: its next generation had a PING answered.
// After a restart or a failover that is the first sign that Redis is back,
// and what it kept may be gone (the session re-checks its holds).
func OnRecover(f func()) Option { return func(h *Hub) { h.onRecover = f } }

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
		if b := h.collectLocked(c, ping || c.pingWanted); b != nil {
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
	c.pingWanted = false
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

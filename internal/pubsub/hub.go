// Package pubsub multiplexes every lock waiter of one client over a single
// Redis pub/sub connection.
//
// A waiter subscribes to a channel and receives wake-ups on a buffered
// channel of capacity 1, so a message that arrives between a waiter's retry
// and its wait is kept, not lost. Subscriptions are reference-counted per
// channel: the first waiter sends SUBSCRIBE and waits for the server's
// confirmation, the last one to leave sends UNSUBSCRIBE. One goroutine reads
// the connection. After the connection drops and go-redis re-subscribes,
// every waiter is woken so it re-checks the lock at once (a message may have
// been lost while the connection was down).
package pubsub

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("pubsub: hub closed")

// Hub is one client's shared subscription.
type Hub struct {
	rdb   redis.UniversalClient
	ping  time.Duration
	mu    sync.Mutex
	ps    *redis.PubSub
	chans map[string]*entry
	// sent counts SUBSCRIBEs per channel whose confirmation has not been
	// read yet, so an old confirmation never confirms a newer subscription.
	sent   map[string]int
	closed bool
	done   chan struct{}
}

type entry struct {
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

// New makes a hub over rdb. Nothing is sent to Redis until the first
// Subscribe. pingEvery is how long the connection may be silent before it is
// checked with a PING.
func New(rdb redis.UniversalClient, pingEvery time.Duration) *Hub {
	return &Hub{rdb: rdb, ping: pingEvery, chans: map[string]*entry{}, sent: map[string]int{}}
}

// C is where wake-ups arrive. It has room for one: wake-ups coalesce.
func (w *Waiter) C() <-chan struct{} { return w.c }

// Subscribe subscribes to channel and returns once the server has confirmed
// the subscription, so that every message published afterwards is seen.
// When ctx ends first, nothing is left behind and ctx's error is returned.
func (h *Hub) Subscribe(ctx context.Context, channel string) (*Waiter, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	if h.ps == nil {
		h.ps = h.rdb.Subscribe(context.WithoutCancel(ctx))
		h.done = make(chan struct{})
		go h.read(h.ps, h.done)
	}
	w := &Waiter{hub: h, channel: channel, c: make(chan struct{}, 1)}
	e := h.chans[channel]
	if e == nil {
		e = &entry{ready: make(chan struct{})}
		h.chans[channel] = e
		h.sent[channel]++
		if err := h.ps.Subscribe(ctx, channel); err != nil {
			// go-redis keeps the channel in its set and re-subscribes on
			// reconnect; the confirmation will come then, or ctx ends.
			_ = err
		}
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
	if h.ps != nil && !h.closed {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = h.ps.Unsubscribe(ctx, w.channel)
		cancel()
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

// Close ends the subscription and its goroutine. Waiters still subscribed
// get no more wake-ups.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	ps, done := h.ps, h.done
	h.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}

func (h *Hub) read(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	ctx := context.Background()
	failed := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, h.ping)
		if err != nil {
			h.mu.Lock()
			closed := h.closed
			h.mu.Unlock()
			if closed {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Silence: check the connection. A failed PING makes
				// go-redis reconnect and re-subscribe.
				pctx, cancel := context.WithTimeout(ctx, h.ping)
				_ = ps.Ping(pctx)
				cancel()
				continue
			}
			failed = true
			time.Sleep(50 * time.Millisecond)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				h.confirmed(m.Channel, failed)
			}
		case *redis.Message:
			failed = false
			h.deliver(m.Channel, m.Payload)
		case *redis.Pong:
			failed = false
		}
	}
}

// confirmed handles a subscription confirmation. One that follows a
// connection failure is a re-subscription: every waiter on the channel
// re-checks its lock.
func (h *Hub) confirmed(channel string, afterFailure bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if afterFailure {
		clear(h.sent)
	} else if h.sent[channel] > 0 {
		h.sent[channel]--
	}
	e := h.chans[channel]
	if e == nil || h.sent[channel] > 0 {
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

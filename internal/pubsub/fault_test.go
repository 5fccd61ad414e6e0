package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/pubsub"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// subscribeBound is how long a Subscribe may take when the network is
// faulty: the hub bounds its wait for a confirmation to a few seconds (then
// it returns the waiter with a wake-up pending). Generous for a loaded
// machine.
const subscribeBound = 10 * time.Second

// subscribeResult is one Subscribe call run in the background.
type subscribeResult struct {
	w       *pubsub.Waiter
	err     error
	elapsed time.Duration
}

func subscribeAsync(ctx context.Context, h *pubsub.Hub, ch string) <-chan subscribeResult {
	out := make(chan subscribeResult, 1)
	go func() {
		start := time.Now()
		w, err := h.Subscribe(ctx, ch)
		out <- subscribeResult{w, err, time.Since(start)}
	}()
	return out
}

// awaitSubscribe waits for a background Subscribe; a Subscribe that does not
// return within bound fails the test (its ctx is the caller's to cancel).
func awaitSubscribe(t *testing.T, res <-chan subscribeResult, bound time.Duration, what string) subscribeResult {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(bound):
		t.Fatalf("%s: Subscribe did not return within %v", what, bound)
		return subscribeResult{}
	}
}

func awaitWake(t *testing.T, w *pubsub.Waiter, bound time.Duration, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(bound):
		t.Fatalf("%s: no wake-up within %v", what, bound)
	}
}

func drain(w *pubsub.Waiter) {
	for {
		select {
		case <-w.C():
		default:
			return
		}
	}
}

// settle waits until the hub's subscriptions are established on a working
// connection: it subscribes to fresh channels until one Subscribe returns
// confirmed (no wake-up pending, which the hub leaves only when it gave up
// waiting for the confirmation). Every channel the hub held before is then
// subscribed on that same connection, its re-subscription confirmed (the
// hub writes the subscriptions it owes before a new one), so the wake-ups
// of that recovery were already handed out and a message published from
// now on is the only thing that can wake a waiter.
func settle(t *testing.T, h *pubsub.Hub, prefix string, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), subscribeBound)
		w, err := h.Subscribe(ctx, fmt.Sprintf("%ssettle%d", prefix, i))
		cancel()
		if err != nil {
			t.Fatalf("settle: Subscribe: %v", err)
		}
		pending := false
		select {
		case <-w.C():
			pending = true
		default:
		}
		w.Close()
		if !pending {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("settle: no subscription confirmed within %v", bound)
		}
	}
}

// publishWakes publishes a wake-all message on ch and expects w to be woken.
func publishWakes(t *testing.T, pub *redis.Client, w *pubsub.Waiter, ch, what string) {
	t.Helper()
	drain(w)
	if err := pub.Publish(context.Background(), ch, "1").Err(); err != nil {
		t.Fatal(err)
	}
	awaitWake(t, w, 10*time.Second, what)
}

// flakyDialer dials TCP; when armed, the next write on any connection it
// made fails and closes that connection, as a write on a connection the
// peer reset does. The connection that go-redis opens right after (its
// reconnect inside the failing call) works.
type flakyDialer struct {
	armed atomic.Bool
	fired atomic.Int32
}

type flakyConn struct {
	net.Conn
	d *flakyDialer
}

func (c *flakyConn) Write(b []byte) (int, error) {
	if c.d.armed.CompareAndSwap(true, false) {
		c.d.fired.Add(1)
		_ = c.Conn.Close()
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: errors.New("connection reset by peer (injected)")}
	}
	return c.Conn.Write(b)
}

func (d *flakyDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &flakyConn{Conn: c, d: d}, nil
}

// A SUBSCRIBE whose write fails, or that is lost in a network fault, must
// not hang its Subscribe nor leave the channel unsubscribed: Subscribe
// returns within its bound, and once the network is back a PUBLISH on the
// channel reaches the waiter (issue 8: go-redis reconnects inside the
// failing call and re-subscribes only the channels it already knew, and
// the hub waited for a confirmation that never came).
func TestSubscribeThroughFaults(t *testing.T) {
	redistest.Long(t)
	b := redistest.Real(t)
	pub := b.Client(t)
	for _, fault := range []string{"failed write", "black hole", "cut", "reset"} {
		t.Run(fault, func(t *testing.T) {
			p := faultproxy.Start(t, b.Addr)
			fd := &flakyDialer{}
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Dialer: fd.dial})
			t.Cleanup(func() { _ = rdb.Close() })
			h := pubsub.New(rdb, 30*time.Second)
			defer h.Close()
			prefix := redistest.Prefix(t)
			ch1, ch2 := prefix+"one", prefix+"two"

			ctx, cancel := context.WithTimeout(context.Background(), subscribeBound)
			w1, err := h.Subscribe(ctx, ch1)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			defer w1.Close()

			var undo func()
			switch fault {
			case "failed write":
				fd.armed.Store(true)
			case "black hole":
				undo = p.BlackHole()
			case "cut":
				undo = p.Cut()
			case "reset":
				p.Reset()
			}
			// The caller's ctx is longer than the bound: the hub must
			// bound the wait itself (a Lock(ctx) without deadline).
			sctx, scancel := context.WithTimeout(context.Background(), subscribeBound+5*time.Second)
			defer scancel()
			res := subscribeAsync(sctx, h, ch2)
			// The fault lasts until Subscribe returns (or its bound
			// passes): the hub must not wait for the network to come
			// back. (Removing the black hole closes the connections
			// through it, so lifting it early would hide a hang.)
			var r subscribeResult
			select {
			case r = <-res:
			case <-time.After(subscribeBound):
				if undo != nil {
					undo()
				}
				t.Fatalf("Subscribe(%s) did not return within %v while the %s lasted", ch2, subscribeBound, fault)
			}
			if r.err != nil {
				if undo != nil {
					undo()
				}
				t.Fatalf("Subscribe(%s) through %s: %v after %v", ch2, fault, r.err, r.elapsed)
			}
			defer r.w.Close()
			// Returned unconfirmed (its bound ran out): a wake-up is
			// pending, and another comes when the subscription is
			// confirmed after the network is back.
			late := false
			select {
			case <-r.w.C():
				late = true
			default:
			}
			if undo != nil {
				undo()
			}
			if late {
				awaitWake(t, r.w, 20*time.Second, "the waiter returned unconfirmed, once its subscription is confirmed")
			}
			if fault == "failed write" && fd.fired.Load() != 1 {
				t.Fatalf("the injected write failure fired %d times, want 1", fd.fired.Load())
			}
			t.Logf("Subscribe returned after %v (unconfirmed: %v)", r.elapsed.Round(time.Millisecond), late)
			if (fault == "black hole" || fault == "cut") && !late {
				t.Fatalf("Subscribe through a %s returned confirmed", fault)
			}

			settle(t, h, prefix, 30*time.Second)
			publishWakes(t, pub, r.w, ch2, "the channel subscribed through the fault")
			publishWakes(t, pub, w1, ch1, "the channel subscribed before the fault")
		})
	}
}

// CLIENT KILL TYPE pubsub drops the hub's connection on the server side:
// every waiter is woken to re-check, and messages published afterwards
// arrive. Then the same while other subscriptions are being made and
// dropped: a SUBSCRIBE written on the dead connection fails (the peer reset
// it), and no Subscribe may hang or be left unsubscribed.
func TestClientKillPubSub(t *testing.T) {
	redistest.Long(t)
	srv := redistest.StartT(t)
	b := srv.Backend()
	rdb := b.Client(t)
	admin := b.Client(t)
	pub := b.Client(t)
	h := pubsub.New(rdb, 30*time.Second)
	defer h.Close()
	prefix := redistest.Prefix(t)
	ctx := context.Background()

	chans := []string{prefix + "a", prefix + "a", prefix + "b", prefix + "c"} // two waiters on a
	var ws []*pubsub.Waiter
	for _, ch := range chans {
		sctx, cancel := context.WithTimeout(ctx, subscribeBound)
		w, err := h.Subscribe(sctx, ch)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}

	kill := func() {
		t.Helper()
		if err := admin.Do(ctx, "client", "kill", "type", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	kill()
	for i, w := range ws {
		awaitWake(t, w, 15*time.Second, fmt.Sprintf("waiter %d on %s after CLIENT KILL", i, chans[i]))
	}
	t.Logf("every waiter woken %v after the kill", time.Since(killed).Round(time.Millisecond))
	settle(t, h, prefix+"s1:", 30*time.Second)
	for i, w := range ws {
		publishWakes(t, pub, w, chans[i], fmt.Sprintf("waiter %d on %s, message after the kill", i, chans[i]))
	}

	// A kill while the server refuses new connections (it has reached
	// maxclients): the hub cannot subscribe again yet; once connections
	// are accepted again, every waiter is woken (its subscription is back,
	// a message may have been lost meanwhile) and messages arrive.
	if err := admin.Do(ctx, "config", "set", "maxclients", "1").Err(); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := admin.Do(ctx, "config", "set", "maxclients", "10000").Err(); err != nil {
				t.Error(err)
			}
		}
	}
	defer restore()
	if err := b.Client(t).Ping(ctx).Err(); err == nil {
		t.Fatal("a new connection was accepted under maxclients 1")
	}
	for _, w := range ws {
		drain(w) // wake-ups left by the messages above
	}
	kill()
	time.Sleep(time.Second) // the hub's attempts to subscribe again are refused
	if n, err := admin.Do(ctx, "client", "list", "type", "pubsub").Text(); err != nil || strings.TrimSpace(n) != "" {
		t.Fatalf("pub/sub connections while new ones are refused: %q (%v), want none", n, err)
	}
	// A waiter arriving during the outage: its Subscribe returns within
	// its bound while connections are still refused, with a wake-up
	// pending, and it is subscribed once they are accepted again.
	sctx, scancel := context.WithTimeout(ctx, subscribeBound+5*time.Second)
	defer scancel()
	res := subscribeAsync(sctx, h, prefix+"d")
	var r subscribeResult
	select {
	case r = <-res:
	case <-time.After(subscribeBound):
		restore()
		t.Fatalf("Subscribe while new connections are refused did not return within %v", subscribeBound)
	}
	if r.err != nil {
		restore()
		t.Fatalf("Subscribe while new connections are refused: %v", r.err)
	}
	defer r.w.Close()
	awaitWake(t, r.w, time.Second, "waiter that arrived during the outage (a wake-up pending)")
	ws = append(ws, r.w)
	chans = append(chans, prefix+"d")
	restore()
	restoredAt := time.Now()
	for i, w := range ws {
		awaitWake(t, w, 15*time.Second, fmt.Sprintf("waiter %d on %s once connections are accepted again", i, chans[i]))
	}
	t.Logf("every waiter woken %v after connections were accepted again", time.Since(restoredAt).Round(time.Millisecond))
	settle(t, h, prefix+"s0:", 30*time.Second)
	for i, w := range ws {
		publishWakes(t, pub, w, chans[i], fmt.Sprintf("waiter %d on %s, message after connections are accepted again", i, chans[i]))
	}

	// Kills during a stream of Subscribe and Close calls.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sctx, cancel := context.WithTimeout(ctx, subscribeBound+5*time.Second)
				start := time.Now()
				w, err := h.Subscribe(sctx, fmt.Sprintf("%sstream%d-%d", prefix, g, i%3))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("stream %d: Subscribe: %v after %v", g, err, time.Since(start))
					return
				}
				if d := time.Since(start); d > subscribeBound {
					errs <- fmt.Errorf("stream %d: Subscribe took %v", g, d)
					w.Close()
					return
				}
				w.Close()
			}
		}(g)
	}
	for k := 0; k < 40; k++ {
		time.Sleep(25 * time.Millisecond)
		kill()
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	settle(t, h, prefix+"s2:", 30*time.Second)
	for i, w := range ws {
		publishWakes(t, pub, w, chans[i], fmt.Sprintf("waiter %d on %s, message after the kills", i, chans[i]))
	}
	if n := h.Channels(); n != 4 {
		t.Fatalf("hub holds %d channels, want 4", n)
	}
}

// Close while a Subscribe waits for its confirmation (the connection is
// stalled: the SUBSCRIBE never reaches Redis): Subscribe returns ErrClosed
// promptly, the live waiter is woken so its owner notices the close, and
// Close itself returns.
func TestCloseWhileSubscribePending(t *testing.T) {
	b := redistest.Real(t)
	p := faultproxy.Start(t, b.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	h := pubsub.New(rdb, 30*time.Second)
	prefix := redistest.Prefix(t)

	ctx, cancel := context.WithTimeout(context.Background(), subscribeBound)
	w1, err := h.Subscribe(ctx, prefix+"live")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()

	undo := p.Stall()
	defer undo()
	// No deadline: only Close can end this Subscribe (the lock code's
	// Lock(ctx) with a background ctx, cut short by Client.Close).
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	res := subscribeAsync(sctx, h, prefix+"pending")
	time.Sleep(500 * time.Millisecond) // the SUBSCRIBE is written and held back

	closed := make(chan error, 1)
	go func() { closed <- h.Close() }()
	r := awaitSubscribe(t, res, 5*time.Second, "pending at Close")
	if !errors.Is(r.err, pubsub.ErrClosed) {
		t.Fatalf("Subscribe pending at Close returned (%v, %v), want ErrClosed", r.w, r.err)
	}
	awaitWake(t, w1, 5*time.Second, "live waiter at Close")
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := h.Subscribe(context.Background(), prefix+"after"); !errors.Is(err, pubsub.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
}

// A slow write for one channel must not delay wake-ups on another. In a
// cluster the hub keeps one connection per primary; the first subscription
// on a primary opens that connection, and here its dial stalls (a primary
// that does not answer the connect; the stall lasts until the dial's ctx
// ends or the test releases it). Meanwhile a message on a channel of
// another primary must wake its waiter at once: the wake-up has to be seen
// while the dial is still stalled. (The old hub dialed and wrote while
// holding its mutex, which the reader of every other connection needs to
// hand out a wake-up.)
func TestWakeNotDelayedBySlowWrite(t *testing.T) {
	redistest.Long(t)
	cl := redistest.ClusterT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var (
		stallAddr atomic.Value // string: the primary whose next dial stalls
		armed     atomic.Bool
		entered   = make(chan struct{}, 1)
		release   = make(chan struct{})
		returned  atomic.Bool
	)
	stallAddr.Store("")
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == stallAddr.Load().(string) && armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			returned.Store(true)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		var nd net.Dialer
		return nd.DialContext(ctx, network, addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: dial})
	t.Cleanup(func() { _ = cc.Close() })
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	h := pubsub.New(cc, 30*time.Second, pubsub.Sharded(true, core.Slot))
	defer h.Close()

	prefix := redistest.Prefix(t)
	primary := func(ch string) string {
		n, err := cc.MasterForKey(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	chA := prefix + "a"
	var chB string
	for i := 0; ; i++ {
		chB = fmt.Sprintf("%sb%d", prefix, i)
		if primary(chB) != primary(chA) {
			break
		}
	}
	wA, err := h.Subscribe(ctx, chA)
	if err != nil {
		t.Fatal(err)
	}
	defer wA.Close()
	drain(wA)

	stallAddr.Store(primary(chB))
	armed.Store(true)
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	resB := subscribeAsync(sctx, h, chB)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection for the second primary was never dialed")
	}
	if err := cc.SPublish(ctx, chA, "1").Err(); err != nil {
		t.Fatal(err)
	}
	woken := false
	select {
	case <-wA.C():
		woken = true
	case <-time.After(10 * time.Second):
	}
	stalled := !returned.Load()
	close(release)
	if !woken {
		t.Fatal("no wake-up on the first channel within 10s while the second channel's connection was being dialed")
	}
	if !stalled {
		t.Fatal("the wake-up on the first channel came only after the second channel's stalled dial gave up")
	}
	r := awaitSubscribe(t, resB, subscribeBound, "second channel after the stall")
	if r.err != nil {
		t.Fatalf("Subscribe on the stalled primary: %v", r.err)
	}
	r.w.Close()
}

package propertytests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

var engines = []struct {
	name string
	e    fair.Engine
}{{"redisson", fair.Redisson}, {"scalable", fair.Scalable}}

// graces are the head graces the liveness tests run with: the default
// (5 s) and off (Redisson's behaviour).
var graces = []struct {
	name string
	g    time.Duration // as given to WithHeadGrace; 0 leaves the default
}{{"grace-default", 0}, {"grace-off", -1}}

// effectiveGrace is the grace a client given g runs with.
func effectiveGrace(g time.Duration) time.Duration {
	if g == 0 {
		return 5 * time.Second
	}
	return g
}

// recordedClient is a go-redis client on b whose script replies feed h.
func recordedClient(t testing.TB, b *redistest.Backend, h *history) *redis.Client {
	rdb := b.Client(t)
	rdb.AddHook(replyHook{h})
	return rdb
}

// TestLeaseExpiryHandoff is case 1 of issue 12: eight handles start 100 ms
// apart, each TryLockFor(ctx, 10 s, 1 s), and nobody unlocks: every lease
// runs out. Each must get the lock about 1 s after the previous one, all
// eight in the order they queued, each within livenessBound of the lease
// end before it; none may give up (their 10 s waits leave 3 s to spare).
func TestLeaseExpiryHandoff(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	b := redistest.Real(t)
	for _, eng := range engines {
		for _, gr := range graces {
			t.Run(eng.name+"/"+gr.name, func(t *testing.T) {
				t.Parallel()
				leaseExpiryHandoff(t, b, eng.e, gr.g)
			})
		}
	}
}

func leaseExpiryHandoff(t *testing.T, b *redistest.Backend, engine fair.Engine, grace time.Duration) {
	const (
		n     = 8
		wait  = 10 * time.Second
		lease = time.Second
		apart = 100 * time.Millisecond
	)
	ctx := context.Background()
	h := newHistory(effectiveGrace(grace), 30*time.Second)
	name := redistest.Prefix(t) + "lock"
	var ms []*fair.Mutex
	for range n / 2 {
		var opts []fairlock.Option
		if grace != 0 {
			opts = append(opts, fairlock.WithHeadGrace(grace))
		}
		c, err := fairlock.NewClient(recordedClient(t, b, h), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		for range 2 {
			m, err := fair.New(c, name, fair.WithEngine(engine))
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
	}
	var as []*attempt
	for i, m := range ms {
		a := h.begin(&attempt{owner: m.Owner(), label: fmt.Sprintf("h%d", i), queues: true, lease: lease, wait: wait, slot: wait})
		as = append(as, a)
		go func() {
			ok, err := m.TryLockFor(withAttempt(ctx, a), wait, lease)
			h.finish(a, ok, err)
		}()
		if !h.waitJoined(a, 5*time.Second) {
			t.Fatalf("h%d neither queued nor returned within 5 s\n%s", i, h)
		}
		time.Sleep(time.Until(a.start.Add(apart)))
	}
	for _, a := range as {
		select {
		case <-a.done:
		case <-time.After(wait + 5*time.Second):
			t.Fatalf("%s's TryLockFor did not return\n%s", a.label, h)
		}
	}
	var problems []string
	var order []string
	granted := slices.Clone(as)
	granted = slices.DeleteFunc(granted, func(a *attempt) bool { return !a.granted })
	slices.SortFunc(granted, func(x, y *attempt) int { return x.grantStart.Compare(y.grantStart) })
	for _, a := range granted {
		order = append(order, a.label)
	}
	for _, a := range as {
		if a.err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", a.label, a.err))
		} else if !a.granted {
			problems = append(problems, fmt.Sprintf("%s gave up after its %v wait", a.label, wait))
		}
	}
	if len(granted) != n || !slices.IsSortedFunc(granted, func(x, y *attempt) int { return x.n - y.n }) {
		problems = append(problems, fmt.Sprintf("grant order %v, want h0..h%d", order, n-1))
	}
	problems = append(problems, h.check(time.Now())...)
	if len(problems) > 0 {
		t.Fatalf("%d of %d got the lock:\n  %s\nhistory:\n%s", len(granted), n, strings.Join(problems, "\n  "), h)
	}
	t.Logf("grants in order %v, the last at %s", order, h.at(granted[n-1].grantStart))
}

// TestAmbiguousGrantGivenBackWakesNext: an acquisition whose call fails
// (here its context's deadline) just after Redis granted it gives the hold
// back in its cleanup. That is a release like any other: the next waiter
// must be woken and take the lock promptly (livenessBound without the
// lost-message term: nothing is lost in this run), not sleep the lease it
// last saw.
//
// X waits through a proxy that adds 500 ms each way; W waits behind it on a
// direct connection (grace off, so W's own polls come only at the 30 s
// lease). A releases; X's wake-up and its acquisition each take 500 ms to
// cross, and X's context ends 1.25 s after the release: after Redis granted
// X (about 1 s), before the reply is back (about 1.5 s). A direct
// connection watches the hash to confirm that Redis did grant X; if the
// timing missed, the run is repeated.
func TestAmbiguousGrantGivenBackWakesNext(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	b := redistest.Real(t)
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			for try := range 3 {
				if ambiguousGrantGivenBack(t, b, eng.e) {
					return
				}
				t.Logf("try %d: Redis did not grant X inside the window; again", try+1)
			}
			t.Skip("the timing never put X's grant inside the window")
		})
	}
}

func ambiguousGrantGivenBack(t *testing.T, b *redistest.Backend, engine fair.Engine) bool {
	ctx := context.Background()
	h := newHistory(-1, 30*time.Second)
	name := redistest.Prefix(t) + "lock"
	proxy := faultproxy.Start(t, b.Addr)
	slowRDB := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	slowRDB.AddHook(replyHook{h})
	t.Cleanup(func() { _ = slowRDB.Close() })
	direct := recordedClient(t, b, h)
	client := func(rdb *redis.Client) *fairlock.Client {
		c, err := fairlock.NewClient(rdb, fairlock.WithHeadGrace(-1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	handle := func(c *fairlock.Client, name string) *fair.Mutex {
		m, err := fair.New(c, name, fair.WithEngine(engine))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	directC, slowC := client(direct), client(slowRDB)
	am, xm, wm := handle(directC, name), handle(slowC, name), handle(directC, name)
	// Warm X's client up before the latency: its connection and its
	// pub/sub connection (one per client, kept) are open, so that X's
	// queueing then costs a known number of round trips.
	warm, warmHolder := handle(slowC, name+":warm"), handle(directC, name+":warm")
	if err := warmHolder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	warmed := make(chan error, 1)
	go func() { warmed <- warm.Lock(ctx) }()
	waitSubscribed(t, direct, wire.KeysFor(name+":warm").WaiterChannel(warm.Owner()))
	_ = warmHolder.Unlock(ctx)
	if err := <-warmed; err != nil {
		t.Fatal(err)
	}
	_ = warm.Unlock(ctx)
	if err := am.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	aa := h.begin(&attempt{owner: am.Owner(), label: "A"})
	h.finish(aa, true, nil)

	undo := proxy.Latency(500 * time.Millisecond)
	defer undo()
	t0 := time.Now()
	release := t0.Add(5 * time.Second) // X has queued and subscribed by then
	xctx, cancel := context.WithDeadline(ctx, release.Add(1250*time.Millisecond))
	defer cancel()
	xa := h.begin(&attempt{owner: xm.Owner(), label: "X (+500ms, deadline 1.25 s after A's release)", queues: true})
	go func() {
		err := xm.Lock(withAttempt(xctx, xa))
		h.finish(xa, err == nil, err)
	}()
	if !h.waitJoined(xa, 4*time.Second) {
		t.Fatalf("X did not queue\n%s", h)
	}
	wa := h.begin(&attempt{owner: wm.Owner(), label: "W", queues: true})
	wctx, wcancel := context.WithCancel(ctx)
	defer func() { wcancel(); <-wa.done }()
	go func() {
		err := wm.Lock(withAttempt(wctx, wa))
		h.finish(wa, err == nil, err)
	}()
	if !h.waitJoined(wa, 3*time.Second) {
		t.Fatalf("W did not queue\n%s", h)
	}
	waitSubscribed(t, direct, wire.KeysFor(name).WaiterChannel(xm.Owner()))
	time.Sleep(time.Until(release))
	h.releasing(aa)
	if err := am.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h.released(aa)
	// Watch for Redis granting X.
	granted := false
	for !granted && time.Now().Before(release.Add(3*time.Second)) {
		ok, _ := direct.HExists(ctx, name, xm.Owner()).Result()
		granted = ok
		select {
		case <-xa.done:
			if !granted {
				granted, _ = direct.HExists(ctx, name, xm.Owner()).Result()
			}
		default:
		}
		if !granted {
			time.Sleep(time.Millisecond)
		}
	}
	select {
	case <-xa.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("X's Lock did not return\n%s", h)
	}
	if !granted || xa.granted {
		if xa.granted {
			h.releasing(xa)
			_ = xm.Unlock(ctx)
			h.released(xa)
		}
		return false // the deadline did not fall between the grant and its reply
	}
	h.logf("Redis granted X; X's Lock returned %v", xa.err)
	// X's cleanup (void the request, then give the hold back) is two
	// round trips over X's 1 s RTT link, plus a dial: it runs in the
	// background after X's Lock returned at its ctx's end.
	bound := livenessBound(0, -1, 0) + 3*time.Second
	select {
	case <-wa.done:
	case <-time.After(bound + time.Second):
	}
	var problems []string
	switch {
	case !wa.granted:
		problems = append(problems, fmt.Sprintf("W is not granted %v after X's Lock returned (lock held: %v)", bound+time.Second, direct.Exists(ctx, name).Val() == 1))
	case wa.grantStart.Sub(xa.end) > bound:
		problems = append(problems, fmt.Sprintf("W was granted %v after X's Lock returned; the bound is %v", wa.grantStart.Sub(xa.end), bound))
	}
	if len(problems) > 0 {
		t.Fatalf("%s\nrecord:\n%s", strings.Join(problems, "\n"), h)
	}
	h.releasing(wa)
	_ = wm.Unlock(ctx)
	h.released(wa)
	return true
}

// waitSubscribed waits until channel has a subscriber.
func waitSubscribed(t *testing.T, rdb *redis.Client, channel string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rdb.PubSubNumSub(context.Background(), channel).Result()
		if err == nil && n[channel] > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nobody subscribed to %s within 10 s", channel)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

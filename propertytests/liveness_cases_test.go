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
	"github.com/fairlock-go/fairlock/internal/redistest"
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

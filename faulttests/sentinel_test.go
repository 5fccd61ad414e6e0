package faulttests

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// A Sentinel setup can fail over when the run did not ask it to: on a busy
// machine a Sentinel that gets no reply to its PING within
// redistest.SentinelDownAfter (1 s) counts the primary as down, and two of
// three agree. Seen in TestReplicaFailover (CI's run at a9cae8d, seed
// 1418328590625521715, and once in 60 replays on a loaded machine): about
// 2 s after the run's own failover had settled, every client switched back
// to the restarted node (go-redis's log: `sentinel: new master`), promoted
// again; writes the demoted primary took meanwhile were lost, a waiter's
// give-up among them, and its entry came back ([order] and [sem-order]
// violations 2-4 s later). A failover is a data-losing fault whoever starts
// it, so the run listens to every Sentinel and records each switch of
// primary that none of its own failovers covers as a failover fault.

// sentinelEvent is one message a Sentinel published.
type sentinelEvent struct {
	At               time.Duration
	Sentinel         string
	Channel, Payload string
}

// watchSentinels subscribes to every Sentinel's primary-down and
// switch-master events until the test ends.
func (e *Env) watchSentinels() {
	for _, addr := range e.Sentinels.SentinelAddrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		ps := sc.Subscribe(context.Background(), "+switch-master", "+sdown")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for i := 0; i < 2; i++ { // both subscriptions confirmed
			if _, err := ps.Receive(ctx); err != nil {
				e.T.Fatalf("subscribe to Sentinel %s: %v", addr, err)
			}
		}
		cancel()
		e.T.Cleanup(func() { _ = ps.Close(); _ = sc.Close() })
		go func() {
			for m := range ps.Channel() {
				if m.Channel != "+switch-master" && !strings.HasPrefix(m.Payload, "master ") {
					continue // a replica or a Sentinel seen down
				}
				ev := sentinelEvent{At: e.H.Now(), Sentinel: addr, Channel: m.Channel, Payload: m.Payload}
				e.mu.Lock()
				e.sentinelEvents = append(e.sentinelEvents, ev)
				e.mu.Unlock()
			}
		}()
	}
}

// recordUnplannedFailovers adds the unplanned failovers among the
// Sentinels' events to the history (see the top of the file).
func (e *Env) recordUnplannedFailovers() {
	if e.Sentinels == nil {
		return
	}
	e.mu.Lock()
	evs := append([]sentinelEvent(nil), e.sentinelEvents...)
	e.mu.Unlock()
	var faults []Fault
	e.H.Update(func() { faults = append(faults, e.H.Faults...) })
	for _, f := range unplannedFailovers(evs, faults, redistest.SentinelDownAfter) {
		e.H.AddFault(f)
		e.T.Logf("recorded as a fault: %s", f)
	}
}

// unplannedFailovers turns the Sentinels' switches of primary (evs) that no
// failover fault among faults covers into failover faults. Every Sentinel
// publishes the same switch: one to the same address within 5 s is one
// switch. The fault starts downAfter + 1 s before the first Sentinel saw
// the primary down (or before the switch, if none was seen): writes since
// the primary stopped answering may be lost; it ends 2 s after the switch,
// once the clients have moved.
func unplannedFailovers(evs []sentinelEvent, faults []Fault, downAfter time.Duration) []Fault {
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At < evs[j].At })
	var out []Fault
	lastAt, lastTo := time.Duration(-1), ""
	for _, ev := range evs {
		if ev.Channel != "+switch-master" {
			continue
		}
		// "<name> <old-ip> <old-port> <new-ip> <new-port>"
		p := strings.Fields(ev.Payload)
		if len(p) != 5 {
			continue
		}
		from, to := net.JoinHostPort(p[1], p[2]), net.JoinHostPort(p[3], p[4])
		if to == lastTo && ev.At-lastAt < 5*time.Second {
			continue
		}
		lastAt, lastTo = ev.At, to
		covered := false
		for _, f := range faults {
			if f.Kind == FFailover && f.Client < 0 && ev.At >= f.Start && (f.End == Never || ev.At <= f.End) {
				covered = true
			}
		}
		if covered {
			continue
		}
		down := ev.At
		for _, d := range evs {
			if d.Channel == "+sdown" && d.At < down && ev.At-d.At < 30*time.Second && strings.Contains(d.Payload, " "+p[1]+" "+p[2]) {
				down = d.At
			}
		}
		start := max(down-downAfter-time.Second, 0)
		f := Fault{Kind: FFailover, Client: -1, Start: start, End: ev.At + 2*time.Second,
			Detail: fmt.Sprintf("(unplanned: the Sentinels switched the primary from %s to %s at %s, first seeing it down at %s)", from, to, ts(ev.At), ts(down))}
		out = append(out, f)
		faults = append(faults, f)
	}
	return out
}

func TestUnplannedFailovers(t *testing.T) {
	sw := func(at time.Duration, s, from, to string) sentinelEvent {
		fh, fp, _ := net.SplitHostPort(from)
		th, tp, _ := net.SplitHostPort(to)
		return sentinelEvent{At: at, Sentinel: s, Channel: "+switch-master", Payload: strings.Join([]string{"fairlock", fh, fp, th, tp}, " ")}
	}
	sdown := func(at time.Duration, s, addr string) sentinelEvent {
		h, p, _ := net.SplitHostPort(addr)
		return sentinelEvent{At: at, Sentinel: s, Channel: "+sdown", Payload: "master fairlock " + h + " " + p}
	}
	const a, b = "127.0.0.1:1000", "127.0.0.1:2000"
	planned := []Fault{{Kind: FFailover, Client: -1, Start: 10 * s, End: 14 * s, Detail: "(primary 127.0.0.1:1000 killed)"}}
	evs := []sentinelEvent{
		// the run's own failover: a -> b, seen by the three Sentinels
		sdown(11*s, "s1", a), sw(12*s, "s1", a, b), sw(12*s+ms(5), "s2", a, b), sw(12*s+ms(9), "s3", a, b),
		// 2 s after it settled: b seen down, switched back to a
		sdown(ms(15500), "s2", b), sw(16*s, "s2", b, a), sw(16*s+ms(3), "s1", b, a),
	}
	got := unplannedFailovers(evs, planned, time.Second)
	if len(got) != 1 {
		t.Fatalf("got %d unplanned failovers, want 1: %v", len(got), got)
	}
	if f := got[0]; f.Start != ms(13500) || f.End != 18*s || f.Kind != FFailover || f.Client != -1 {
		t.Errorf("got %s from %v, want from 13.5s until 18s", f, f.Start)
	}
	// without the run's own failover, both switches are unplanned
	if got := unplannedFailovers(evs, nil, time.Second); len(got) != 2 {
		t.Errorf("got %d unplanned failovers without a planned one, want 2", len(got))
	}
	// with no switch, none
	if got := unplannedFailovers(evs[:1], nil, time.Second); len(got) != 0 {
		t.Errorf("got %v from a primary only seen down", got)
	}
}

// A planned failover that read the primary's address just before the
// Sentinels switched it by themselves must go on with the new primary (a
// merged fault-suite run: "the Sentinels did not promote the replica of"
// the old primary, after waiting 60 s for the old primary, by then a
// replica, to have an online replica).
func TestPromotablePrimaryFollowsAnUnplannedSwitch(t *testing.T) {
	redistest.Long(t)
	e := NewReplicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	old, err := e.Sentinels.MasterAddr(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old = e.promotablePrimary(ctx, old); ctx.Err() != nil {
		t.Fatal("no online replica")
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: e.Sentinels.SentinelAddrs()[0]})
	defer sc.Close()
	if err := sc.Failover(ctx, redistest.MasterName).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	for ctx.Err() == nil {
		if a, err := e.Sentinels.MasterAddr(ctx); err == nil && a != old {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	got := e.promotablePrimary(wctx, old) // old: the stale address
	if wctx.Err() != nil || got == old {
		t.Fatalf("waited on %s, the primary before the switch, for %v (returned %s)", old, 30*time.Second, got)
	}
}

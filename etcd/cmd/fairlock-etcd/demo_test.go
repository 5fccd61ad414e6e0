package main

import (
	"github.com/fairlock-go/fairlock/etcd/internal/embedded"

	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func startEtcd(t *testing.T) *embedded.Server {
	t.Helper()
	e, err := embedded.Start(false)
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	return e
}

func smallConfig(endpoint string, kinds ...string) Config {
	return Config{Endpoint: endpoint, Clients: 3, Goroutines: 3, Seats: 40, Hold: time.Millisecond,
		Kinds: kinds, Seed: 1, Prefix: NewPrefix()}
}

// TestDemoOnEmbeddedEtcd runs the seat sale under both locks on an embedded
// etcd: no overlap, every seat booked once, no key left; the fair lock (and
// etcd's mutex, FIFO by create revision too) grants in arrival order.
func TestDemoOnEmbeddedEtcd(t *testing.T) {
	e := startEtcd(t)
	c := smallConfig(e.Endpoint, KindFair, KindEtcdMutex)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := Run(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	for _, r := range rs {
		if v := r.Violations(c.Seats); len(v) > 0 {
			t.Errorf("%s: %s", r.Kind, strings.Join(v, ", "))
		}
		// Every seat once, each booking by a distinct grant; the grants
		// that found the sale over book nothing.
		seats := map[int]bool{}
		grants := map[int]bool{}
		arrivals := map[int64]bool{}
		for _, b := range r.Bookings {
			if b.Seat > 0 {
				if seats[b.Seat] {
					t.Errorf("%s: seat %d booked twice", r.Kind, b.Seat)
				}
				seats[b.Seat] = true
			}
			if grants[b.Grant] || arrivals[b.Arrival] || b.Arrival <= 0 {
				t.Errorf("%s: grant %d arrival %d: not a fresh grant of a fresh key", r.Kind, b.Grant, b.Arrival)
			}
			grants[b.Grant], arrivals[b.Arrival] = true, true
		}
		if len(seats) != c.Seats {
			t.Errorf("%s: %d distinct seats booked, want %d", r.Kind, len(seats), c.Seats)
		}
		// One grant per seat, plus at most one per goroutine that found
		// the sale over.
		if n := len(r.Bookings); n < c.Seats+1 || n > c.Seats+c.Clients*c.Goroutines {
			t.Errorf("%s: %d grants for %d seats", r.Kind, n, c.Seats)
		}
		if r.Kind == KindFair && r.OutOfOrder() != 0 {
			t.Errorf("fair lock: %d grants out of arrival order", r.OutOfOrder())
		}
		if r.WaitPercentile(100) < r.WaitPercentile(50) || r.SeatsPerSecond() <= 0 {
			t.Errorf("%s: figures: max %v p50 %v, %f seats/s", r.Kind, r.WaitPercentile(100), r.WaitPercentile(50), r.SeatsPerSecond())
		}
	}
}

// noLock excludes nobody: Lock puts a key (its create revision the
// arrival) and Unlock leaves it.
type noLock struct {
	cli *clientv3.Client
	key string
}

func (l noLock) lock(ctx context.Context) (int64, error) {
	resp, err := l.cli.Put(ctx, l.key, "")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}
func (l noLock) unlock(context.Context) error { return nil }
func (l noLock) close()                       {}

// TestDemoCatchesBrokenLock: a lock that excludes nobody and leaves its
// keys is caught by the run's checks (overlap, double booking, leftover).
func TestDemoCatchesBrokenLock(t *testing.T) {
	e := startEtcd(t)
	n := 0
	testLocker = func(kind string, cli *clientv3.Client, prefix string) locker {
		n++
		return noLock{cli, prefix + "/k" + string(rune('a'+n))}
	}
	t.Cleanup(func() { testLocker = nil })
	c := smallConfig(e.Endpoint, "broken")
	c.Hold = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := Run(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Overlaps == 0 || r.DoubleBookings == 0 || r.Leftover != c.Clients*c.Goroutines {
		t.Errorf("broken lock not caught: %d overlaps, %d double bookings, %d keys left", r.Overlaps, r.DoubleBookings, r.Leftover)
	}
	if len(r.Violations(c.Seats)) < 3 {
		t.Errorf("violations %q", r.Violations(c.Seats))
	}
}

// TestOutOfOrderCatchesHandMadeHistories: the arrival-order check on
// histories written by hand.
func TestOutOfOrderCatchesHandMadeHistories(t *testing.T) {
	for _, tc := range []struct {
		arrivals []int64 // in grant order
		want     int
	}{
		{[]int64{5, 9, 12, 40}, 0},
		{[]int64{5, 12, 9, 40}, 1},     // 9 granted after 12
		{[]int64{40, 5, 9, 12}, 3},     // the last arrival first
		{[]int64{5, 9, 40, 12, 13}, 2}, // 12 and 13 both overtaken by 40
	} {
		r := &Result{}
		for i, a := range tc.arrivals {
			r.Bookings = append(r.Bookings, Booking{Grant: i + 1, Arrival: a})
		}
		if got := r.OutOfOrder(); got != tc.want {
			t.Errorf("%v: OutOfOrder %d, want %d", tc.arrivals, got, tc.want)
		}
		if v := r.Violations(0); (len(v) > 0) != (tc.want > 0) {
			t.Errorf("%v: violations %q", tc.arrivals, v)
		}
	}
}

// TestCommand runs the command itself on an embedded etcd, and refuses bad
// flags without starting anything.
func TestCommand(t *testing.T) {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := run1(ctx, []string{"demo", "--clients", "2", "--goroutines", "2", "--seats", "10", "--hold", "1ms", "--fsync=false"}, &out, &errb)
	if st != 0 {
		t.Fatalf("status %d\n%s\n%s", st, out.String(), errb.String())
	}
	for _, want := range []string{"embedded, one member", "grants out of arrival order", "keys left behind", "fairlock", "etcd-mutex"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, args := range [][]string{
		{}, {"nodemo"}, {"demo", "--clients", "0"}, {"demo", "--seats", "-1"}, {"demo", "--hold", "-1s"},
		{"demo", "--lock", "nope"}, {"demo", "extra"},
	} {
		out.Reset()
		errb.Reset()
		if st := run1(ctx, args, &out, &errb); st != 2 || errb.Len() == 0 || out.Len() != 0 {
			t.Errorf("%q: status %d, stderr %q, stdout %q", args, st, errb.String(), out.String())
		}
	}
}

// TestInterruptedDemoLeavesNoKeys: a run whose ctx ends mid-sale (Ctrl-C)
// returns the context's error and leaves no key and no lease of its run
// behind, under either lock.
func TestInterruptedDemoLeavesNoKeys(t *testing.T) {
	e := startEtcd(t)
	cli, err := newEtcdClient(e.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, kind := range []string{KindFair, KindEtcdMutex} {
		c := smallConfig(e.Endpoint, kind)
		c.Seats, c.Hold = 100000, 5*time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			// Cancel once the sale is under way: some key is there.
			for {
				resp, err := cli.Get(context.Background(), c.Prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err == nil && resp.Count > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			cancel()
		}()
		rs, err := Run(ctx, c, nil)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: err %v, want context.Canceled", kind, err)
		}
		if len(rs) != 1 || rs[0].Booked == 0 || rs[0].Booked >= c.Seats || rs[0].Overlaps != 0 {
			t.Fatalf("%s: results %+v", kind, rs)
		}
		resp, err := cli.Get(context.Background(), c.Prefix+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			t.Errorf("%s: key left behind: %s", kind, kv.Key)
		}
		// This server is the test's own: every lease the run granted
		// must have been revoked (none left to expire by itself).
		ls, err := cli.Leases(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(ls.Leases) > 0 {
			t.Errorf("%s: %d leases left behind", kind, len(ls.Leases))
		}
	}
}

// TestUnreachableEtcd: an endpoint where nothing listens is an error within
// the reach timeout (plus slack), not a hang.
func TestUnreachableEtcd(t *testing.T) {
	port, err := embedded.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	t0 := time.Now()
	st := run1(context.Background(), []string{"demo", "--etcd", fmt.Sprintf("127.0.0.1:%d", port)}, &out, &errb)
	if st != 1 || !strings.Contains(errb.String(), "etcd at 127.0.0.1") {
		t.Errorf("status %d, stderr %q", st, errb.String())
	}
	if d := time.Since(t0); d > ReachTimeout+10*time.Second {
		t.Errorf("took %v", d)
	}
}

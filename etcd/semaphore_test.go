package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
)

// semRec is one permit hold of a history.
type semRec struct {
	who            string
	n              int64
	grant, release time.Time
	token          int64
}

// checkCapacity: at no instant do the holds of the history (from the
// grant's return to the Release call, inside the real hold) add up to more
// than capacity.
func checkCapacity(h []semRec, capacity int64) error {
	type ev struct {
		at time.Time
		d  int64
	}
	var evs []ev
	for _, r := range h {
		evs = append(evs, ev{r.grant, r.n}, ev{r.release, -r.n})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at.Equal(evs[j].at) {
			return evs[i].d < evs[j].d // a release at the same instant first
		}
		return evs[i].at.Before(evs[j].at)
	})
	held := int64(0)
	for _, e := range evs {
		held += e.d
		if held > capacity {
			return fmt.Errorf("%d permits held at %v, capacity %d", held, e.at, capacity)
		}
	}
	return nil
}

func TestSemCheckerCatchesOverGrant(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ok := []semRec{{"a", 2, at(0), at(10), 1}, {"b", 2, at(1), at(5), 2}, {"c", 2, at(6), at(9), 3}}
	if err := checkCapacity(ok, 4); err != nil {
		t.Fatal(err)
	}
	bad := append([]semRec(nil), ok...)
	bad[2].grant = at(4) // c in while a and b hold 4
	if checkCapacity(bad, 4) == nil {
		t.Fatal("checkCapacity accepted 6 permits of 4")
	}
}

// TestSemaphoreHeadBlocksSmallerRequests: Weighted's rule. With 3 of 5
// permits held, a request for 4 waits at the head, and a later request for
// 1 (which would fit) waits behind it; TryAcquire fails while anyone waits.
func TestSemaphoreHeadBlocksSmallerRequests(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sem := func() *Semaphore {
		s, err := e.client("").NewSemaphore("pool", 5)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, err := sem().Acquire(ctx, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		who string
		p   *Permit
		at  time.Time
	}
	grants := make(chan got, 2)
	joined := make(chan string, 2)
	acq := func(who string, n int64) {
		p, err := sem().AcquireWith(ctx, n, AcquireOptions{Wait: Forever, Position: func(pos fairlock.Position) {
			select {
			case joined <- fmt.Sprintf("%s:%d", who, pos.Ahead):
			default:
			}
		}})
		if err != nil {
			t.Error(err)
		}
		grants <- got{who, p, time.Now()}
	}
	waitJoin := func(want string) {
		t.Helper()
		select {
		case j := <-joined:
			if j != want {
				t.Fatalf("joined %s, want %s", j, want)
			}
		case g := <-grants:
			t.Fatalf("%s granted at once while 3 of 5 permits are held (b4 waits)", g.who)
		case <-time.After(10 * time.Second):
			t.Fatalf("no report %s", want)
		}
	}
	go acq("b4", 4)
	waitJoin("b4:1")
	go acq("c1", 1)
	waitJoin("c1:2")
	if p, err := sem().TryAcquire(ctx, 1, 0, 0); p != nil || err != nil {
		t.Fatalf("TryAcquire(1) while a request waits: %v, %v", p, err)
	}
	if p, err := sem().TryAcquire(ctx, 1, 300*time.Millisecond, 0); p != nil || err != nil {
		t.Fatalf("TryAcquire(1, 300ms) behind the head: %v, %v", p, err)
	}
	select {
	case g := <-grants:
		t.Fatalf("%s granted while 3 of 5 permits are held and b4 waits", g.who)
	default:
	}
	released := time.Now()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]got{}
	for range 2 {
		select {
		case g := <-grants:
			seen[g.who] = g
		case <-time.After(5 * time.Second):
			t.Fatalf("not both granted after the release: %v", seen)
		}
	}
	for _, g := range seen {
		if g.at.Before(released) {
			t.Fatalf("%s granted before the release", g.who)
		}
	}
	if seen["c1"].p.Token() <= seen["b4"].p.Token() {
		t.Fatal("tokens not in arrival order")
	}
	// 5 of 5 held: nothing more fits.
	if p, _ := sem().TryAcquire(ctx, 1, 200*time.Millisecond, 0); p != nil {
		t.Fatal("a 6th permit of 5")
	}
	seen["b4"].p.Release(ctx)
	seen["c1"].p.Release(ctx)
	if p, err := sem().TryAcquire(ctx, 5, 3*time.Second, 0); p == nil || err != nil {
		t.Fatalf("all 5 after the releases: %v, %v", p, err)
	}
}

func TestSemaphoreBadInput(t *testing.T) {
	e := newEnv(t)
	c := e.client("")
	ctx := context.Background()
	if _, err := c.NewSemaphore("s", 0); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("capacity 0: %v", err)
	}
	s, _ := c.NewSemaphore("s", 3)
	if _, err := s.Acquire(ctx, 4, 0); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("4 of 3: %v", err)
	}
	if _, err := s.Acquire(ctx, 0, 0); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("0 permits: %v", err)
	}
	p, err := s.Acquire(ctx, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Release(ctx)
	other, _ := e.client("").NewSemaphore("s", 7)
	if _, err := other.Acquire(ctx, 1, 0); !errors.Is(err, fairlock.ErrInvalidValue) {
		t.Fatalf("a handle with another capacity: %v", err)
	}
}

// TestSemaphoreHistory: requests of 1-3 permits of 4 from several Clients;
// the history never holds more than 4 permits and tokens are distinct.
func TestSemaphoreHistory(t *testing.T) {
	e := newEnv(t)
	const clients, handles, rounds, capacity = 3, 3, 4, 4
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		hist []semRec
		wg   sync.WaitGroup
	)
	for ci := range clients {
		c := e.client("")
		for hi := range handles {
			s, _ := c.NewSemaphore("hist", capacity)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range rounds {
					n := int64(1 + rand.IntN(3))
					p, err := s.Acquire(ctx, n, 0)
					if err != nil {
						t.Error(err)
						return
					}
					r := semRec{who: fmt.Sprintf("c%d.h%d.%d", ci, hi, k), n: n, grant: time.Now(), token: p.Token()}
					time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond)
					r.release = time.Now()
					if err := p.Release(ctx); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					hist = append(hist, r)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(hist) != clients*handles*rounds {
		t.Fatalf("%d holds", len(hist))
	}
	if err := checkCapacity(hist, capacity); err != nil {
		t.Fatal(err)
	}
	toks := map[int64]bool{}
	for _, r := range hist {
		if toks[r.token] {
			t.Fatalf("token %d twice", r.token)
		}
		toks[r.token] = true
	}
}

package runner

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// The runner's queue counts (scenario 3 starts each contender once the one
// before is in the Redis queue) match the real queues: 0, 1, 2, 3 waiters
// behind a holder, on the fair lock's scalable engine and the fair
// semaphore. A stale count (the hash's layout changed with the join
// sequences of issue 24) let contenders start before the previous one had
// joined: an inversion in CI's smoke run.
func TestQueuedCountsMatchTheQueue(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("no redis-server: %v", err)
	}
	srv := redistest.StartT(t)
	e := &env{addr: srv.Addr, prefix: "t:", cmds: &counter{}}
	admin := srv.Backend().Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var libs []Lib
	for _, l := range append(Libs(), semLibs()...) {
		if l.Name == "fairlock/fair-scalable" || l.Name == SemFairPool1 {
			libs = append(libs, l)
		}
	}
	if len(libs) != 2 {
		t.Fatalf("%d libraries found, want 2", len(libs))
	}
	for _, lib := range libs {
		t.Run(lib.Name, func(t *testing.T) {
			c, err := lib.open(e)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			name := "queued:" + lib.Name
			holder, err := c.mutex(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := holder.lock(ctx); err != nil {
				t.Fatal(err)
			}
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			for i := range 3 {
				m, err := c.mutex(name)
				if err != nil {
					t.Fatal(err)
				}
				go func() { _ = m.lock(wctx) }()
				deadline := time.Now().Add(15 * time.Second)
				for {
					n, err := lib.queued(ctx, admin, e.prefix+name)
					if err != nil {
						t.Fatal(err)
					}
					if n > int64(i+1) {
						t.Fatalf("%d waiters started, %d counted", i+1, n)
					}
					if n == int64(i+1) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("waiter %d never counted (count %d)", i+1, n)
					}
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
}

package runner

import (
	"context"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// TestRueidislockStalledServer: while Redis is stalled now and then by a
// 40 ms script, longer than rueidislock's 20 ms acquire timeout, one
// goroutine's uncontended Lock+Unlock cycles must all finish. rueidislock
// alone can then wait for ever on a free lock (see rueidisWait); the
// runner's lock retries such a wait.
func TestRueidislockStalledServer(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("no redis-server: %v", err)
	}
	srv := redistest.StartT(t)
	e := &env{addr: srv.Addr, prefix: "t:", cmds: &counter{}}
	c, err := openRueidislock(e)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	m, err := c.mutex("x")
	if err != nil {
		t.Fatal(err)
	}
	admin := srv.Backend().Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // stall the server for 40 ms every 10 ms
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			_ = admin.Eval(context.Background(), `local t0 = redis.call('time')
local s0 = t0[1] * 1000000 + t0[2]
while true do
  local t = redis.call('time')
  if t[1] * 1000000 + t[2] - s0 > 40000 then return 1 end
end`, nil).Err()
		}
	}()
	r0 := rueidisRetries.Load()
	start := time.Now()
	var cycles int
	for time.Since(start) < 20*time.Second && cycles < 300 {
		if err := m.lock(ctx); err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("cycle %d: Lock on a free lock did not return within %v: %v", cycles, time.Since(start).Round(time.Second), err)
		}
		if err := m.unlock(ctx); err != nil {
			t.Fatalf("cycle %d: unlock: %v", cycles, err)
		}
		cycles++
	}
	close(stop)
	wg.Wait()
	t.Logf("%d cycles in %v; %d waits retried after %v", cycles, time.Since(start).Round(time.Millisecond), rueidisRetries.Load()-r0, rueidisWait)
}

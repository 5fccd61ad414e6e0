package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// TestCycleCommands lists, when FAIRLOCK_CYCLE_COMMANDS is set, the Redis
// commands each lock's scripts run in one uncontended Lock+Unlock (MONITOR
// on the test's redis-server), per script call: issue 23's count of the
// fast path. It asserts nothing.
func TestCycleCommands(t *testing.T) {
	if os.Getenv("FAIRLOCK_CYCLE_COMMANDS") == "" {
		t.Skip("FAIRLOCK_CYCLE_COMMANDS not set")
	}
	for _, kind := range []string{"reentrant", "fair", "fair-scalable"} {
		t.Run(kind, func(t *testing.T) {
			m := userLocks(t, kind, 1, nil)[0]
			ctx := context.Background()
			for range 3 { // connections, script cache
				if err := m.lock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := m.unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			calls := monitorScripts(t, redistest.Real(t).Addr, func() {
				if err := m.lock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := m.unlock(ctx); err != nil {
					t.Fatal(err)
				}
			})
			inner, scripts := 0, len(calls)
			for i, c := range calls {
				t.Logf("script %d:", i+1)
				for _, cmd := range c {
					if len(cmd) > 110 {
						cmd = cmd[:110] + "..."
					}
					t.Logf("    %s", cmd)
				}
				inner += len(c)
			}
			t.Logf("%s: %d scripts, %d inner commands", kind, scripts, inner)
		})
	}
}

// monitorScripts runs f with MONITOR on the server at addr and returns the
// inner commands of each script call (EVALSHA, EVAL or FCALL) it saw, in
// order; commands sent outside a script are left out.
func monitorScripts(t *testing.T, addr string, f func()) [][]string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if l, err := r.ReadString('\n'); err != nil || l != "+OK\r\n" {
		t.Fatal(l, err)
	}
	f()
	if _, err := conn.Write([]byte("QUIT\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	var calls [][]string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		line = strings.TrimSpace(line)
		_, cmd, _ := strings.Cut(line, "] ")
		if strings.HasPrefix(cmd, "\"evalsha\"") || strings.HasPrefix(cmd, "\"eval\"") || strings.HasPrefix(cmd, "\"fcall\"") {
			calls = append(calls, []string{})
			continue
		}
		if strings.Contains(line, "lua]") && len(calls) > 0 {
			calls[len(calls)-1] = append(calls[len(calls)-1], cmd)
		}
	}
	return calls
}

// TestHandoffCommands: the release that hands a fair lock to the head of
// its queue (the direct grant, both engines, as users call the library)
// runs at most the commands it ran after issue 33's cuts (MONITOR on a real
// redis-server). One waiter: scalable 14 (21 before the cuts), Redisson
// engine 18 (23). Three waiters, so that the release also sends the new
// head and second their notes: scalable 19 (21 at 7f32eb8), Redisson engine
// 21 (25 at 7f32eb8). Then the releaser queues again behind the two
// left, a join of a held lock: scalable 10 (12 at 7f32eb8), Redisson engine
// 13 (16). Each inner command costs a woken server several microseconds; a
// change that adds reads to the handoff shows here.
func TestHandoffCommands(t *testing.T) {
	for _, tc := range []struct {
		kind       string
		engine     fair.Engine
		queue      string
		waiters    int
		budget     int
		joinBudget int // 0: not measured
	}{
		{"scalable", fair.Scalable, "fairlock_squeue", 1, 14, 0},
		{"redisson", fair.Redisson, "redisson_lock_queue", 1, 18, 0},
		{"scalable-3", fair.Scalable, "fairlock_squeue", 3, 19, 10},
		{"redisson-3", fair.Redisson, "redisson_lock_queue", 3, 21, 13},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			be := redistest.Real(t)
			name := fmt.Sprintf("hc:%s:%d", tc.kind, time.Now().UnixNano())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var locks []*fair.Mutex
			for range 1 + tc.waiters {
				rdb := redis.NewClient(&redis.Options{Addr: be.Addr})
				c, err := fairlock.NewClient(rdb)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
				m, err := fair.New(c, name, fair.WithEngine(tc.engine))
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, m)
			}
			holder, waiter := locks[0], locks[1]
			if err := holder.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() { got <- waiter.Lock(ctx) }()
			waitQueueLen(ctx, t, holder, 1)
			// the others queue behind it, in order, and wait until the end
			lctx, stop := context.WithCancel(ctx)
			others := make(chan error, len(locks)-2)
			defer func() {
				// each gives up, or (the next head) takes the lock: then unlock
				stop()
				for _, m := range locks[2:] {
					if <-others == nil {
						_ = m.Unlock(ctx)
					}
				}
			}()
			for i, m := range locks[2:] {
				go func() { others <- m.Lock(lctx) }()
				waitQueueLen(ctx, t, holder, i+2)
			}
			time.Sleep(200 * time.Millisecond) // their re-checks after subscribing
			var release []string
			calls := monitorScripts(t, be.Addr, func() {
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatal(err)
				}
			})
			for _, c := range calls {
				if len(c) > 0 && strings.Contains(c[0], "redisson_unlock_latch") {
					release = c
				}
			}
			granted := false
			for _, cmd := range release {
				granted = granted || strings.Contains(cmd, "\"g:")
			}
			if !granted {
				t.Fatalf("no release that granted among the scripts seen: %q", calls)
			}
			t.Logf("the release that granted ran %d commands: %q", len(release), release)
			if len(release) > tc.budget {
				t.Errorf("the release that granted ran %d commands, want at most %d", len(release), tc.budget)
			}
			if tc.joinBudget > 0 {
				// The releaser queues again behind the two left: the join
				// of a held lock with a busy queue.
				jctx, cancel := context.WithCancel(ctx)
				joined := make(chan error, 1)
				calls := monitorScripts(t, be.Addr, func() {
					go func() { joined <- holder.Lock(jctx) }()
					waitQueueLen(ctx, t, waiter, tc.waiters)
				})
				cancel()
				if err := <-joined; err == nil {
					t.Fatal("the releaser took a held lock")
				}
				var join []string
				for _, c := range calls {
					for _, cmd := range c {
						if strings.HasPrefix(cmd, "\"rpush\"") || strings.HasPrefix(cmd, "\"hset\" \""+tc.queue) && strings.Contains(cmd, "\"t\"") {
							join = c
						}
					}
				}
				if join == nil {
					t.Fatalf("no join among the scripts seen: %q", calls)
				}
				t.Logf("the join ran %d commands: %q", len(join), join)
				if len(join) > tc.joinBudget {
					t.Errorf("the join of a held lock ran %d commands, want at most %d", len(join), tc.joinBudget)
				}
			}
			if err := waiter.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitQueueLen polls m's state until n waiters are queued.
func waitQueueLen(ctx context.Context, t *testing.T, m *fair.Mutex, n int) {
	t.Helper()
	for {
		st, err := m.State(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.QueueLen == n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d waiters never queued (%d are)", n, st.QueueLen)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

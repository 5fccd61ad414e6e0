package bench_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

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
			be := redistest.Real(t)
			conn, err := net.Dial("tcp", be.Addr)
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
			if err := m.lock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := m.unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write([]byte("QUIT\r\n")); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			inner, scripts := 0, 0
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					break
				}
				line = strings.TrimSpace(line)
				_, cmd, _ := strings.Cut(line, "] ")
				if strings.HasPrefix(cmd, "\"evalsha\"") || strings.HasPrefix(cmd, "\"eval\"") || strings.HasPrefix(cmd, "\"fcall\"") {
					scripts++
					t.Logf("script %d:", scripts)
					continue
				}
				if strings.Contains(line, "lua]") {
					inner++
					if len(cmd) > 110 {
						cmd = cmd[:110] + "..."
					}
					t.Logf("    %s", cmd)
				}
			}
			t.Logf("%s: %d scripts, %d inner commands", kind, scripts, inner)
		})
	}
}

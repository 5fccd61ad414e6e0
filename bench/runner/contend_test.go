package runner

import (
	"context"
	"testing"
	"time"
)

// memLock is an in-process lock (a channel of one token) posing as a library,
// so that contend's bookkeeping can be checked without Redis.
type memLock struct{ tok chan struct{} }

func (m *memLock) mutex(string) (mutex, error) { return m, nil }
func (m *memLock) close()                      {}
func (m *memLock) lock(ctx context.Context) error {
	select {
	case <-m.tok:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (m *memLock) unlock(context.Context) error { m.tok <- struct{}{}; return nil }

func memLib() Lib {
	m := &memLock{tok: make(chan struct{}, 1)}
	m.tok <- struct{}{}
	return Lib{Name: "mem", open: func(*env) (client, error) { return m, nil }}
}

// TestContendWarmGrants: the first warmGrants grants are left out of the
// counts and samples; the rest are all there.
func TestContendWarmGrants(t *testing.T) {
	ctx := context.Background()
	for _, warm := range []int{0, 10} {
		res, err := contend(ctx, &env{}, memLib(), contendSpec{lock: "x", goroutines: 4, clients: 1,
			grants: 200, limit: 30 * time.Second, hold: 100 * time.Microsecond, warmGrants: warm}, nil)
		if err != nil || res.firstErr != nil {
			t.Fatal(err, res.firstErr)
		}
		// contend stops once 200 grants are counted, warm-up included; a
		// goroutine may take one more grant before it sees the stop.
		if want := 200 - warm; res.grants < want || res.grants > want+4 {
			t.Errorf("warm %d: %d grants, want %d (up to 4 more)", warm, res.grants, want)
		}
		// every measured grant but the very first of the run has a handoff sample
		if n := len(res.handoff); n < res.grants-1 || n > res.grants {
			t.Errorf("warm %d: %d handoff samples for %d grants", warm, n, res.grants)
		}
		if res.violations != 0 {
			t.Errorf("warm %d: %d violations", warm, res.violations)
		}
	}
}

package clustertest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
)

// scriptCalls records how a cluster client sends the scripts: the name of
// each script command (fcall, evalsha, eval) and the functions called.
type scriptCalls struct {
	mu    sync.Mutex
	kinds []string
	funcs map[string]bool
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch name := strings.ToLower(cmd.Name()); name {
		case "fcall", "evalsha", "eval":
			s.mu.Lock()
			s.kinds = append(s.kinds, name)
			if f, ok := cmd.Args()[1].(string); ok && name == "fcall" {
				s.funcs[f] = true
			}
			s.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// take returns the script commands and the functions seen since the last
// take.
func (s *scriptCalls) take() ([]string, map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, f := s.kinds, s.funcs
	s.kinds, s.funcs = nil, map[string]bool{}
	return k, f
}

// On a cluster client the scripts are sent as Redis Functions, loaded on
// the primary of the lock's slot; a primary that lost a library (FUNCTION
// DELETE, as after a flush or on a new node) is sent it again; and
// WithFunctions(false) keeps EVALSHA.
func TestClusterSendsScriptsAsFunctions(t *testing.T) {
	redistest.Long(t)
	cl := redistest.SharedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type locker interface {
		Lock(context.Context) error
		Unlock(context.Context) error
	}
	kinds := []struct {
		kind string
		make func(c *fairlock.Client, name string) (locker, error)
	}{
		{"fair", func(c *fairlock.Client, name string) (locker, error) { return fair.New(c, name) }},
		{"scalable", func(c *fairlock.Client, name string) (locker, error) {
			return fair.New(c, name, fair.WithEngine(fair.Scalable))
		}},
		{"reentrant", func(c *fairlock.Client, name string) (locker, error) { return reentrant.New(c, name) }},
	}
	for _, functions := range []bool{true, false} {
		cc := cl.Client(t)
		calls := &scriptCalls{funcs: map[string]bool{}}
		cc.AddHook(calls)
		c := newClient(t, cc, fairlock.WithFunctions(functions))
		want := map[string]bool{"fcall": true}
		if !functions {
			want = map[string]bool{"evalsha": true, "eval": true} // EVAL after a NOSCRIPT
		}
		for _, k := range kinds {
			name := redistest.Prefix(t) + k.kind
			m, err := k.make(c, name)
			if err != nil {
				t.Fatal(err)
			}
			addr, err := cl.PrimaryOf(ctx, core.Slot(name))
			if err != nil {
				t.Fatal(err)
			}
			primary := redis.NewClient(&redis.Options{Addr: addr})
			defer primary.Close()
			has := func(f string) bool {
				libs, err := primary.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: f}).Result()
				if err != nil {
					t.Fatal(err)
				}
				return len(libs) == 1
			}
			cycle := func(round string) (funcs map[string]bool) {
				t.Helper()
				if err := m.Lock(ctx); err != nil {
					t.Fatalf("%s, functions=%v, %s: %v", k.kind, functions, round, err)
				}
				if err := m.Unlock(ctx); err != nil {
					t.Fatalf("%s, functions=%v, %s: %v", k.kind, functions, round, err)
				}
				sent, funcs := calls.take()
				if len(sent) < 2 {
					t.Fatalf("%s, functions=%v, %s: %d script calls seen for Lock and Unlock: %q", k.kind, functions, round, len(sent), sent)
				}
				for _, s := range sent {
					if !want[s] {
						t.Fatalf("%s, functions=%v, %s: scripts sent as %q, want only %v", k.kind, functions, round, sent, want)
					}
				}
				for f := range funcs {
					if !has(f) {
						t.Fatalf("%s, %s: the slot's primary %s lacks the library called, %s", k.kind, round, addr, f)
					}
				}
				return funcs
			}
			funcs := cycle("first")
			if !functions {
				continue
			}
			// Libraries are per node, and a flush or a new node has none:
			// delete them on the primary; the next calls load them again
			// there, still sent as FCALL.
			for f := range funcs {
				if err := primary.FunctionDelete(ctx, f).Err(); err != nil {
					t.Fatal(err)
				}
				if has(f) {
					t.Fatalf("%s: deleted, yet the primary has it", f)
				}
			}
			cycle("after FUNCTION DELETE")
		}
	}
}

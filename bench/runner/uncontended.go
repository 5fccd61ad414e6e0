package runner

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"
)

// uncontendedChunk is how many cycles one participant runs before the next
// takes its turn: small, so that a slow spell of the machine hits every
// library alike.
const uncontendedChunk = 50

// cycler is one participant of the uncontended rotation: a library's
// Lock+Unlock, or a floor (k EVALSHA of `return 1`).
type cycler struct {
	name  string
	floor bool    // a floor row, not a library
	kind  ctxKind // the context its cycles get in scenario 1
	// canEnd: in the semaphore and seats scenarios, cycles get a context
	// that can end; otherwise one that cannot (context.WithoutCancel).
	canEnd bool
	cycle  func(ctx context.Context) error
	close  func()

	lat    []time.Duration
	allocs uint64 // runtime.MemStats.Mallocs over this round's measured chunks
	cmds   int64  // client-side commands over this round's measured chunks
}

// ctxKind is the context an uncontended participant's cycles get.
type ctxKind int

const (
	ctxBackground ctxKind = iota // context.Background(), as a user's uncontended call
	ctxCanEnd                    // a context.WithCancel of the run's, as a request's context
	ctxStill                     // context.WithoutCancel of the run's (the runner before issue 23)
)

func floorCycler(e *env, name string, k int) (*cycler, error) {
	rdb := e.goredis() // with the same hook as the libraries' clients
	s := redis.NewScript("return 1")
	if err := s.Load(context.Background(), rdb).Err(); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &cycler{name: name, floor: true, close: func() { _ = rdb.Close() },
		cycle: func(ctx context.Context) error {
			for range k {
				if err := s.EvalSha(ctx, rdb, nil).Err(); err != nil {
					return err
				}
			}
			return nil
		}}, nil
}

func libCycler(e *env, lib Lib) (*cycler, error) {
	c, err := lib.open(e)
	if err != nil {
		return nil, err
	}
	m, err := c.mutex("uncontended")
	if err != nil {
		c.close()
		return nil, err
	}
	return &cycler{name: lib.Name, close: c.close,
		cycle: func(ctx context.Context) error {
			if err := m.lock(ctx); err != nil {
				return err
			}
			return m.unlock(ctx)
		}}, nil
}

// runUncontended is scenario 1 (and the floor's EVALSHA rows): one
// goroutine, Lock+Unlock on one key per library. Within a round every
// participant first runs P.warmup cycles (not measured); then the
// participants take turns, uncontendedChunk cycles each, round-robin (the
// first of each pass rotating), until each has run P.cycles. A round's
// figure is the p50 of all its cycles; the report gives the median of the
// rounds' p50s. Allocations are runtime.MemStats.Mallocs deltas around each
// chunk (process-wide: they include what the library's background
// goroutines allocate meanwhile), summed over the round's chunks and
// divided by its cycles.
func (r *Results) runUncontended(ctx context.Context, e *env, t *target, withFloor, withLibs bool) {
	var cs []*cycler
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	if withFloor {
		for _, f := range []struct {
			name string
			k    int
		}{{Floor1, 1}, {Floor2, 2}} {
			c, err := floorCycler(e, f.name, f.k)
			if err != nil {
				r.fail(ScFloor, "evalsha", err)
				return
			}
			cs = append(cs, c)
		}
	}
	if withLibs {
		// Each library three times (issue 23): as users call it, on a
		// client with default go-redis options with context.Background();
		// the same with a cancellable context (a request's: fairlock's
		// calls then run on a goroutine each, so that they return as soon
		// as it ends); and as this runner called it before, on a client
		// with ContextTimeoutEnabled with a context that cannot end.
		for _, lib := range r.libs {
			for _, v := range []struct {
				lib  Lib
				name string
				kind ctxKind
			}{{lib, lib.Name, ctxBackground}, {lib, lib.Name + SufCanEnd, ctxCanEnd}, {oldRunner(lib), lib.Name + SufOld, ctxStill}} {
				c, err := libCycler(e, v.lib)
				if err != nil {
					r.fail(ScUncontended, v.name, err)
					continue
				}
				c.name, c.kind = v.name, v.kind
				cs = append(cs, c)
			}
		}
	}
	failed := map[*cycler]bool{}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	still := context.WithoutCancel(ctx)
	ctxOf := func(c *cycler) context.Context {
		switch c.kind {
		case ctxCanEnd:
			return cctx
		case ctxStill:
			return still
		}
		return context.Background()
	}
	fail := func(c *cycler, err error) {
		failed[c] = true
		sc := ScUncontended
		if c.floor {
			sc = ScFloor
		}
		r.fail(sc, c.name, err)
	}
	rotateCyclers(ctx, e, cs, r.P.warmup, r.P.cycles, ctxOf, failed, fail)
	for _, c := range cs {
		if failed[c] || len(c.lat) == 0 {
			continue
		}
		var ur *latRow
		if c.floor {
			ur = row(r.Floor, c.name)
		} else {
			ur = row(r.Uncontended, c.name)
		}
		n := float64(len(c.lat))
		ur.med.add(durPercentile(c.lat, 50))
		ur.p99.add(durPercentile(c.lat, 99))
		ur.allocs.add(float64(c.allocs) / n)
		ur.rtt.add(float64(c.cmds) / n)
		st, err := serverTime(ctx, t, e, min(r.P.cycles, 200), func() error { return c.cycle(ctxOf(c)) })
		if err != nil {
			fail(c, err)
			continue
		}
		ur.server.add(st)
	}
}

// rotateCyclers runs the uncontended rotation over cs: every participant
// first runs warmup cycles (not measured); then they take turns,
// uncontendedChunk cycles each, round-robin (the first of each pass
// rotating), until each has run cycles. It records every cycle's latency
// in c.lat, and the allocations and client-side commands of the measured
// chunks in c.allocs and c.cmds. A participant whose cycle fails is marked
// in failed (through fail) and skipped from then on.
func rotateCyclers(ctx context.Context, e *env, cs []*cycler, warmup, cycles int, ctxOf func(*cycler) context.Context,
	failed map[*cycler]bool, fail func(*cycler, error)) {
	for _, c := range cs {
		for range warmup {
			if err := c.cycle(ctxOf(c)); err != nil {
				fail(c, fmt.Errorf("warm-up: %w", err))
				break
			}
		}
		c.lat = make([]time.Duration, 0, cycles)
	}
	runtime.GC()
	chunk := min(uncontendedChunk, cycles)
	var ms runtime.MemStats
	for pass := 0; ; pass++ {
		active := false
		for i := range cs {
			c := cs[(i+pass)%len(cs)]
			if failed[c] || len(c.lat) >= cycles {
				continue
			}
			if ctx.Err() != nil {
				return
			}
			active = true
			n := min(chunk, cycles-len(c.lat))
			runtime.ReadMemStats(&ms)
			m0, c0 := ms.Mallocs, e.cmds.n.Load()
			for range n {
				t0 := time.Now()
				if err := c.cycle(ctxOf(c)); err != nil {
					fail(c, err)
					break
				}
				c.lat = append(c.lat, time.Since(t0))
			}
			runtime.ReadMemStats(&ms)
			c.allocs += ms.Mallocs - m0
			c.cmds += e.cmds.n.Load() - c0
		}
		if !active {
			break
		}
	}
}

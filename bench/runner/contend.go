package runner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// contendSpec describes one contention run: goroutines spread round-robin
// over clients, all on one lock, each holding it for hold per grant.
type contendSpec struct {
	lock       string
	goroutines int
	clients    int
	hold       time.Duration // 0: just bump a counter
	duration   time.Duration // stop after this long ...
	grants     int           // ... or after this many grants (0: no bound)
	limit      time.Duration // hard cap when grants is set
	// warmGrants grants at the start are not measured (no handoff
	// samples, not in grants, self or the rate's time): the start-up
	// burst of goroutines all calling Lock at once.
	warmGrants int
}

// contendResult is what one contention run measured.
type contendResult struct {
	grants     int
	elapsed    time.Duration
	handoff    []time.Duration // release (before Unlock is called) until the next holder's Lock returned
	other      []time.Duration // the same, only where the next holder is another goroutine
	self       int             // grants to the goroutine that released last
	violations int             // grants while another goroutine held the lock
	errors     int
	firstErr   error
}

// contend runs spec for lib. Handoff latency uses one monotonic clock shared
// in process: the releaser stores the time just before it calls Unlock, and
// the next holder reads it just after its Lock returns.
func contend(ctx context.Context, e *env, lib Lib, spec contendSpec, before func()) (contendResult, error) {
	var res contendResult
	clients := make([]client, spec.clients)
	for i := range clients {
		c, err := lib.open(e)
		if err != nil {
			for _, c := range clients[:i] {
				c.close()
			}
			return res, err
		}
		clients[i] = c
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	mus := make([]mutex, spec.goroutines)
	for i := range mus {
		m, err := clients[i%spec.clients].mutex(spec.lock)
		if err != nil {
			return res, err
		}
		mus[i] = m
	}
	// warm up: every client loads scripts and connects before timing
	for i := 0; i < min(spec.clients, spec.goroutines); i++ {
		if err := mus[i].lock(ctx); err != nil {
			return res, fmt.Errorf("warm-up lock: %w", err)
		}
		if err := mus[i].unlock(ctx); err != nil {
			return res, fmt.Errorf("warm-up unlock: %w", err)
		}
	}

	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	// The waits' context has a deadline (well past the turn; the turn ends
	// by cancelling it), as a request's context would: with the clients'
	// ContextTimeoutEnabled, fairlock's calls on it run inline.
	runCtx, cancel := context.WithDeadline(ctx, time.Now().Add(spec.duration+spec.limit+time.Minute))
	defer cancel()
	var (
		stop       atomic.Bool
		holders    atomic.Int32
		lastRel    atomic.Int64
		lastHolder atomic.Int64
		grants     atomic.Int64
		mu         sync.Mutex
		wg         sync.WaitGroup
		bump       int
		measured   = int64(-1) // now() at the last warm-up grant; under mu
	)
	warm := int64(spec.warmGrants)
	lastHolder.Store(-1)
	fail := func(err error) {
		mu.Lock()
		res.errors++
		if res.firstErr == nil {
			res.firstErr = err
		}
		mu.Unlock()
	}
	if before != nil {
		before()
	}
	start := time.Now()
	if warm == 0 {
		measured = int64(start.Sub(base))
	}
	for g := range mus {
		wg.Add(1)
		go func(g int, m mutex) {
			defer wg.Done()
			for !stop.Load() {
				if err := m.lock(runCtx); err != nil {
					if runCtx.Err() == nil {
						fail(err)
					}
					return
				}
				t := now()
				if holders.Add(1) != 1 {
					mu.Lock()
					res.violations++
					mu.Unlock()
				}
				if !stop.Load() {
					n := grants.Add(1)
					mu.Lock()
					rel := lastRel.Load()
					self := lastHolder.Swap(int64(g)) == int64(g)
					switch {
					case n > warm:
						if rel != 0 {
							res.handoff = append(res.handoff, time.Duration(t-rel))
							if !self {
								res.other = append(res.other, time.Duration(t-rel))
							}
						}
						if self {
							res.self++
						}
					case n == warm:
						measured = t
					}
					mu.Unlock()
					if spec.grants > 0 && n >= int64(spec.grants) {
						stop.Store(true)
					}
				}
				if spec.hold > 0 {
					time.Sleep(spec.hold)
				} else {
					bump++ // the critical section
				}
				holders.Add(-1)
				lastRel.Store(now())
				uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err := m.unlock(uctx)
				ucancel()
				if err != nil {
					fail(err)
					return
				}
			}
		}(g, mus[g])
	}
	limit := spec.duration
	if spec.grants > 0 {
		limit = spec.limit
	}
	timer := time.NewTimer(limit)
	tick := time.NewTicker(time.Millisecond)
wait:
	for {
		select {
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		case <-tick.C:
			if stop.Load() {
				break wait
			}
		}
	}
	tick.Stop()
	stop.Store(true)
	end := now()
	cancel()
	wg.Wait()
	res.grants = int(max(grants.Load()-warm, 0))
	if measured >= 0 {
		res.elapsed = time.Duration(end - measured)
	} else { // the warm-up never ended
		res.elapsed = time.Duration(end - int64(start.Sub(base)))
	}
	_ = bump
	return res, ctx.Err()
}

// merge adds another run's figures to res.
func (res *contendResult) merge(o contendResult) {
	res.grants += o.grants
	res.elapsed += o.elapsed
	res.handoff = append(res.handoff, o.handoff...)
	res.other = append(res.other, o.other...)
	res.self += o.self
	res.violations += o.violations
	res.errors += o.errors
	if res.firstErr == nil {
		res.firstErr = o.firstErr
	}
}

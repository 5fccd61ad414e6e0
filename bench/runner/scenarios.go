package runner

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Floor row names.
const (
	Floor1   = "floor: 1×EVALSHA `return 1`"
	Floor2   = "floor: 2×EVALSHA in sequence"
	FloorPub = "floor: PUBLISH→delivery"
	// FloorChain is the least a pub/sub handoff can cost, measured as the
	// locks' handoffs are: a script that publishes (the unlock), delivery
	// to another goroutine, and its EVALSHA (the acquire).
	FloorChain = "floor: handoff chain (EVALSHA+PUBLISH → delivery → EVALSHA)"
)

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

func row[K comparable, V any](m map[K]*V, k K) *V {
	if v, ok := m[k]; ok {
		return v
	}
	v := new(V)
	m[k] = v
	return v
}

// runFloor measures one EVALSHA round trip, two in sequence, and the time
// from issuing a PUBLISH to its delivery on a subscribed connection.
func (r *Results) runFloor(ctx context.Context, e *env, t *target) {
	n := r.P.floorN
	rdb := e.goredis() // with the same hook as the libraries' clients
	defer rdb.Close()
	s := redis.NewScript("return 1")
	if err := s.Run(ctx, rdb, nil).Err(); err != nil {
		r.fail(ScFloor, "evalsha", err)
		return
	}
	for _, k := range []int{1, 2} {
		lat := make([]time.Duration, 0, n)
		m0 := mallocs()
		for range n {
			t0 := time.Now()
			for range k {
				if err := s.EvalSha(ctx, rdb, nil).Err(); err != nil {
					r.fail(ScFloor, "evalsha", err)
					return
				}
			}
			lat = append(lat, time.Since(t0))
		}
		allocs := float64(mallocs()-m0) / float64(n)
		name := Floor1
		if k == 2 {
			name = Floor2
		}
		fr := row(r.Floor, name)
		fr.med.add(durPercentile(lat, 50))
		fr.p99.add(durPercentile(lat, 99))
		fr.allocs.add(allocs)
		fr.rtt.add(float64(k))
		st, err := serverTime(ctx, t, e, min(n, 200), func() error {
			for range k {
				if err := s.EvalSha(ctx, rdb, nil).Err(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			r.fail(ScFloor, "evalsha", err)
			return
		}
		fr.server.add(st)
	}

	// PUBLISH -> delivery
	sub := redis.NewClient(&redis.Options{Addr: t.addr})
	defer sub.Close()
	ch := "lockbench:floor:" + randomPrefix()
	ps := sub.Subscribe(ctx, ch)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription confirmation
		r.fail(ScFloor, "publish", err)
		return
	}
	got := make(chan time.Time, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			if _, err := ps.ReceiveMessage(rctx); err != nil {
				return
			}
			got <- time.Now()
		}
	}()
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := rdb.Publish(ctx, ch, "0").Err(); err != nil {
			r.fail(ScFloor, "publish", err)
			return
		}
		select {
		case t1 := <-got:
			lat = append(lat, t1.Sub(t0))
		case <-time.After(5 * time.Second):
			r.fail(ScFloor, "publish", fmt.Errorf("no delivery: %w", errTimeout))
			return
		}
	}
	fr := row(r.Floor, FloorPub)
	fr.med.add(durPercentile(lat, 50))
	fr.p99.add(durPercentile(lat, 99))
	fr.allocs.add(math.NaN())
	fr.rtt.add(math.NaN())
	fr.server.add(math.NaN())
	cancel()
	if err := r.floorChain(ctx, e, t); err != nil {
		r.fail(ScFloor, "handoff chain", err)
	}
}

// floorChain measures FloorChain: goroutine A runs a script that publishes;
// goroutine B, subscribed on its own connection, receives the message and
// runs EVALSHA; the time is from just before A's call to just after B's
// reply, on one monotonic clock.
func (r *Results) floorChain(ctx context.Context, e *env, t *target) error {
	n := r.P.floorN
	pub := e.goredis()
	defer pub.Close()
	acq := e.goredis()
	defer acq.Close()
	sub := redis.NewClient(&redis.Options{Addr: t.addr})
	defer sub.Close()
	ch := "lockbench:chain:" + randomPrefix()
	release := redis.NewScript("redis.call('publish', KEYS[1], ARGV[1]) return 1")
	acquire := redis.NewScript("return 1")
	if err := release.Run(ctx, pub, []string{ch + ":none"}, "0").Err(); err != nil {
		return err
	}
	if err := acquire.Run(ctx, acq, nil).Err(); err != nil {
		return err
	}
	ps := sub.Subscribe(ctx, ch)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		return err
	}
	got := make(chan time.Time, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			if _, err := ps.ReceiveMessage(rctx); err != nil {
				return
			}
			if err := acquire.EvalSha(rctx, acq, nil).Err(); err != nil {
				return
			}
			got <- time.Now()
		}
	}()
	keys := []string{ch}
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := release.EvalSha(ctx, pub, keys, "0").Err(); err != nil {
			return err
		}
		select {
		case t1 := <-got:
			lat = append(lat, t1.Sub(t0))
		case <-time.After(5 * time.Second):
			return fmt.Errorf("no handoff: %w", errTimeout)
		}
	}
	fr := row(r.Floor, FloorChain)
	fr.med.add(durPercentile(lat, 50))
	fr.p99.add(durPercentile(lat, 99))
	fr.allocs.add(math.NaN())
	fr.rtt.add(2)
	fr.server.add(math.NaN())
	return nil
}

// serverTime runs cycle k times and returns the server's execution time per
// cycle in microseconds, from INFO commandstats: the usec of the command
// types the clients sent in those cycles (EVALSHA, and SET for redsync). A
// script's inner calls are inside its EVALSHA's time, and are not counted
// again as long as no library sends the same command both ways (none does).
// SLOWLOG at threshold 0 would log the inner calls too, slowing every
// script by its number of calls, so it is not used here. Only on a server
// the runner started (NaN otherwise): another server's commandstats mix in
// other clients.
func serverTime(ctx context.Context, t *target, e *env, k int, cycle func() error) (float64, error) {
	if !t.own {
		return math.NaN(), nil
	}
	e.cmds.startNames()
	before, err := commandStats(ctx, t.admin)
	if err != nil {
		return 0, err
	}
	for range k {
		if err := cycle(); err != nil {
			return 0, err
		}
	}
	after, err := commandStats(ctx, t.admin)
	if err != nil {
		return 0, err
	}
	var total float64
	for name := range e.cmds.stopNames() {
		total += after[name] - before[name]
	}
	return total / float64(k), nil
}

// commandStats is INFO commandstats: usec per command name (lower case).
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]float64, error) {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "usec" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, err
				}
				out[strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))] = f
			}
		}
	}
	return out, nil
}

// runUncontended is scenario 1: one goroutine, Lock+Unlock on one key.
func (r *Results) runUncontended(ctx context.Context, e *env, t *target) {
	for _, lib := range r.libs {
		if err := r.uncontendedOne(ctx, e, t, lib); err != nil {
			r.fail(ScUncontended, lib.Name, err)
		}
	}
}

func (r *Results) uncontendedOne(ctx context.Context, e *env, t *target, lib Lib) error {
	c, err := lib.open(e)
	if err != nil {
		return err
	}
	defer c.close()
	m, err := c.mutex("uncontended")
	if err != nil {
		return err
	}
	for range 20 { // warm up: connections, script cache
		if err := m.lock(ctx); err != nil {
			return err
		}
		if err := m.unlock(ctx); err != nil {
			return err
		}
	}
	n := r.P.cycles
	lat := make([]time.Duration, 0, n)
	runtime.GC()
	c0 := e.cmds.n.Load()
	m0 := mallocs()
	for range n {
		t0 := time.Now()
		if err := m.lock(ctx); err != nil {
			return err
		}
		if err := m.unlock(ctx); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	allocs := float64(mallocs()-m0) / float64(n)
	cmds := float64(e.cmds.n.Load()-c0) / float64(n)
	ur := row(r.Uncontended, lib.Name)
	ur.med.add(durPercentile(lat, 50))
	ur.p99.add(durPercentile(lat, 99))
	ur.allocs.add(allocs)
	ur.rtt.add(cmds)
	st, err := serverTime(ctx, t, e, min(n, 200), func() error {
		if err := m.lock(ctx); err != nil {
			return err
		}
		return m.unlock(ctx)
	})
	if err != nil {
		return err
	}
	ur.server.add(st)
	return nil
}

// runContention is scenario 2: 4 clients x 8 goroutines on one lock.
func (r *Results) runContention(ctx context.Context, e *env) {
	for _, lib := range r.libs {
		cr := row(r.Contention, lib.Name)
		res, err := contend(ctx, e, lib, contendSpec{lock: "contention", goroutines: r.P.contClients * r.P.contPerCl,
			clients: r.P.contClients, duration: r.P.duration}, nil)
		if err != nil {
			r.fail(ScContention, lib.Name, err)
			continue
		}
		cr.add(res)
		if res.firstErr != nil {
			r.fail(ScContention, lib.Name, res.firstErr)
		}
	}
}

func (cr *contRow) add(res contendResult) {
	cr.rate.add(float64(res.grants) / res.elapsed.Seconds())
	cr.med.add(durPercentile(res.handoff, 50))
	cr.p99.add(durPercentile(res.handoff, 99))
	cr.medOther.add(durPercentile(res.other, 50))
	cr.p99Other.add(durPercentile(res.other, 99))
	if res.grants > 0 {
		cr.selfPct.add(100 * float64(res.self) / float64(res.grants))
	}
	cr.violations += res.violations
	cr.errors += res.errors
	if res.firstErr != nil && cr.firstErr == "" {
		cr.firstErr = res.firstErr.Error()
	}
}

// runFairness is scenario 3: contenders arrive one by one while the lock is
// held; then it is released and the grant order is compared with the
// arrival order.
func (r *Results) runFairness(ctx context.Context, e *env, t *target, round int) {
	for _, lib := range r.libs {
		fr := row(r.Fairness, lib.Name)
		inv, arrival, viol, err := r.fairnessOne(ctx, e, t, lib, round)
		fr.arrival = arrival
		fr.violations += viol
		if err != nil {
			fr.errors++
			if fr.firstErr == "" {
				fr.firstErr = err.Error()
			}
			r.fail(ScFairness, lib.Name, err)
			continue
		}
		fr.inv.add(float64(inv))
	}
}

func (r *Results) fairnessOne(ctx context.Context, e *env, t *target, lib Lib, round int) (inv int, arrival string, violations int, err error) {
	const nClients = 4
	clients := make([]client, 0, nClients)
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	for range nClients {
		c, err := lib.open(e)
		if err != nil {
			return 0, "", 0, err
		}
		clients = append(clients, c)
	}
	name := "fairness:" + strconv.Itoa(round)
	holder, err := clients[0].mutex(name)
	if err != nil {
		return 0, "", 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := holder.lock(ctx); err != nil {
		return 0, "", 0, err
	}
	n := r.P.fairN
	grant := make([]int64, n)
	var seq, holders atomic.Int64
	var viol atomic.Int64
	errs := make(chan error, n)
	var wg sync.WaitGroup
	if lib.Queue {
		arrival = "each starts after the previous is in the Redis queue"
	} else {
		arrival = fmt.Sprintf("no queue: %v between arrivals", r.P.arrivalGap)
	}
	for i := range n {
		m, err := clients[i%nClients].mutex(name)
		if err != nil {
			return 0, arrival, 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.lock(ctx); err != nil {
				errs <- fmt.Errorf("contender %d: %w", i, err)
				return
			}
			if holders.Add(1) != 1 {
				viol.Add(1)
			}
			grant[i] = seq.Add(1)
			holders.Add(-1)
			if err := m.unlock(context.WithoutCancel(ctx)); err != nil {
				errs <- fmt.Errorf("contender %d unlock: %w", i, err)
			}
		}()
		if lib.Queue {
			for {
				l, err := lib.queued(ctx, t.admin, e.prefix+name)
				if err != nil {
					return 0, arrival, 0, err
				}
				if l >= int64(i+1) {
					break
				}
				time.Sleep(500 * time.Microsecond)
			}
		} else {
			time.Sleep(r.P.arrivalGap)
		}
	}
	if err := holder.unlock(ctx); err != nil {
		return 0, arrival, 0, err
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, arrival, int(viol.Load()), err
	}
	return inversions(grant), arrival, int(viol.Load()), nil
}

// slowThresholdUs is the SLOWLOG threshold of the drain: scripts faster than
// this are not seen, and the table says "< 100 µs".
const slowThresholdUs = 100

// runDrain is scenario 4 (this project's fair lock only, each engine): n
// real waiters (a fair.Mutex handle and a goroutine each, spread over 4
// clients) queue behind a holder, then the holder releases and each waiter
// takes the lock and releases it at once, in queue order.
func (r *Results) runDrain(ctx context.Context, e *env, t *target, round int) {
	for _, lib := range r.libs {
		if !lib.Fair {
			continue
		}
		for _, n := range r.Cfg.Sizes {
			dr := row(r.Drain, sizeKey{lib.Name, n})
			if err := r.drainOne(ctx, e, t, lib, n, round, dr); err != nil {
				dr.errors++
				if dr.firstErr == "" {
					dr.firstErr = err.Error()
				}
				r.fail(ScDrain, lib.Name+" n="+strconv.Itoa(n), err)
			}
		}
	}
}

// sizeKey names a row of the per-engine tables: an engine and a size.
type sizeKey struct {
	lib string
	n   int
}

func (r *Results) drainOne(ctx context.Context, e *env, t *target, lib Lib, n, round int, dr *drainRow) error {
	const nClients = 4
	ctx, cancel := context.WithTimeout(ctx, r.P.drainTimeout)
	defer cancel()
	clients := make([]client, 0, nClients)
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	for range nClients {
		c, err := lib.open(e)
		if err != nil {
			return err
		}
		clients = append(clients, c)
	}
	name := "drain:" + strconv.Itoa(n) + ":" + strconv.Itoa(round)
	holder, err := clients[0].mutex(name)
	if err != nil {
		return err
	}
	if err := holder.lock(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	var done atomic.Int64
	var lastEnd atomic.Int64
	errs := make(chan error, n)
	base := time.Now()
	t0 := time.Now()
	for i := range n {
		m, err := clients[i%nClients].mutex(name)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.lock(ctx); err != nil {
				errs <- err
				return
			}
			err := m.unlock(context.WithoutCancel(ctx))
			lastEnd.Store(int64(time.Since(base)))
			done.Add(1)
			if err != nil {
				errs <- err
			}
		}()
	}
	for {
		l, err := lib.queued(ctx, t.admin, e.prefix+name)
		if err != nil {
			return err
		}
		if l >= int64(n) {
			break
		}
		select {
		case err := <-errs:
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
	enqueue := time.Since(t0)

	// The slowest script, server-side, from SLOWLOG. Not at threshold 0:
	// Redis 7 logs a script's inner calls too, which would slow down
	// exactly the scripts with many calls; at slowThresholdUs no inner call
	// of a healthy server is logged. The log is read and emptied every
	// 20 ms, so that it stays short.
	slowlog := t.own
	slowServer := math.NaN()
	var stopPoll func() error
	if slowlog {
		for _, kv := range [][2]string{{"slowlog-log-slower-than", strconv.Itoa(slowThresholdUs)}, {"slowlog-max-len", "100000"}} {
			if err := t.admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
				return err
			}
		}
		defer func() {
			_ = t.admin.ConfigSet(context.WithoutCancel(ctx), "slowlog-log-slower-than", "10000").Err()
			_ = t.admin.ConfigSet(context.WithoutCancel(ctx), "slowlog-max-len", "128").Err()
			_ = t.admin.Do(context.WithoutCancel(ctx), "slowlog", "reset").Err()
		}()
		if err := t.admin.Do(ctx, "slowlog", "reset").Err(); err != nil {
			return err
		}
		slowServer = 0
		// GET and RESET in one MULTI, so that no entry falls between
		// them and the log never holds more than one poll's worth.
		poll := func() error {
			var get *redis.Cmd
			_, err := t.admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
				get = p.Do(ctx, "slowlog", "get", -1)
				p.Do(ctx, "slowlog", "reset")
				return nil
			})
			if err != nil {
				return err
			}
			entries, err := get.Slice()
			if err != nil {
				return err
			}
			for _, en := range entries {
				f, ok := en.([]any)
				if !ok || len(f) < 4 {
					continue
				}
				us, _ := f[2].(int64)
				if args, _ := f[3].([]any); len(args) > 0 {
					if c, _ := args[0].(string); strings.EqualFold(c, "evalsha") || strings.EqualFold(c, "eval") {
						slowServer = max(slowServer, float64(us))
					}
				}
			}
			return nil
		}
		quit := make(chan struct{})
		polled := make(chan error, 1)
		go func() {
			tk := time.NewTicker(20 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-quit:
					polled <- poll()
					return
				case <-tk.C:
					if err := poll(); err != nil {
						polled <- err
						return
					}
				}
			}
		}()
		stopPoll = func() error { close(quit); return <-polled }
	}
	cpu0, err := serverCPU(ctx, t.admin)
	if err != nil {
		return err
	}
	e.cmds.resetMaxScript()
	e.cmds.timeScript.Store(true)
	defer e.cmds.timeScript.Store(false)
	c0 := e.cmds.n.Load()
	start := int64(time.Since(base))
	if err := holder.unlock(ctx); err != nil {
		return err
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	e.cmds.timeScript.Store(false)
	cpu1, err := serverCPU(ctx, t.admin)
	if err != nil {
		return err
	}
	if stopPoll != nil {
		if err := stopPoll(); err != nil {
			return err
		}
	}
	drain := time.Duration(lastEnd.Load() - start)
	cmds := float64(e.cmds.n.Load()-c0) / float64(n)
	slowClient := e.cmds.resetMaxScript()
	dr.cpu.add((cpu1 - cpu0) * 1e6 / float64(n))
	dr.enqueue.add(enqueue.Seconds())
	dr.drain.add(drain.Seconds())
	dr.perHandoff.add(float64(drain) / float64(n) / float64(time.Microsecond))
	dr.slowServer.add(slowServer)
	dr.slowClient.add(float64(slowClient) / float64(time.Microsecond))
	dr.cmds.add(cmds)
	return nil
}

// runFairHandoff measures the fair lock's handoff latency with k waiters
// queued at each release: k+1 goroutines cycle Lock/Unlock, each queueing
// again at the tail after its release (issue 3's figure).
func (r *Results) runFairHandoff(ctx context.Context, e *env) {
	for _, lib := range r.libs {
		if !lib.Fair {
			continue
		}
		for _, k := range r.P.handoffK {
			hr := row(r.FairHandoff, sizeKey{lib.Name, k})
			res, err := contend(ctx, e, lib, contendSpec{lock: "handoff:" + strconv.Itoa(k), goroutines: k + 1,
				clients: min(4, k+1), grants: r.P.handoffN, limit: 60 * time.Second}, nil)
			if err != nil {
				r.fail(ScFairHandoff, fmt.Sprintf("%s k=%d", lib.Name, k), err)
				continue
			}
			hr.add(res)
			if res.firstErr != nil {
				r.fail(ScFairHandoff, fmt.Sprintf("%s k=%d", lib.Name, k), res.firstErr)
			}
		}
	}
}

// runCPU is scenario 5: Redis server CPU (INFO cpu, user+sys) per handoff
// while a queue of waiters drains: the waiters (over 4 clients) arrive while
// a holder has the lock; the holder releases, and each waiter takes the lock
// once, holds it for cpuHold and leaves. CPU and commands are counted from
// the holder's release to the last waiter's release, so what a library
// spends on retries and wake-ups while others hold the lock is charged to
// the handoffs.
func (r *Results) runCPU(ctx context.Context, e *env, t *target, round int) {
	for _, lib := range r.libs {
		cr := row(r.CPU, lib.Name)
		if err := r.cpuOne(ctx, e, t, lib, round, cr); err != nil {
			cr.errors++
			if cr.firstErr == "" {
				cr.firstErr = err.Error()
			}
			r.fail(ScCPU, lib.Name, err)
		}
	}
}

func (r *Results) cpuOne(ctx context.Context, e *env, t *target, lib Lib, round int, cr *cpuRow) error {
	const nClients = 4
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	clients := make([]client, 0, nClients)
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	for range nClients {
		c, err := lib.open(e)
		if err != nil {
			return err
		}
		clients = append(clients, c)
	}
	name := "cpu:" + strconv.Itoa(round)
	// warm up every client (connections, scripts) on another key
	for _, c := range clients {
		m, err := c.mutex(name + ":warm")
		if err != nil {
			return err
		}
		if err := m.lock(ctx); err != nil {
			return err
		}
		if err := m.unlock(ctx); err != nil {
			return err
		}
	}
	// The server's idle CPU (event loop, cron, the connected clients),
	// measured now, so it can be taken out of the drain's figure.
	idle0, err := serverCPU(ctx, t.admin)
	if err != nil {
		return err
	}
	idleStart := time.Now()
	time.Sleep(500 * time.Millisecond)
	idle1, err := serverCPU(ctx, t.admin)
	if err != nil {
		return err
	}
	idleRate := (idle1 - idle0) / time.Since(idleStart).Seconds() // CPU seconds per second
	holder, err := clients[0].mutex(name)
	if err != nil {
		return err
	}
	if err := holder.lock(ctx); err != nil {
		return err
	}
	n := r.P.cpuWaiters
	var wg sync.WaitGroup
	var holders, viol, lastEnd atomic.Int64
	errs := make(chan error, n)
	base := time.Now()
	for i := range n {
		m, err := clients[i%nClients].mutex(name)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.lock(ctx); err != nil {
				errs <- err
				return
			}
			if holders.Add(1) != 1 {
				viol.Add(1)
			}
			time.Sleep(r.P.cpuHold)
			holders.Add(-1)
			err := m.unlock(context.WithoutCancel(ctx))
			lastEnd.Store(int64(time.Since(base)))
			if err != nil {
				errs <- err
			}
		}()
	}
	// Let every waiter make its first attempt and settle into waiting.
	if lib.Queue {
		for {
			l, err := lib.queued(ctx, t.admin, e.prefix+name)
			if err != nil {
				return err
			}
			if l >= int64(n) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	time.Sleep(300 * time.Millisecond)
	cpu0, err := serverCPU(ctx, t.admin)
	if err != nil {
		return err
	}
	c0 := e.cmds.n.Load()
	cpuStart := time.Now()
	start := int64(time.Since(base))
	if err := holder.unlock(ctx); err != nil {
		return err
	}
	wg.Wait()
	cpu1, err := serverCPU(ctx, t.admin)
	cpuWindow := time.Since(cpuStart)
	if err != nil {
		return err
	}
	cmds := e.cmds.n.Load() - c0
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	elapsed := time.Duration(lastEnd.Load() - start)
	cr.cpuPer.add((cpu1 - cpu0) * 1e6 / float64(n))
	cr.cpuNet.add((cpu1 - cpu0 - idleRate*cpuWindow.Seconds()) * 1e6 / float64(n))
	cr.cmdsPer.add(float64(cmds) / float64(n))
	cr.perHandoff.add(float64(elapsed)/float64(n)/float64(time.Microsecond) - float64(r.P.cpuHold)/float64(time.Microsecond))
	cr.violations += int(viol.Load())
	return nil
}

// serverCPU is used_cpu_sys + used_cpu_user from INFO cpu, in seconds.
func serverCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	s, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	var seen int
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			total += f
			seen++
		}
	}
	if seen != 2 {
		return 0, fmt.Errorf("INFO cpu: used_cpu_sys/used_cpu_user not found")
	}
	return total, nil
}

// machine describes where the run happens.
func machine(ctx context.Context, t *target) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	ver := "unknown"
	if s, err := t.admin.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(s, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == "redis_version" {
				ver = v
			}
		}
	}
	where := "started by the runner on " + t.addr
	if !t.own {
		where = "external at " + t.addr
	}
	return fmt.Sprintf("%d CPUs (runtime.NumCPU), %s; redis-server %s (%s); %s %s/%s",
		runtime.NumCPU(), cpu, ver, where, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

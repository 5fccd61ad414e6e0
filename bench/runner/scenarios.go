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
	// locks' handoffs are: an unlock-like script that deletes the key and
	// publishes, delivery to a subscriber on another connection, and that
	// subscriber's EVALSHA of an acquire script (SET NX PX); see chainRig.
	FloorChain = "floor: handoff chain (EVALSHA unlock+PUBLISH → delivery → EVALSHA acquire)"
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

// runFloor measures the time from issuing a PUBLISH to its delivery on a
// subscribed connection, and the handoff chain floor when the contention
// scenario (which measures it interleaved with the libraries) does not run.
// The EVALSHA rows are measured in the uncontended rotation.
func (r *Results) runFloor(ctx context.Context, e *env, t *target) {
	n := r.P.floorN
	rdb := e.goredis()
	defer rdb.Close()
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
	if r.Cfg.wants(ScContention) {
		return
	}
	rig, err := openChain(ctx, e, t)
	if err != nil {
		r.fail(ScFloor, "handoff chain", err)
		return
	}
	defer rig.close()
	lat, err = rig.measure(ctx, n)
	if err != nil {
		r.fail(ScFloor, "handoff chain", err)
		return
	}
	r.addChain(lat)
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
		total += after[name].usec - before[name].usec
	}
	return total / float64(k), nil
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct{ calls, usec float64 }

// commandStats is INFO commandstats per command name (lower case). Since
// Redis 7 the commands a script calls are counted under their own names
// too (and their time is also inside the script's).
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]cmdStat, error) {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || (k != "usec" && k != "calls") {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, err
			}
			if k == "usec" {
				st.usec = f
			} else {
				st.calls = f
			}
		}
		out[strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))] = st
	}
	return out, nil
}

// statsDelta is after - before, per command, leaving out the runner's own
// INFO calls.
func statsDelta(before, after map[string]cmdStat) map[string]cmdStat {
	d := map[string]cmdStat{}
	for name, a := range after {
		if name == "info" {
			continue
		}
		b := before[name]
		if a.calls != b.calls || a.usec != b.usec {
			d[name] = cmdStat{a.calls - b.calls, a.usec - b.usec}
		}
	}
	return d
}

// runContention is scenario 2: 4 clients x 8 goroutines on one lock. A
// round is P.contChunks passes; in each pass every library (the first
// rotating) runs P.duration/P.contChunks, and before each library's turn
// (and once at the end) the handoff chain floor takes P.chainChunk samples,
// so that the floor is measured interleaved with the handoffs it is
// compared with.
func (r *Results) runContention(ctx context.Context, e *env, t *target) {
	rig, err := openChain(ctx, e, t)
	if err != nil {
		r.fail(ScContention, "handoff chain floor", err)
	}
	var chain []time.Duration
	chainChunk := func() {
		if rig == nil {
			return
		}
		lat, err := rig.measure(ctx, r.P.chainChunk)
		chain = append(chain, lat...)
		if err != nil {
			r.fail(ScContention, "handoff chain floor", err)
			rig.close()
			rig = nil
		}
	}
	merged := map[string]*contendResult{}
	failed := map[string]bool{}
	// Each library twice (issue 23): as users call it (default go-redis
	// options; the waits get a context with a deadline, as a request's,
	// and fairlock's calls on it run on a goroutine each), and as this
	// runner called it before (ContextTimeoutEnabled: the same deadline is
	// enforced by the client, and fairlock's calls run inline).
	var parts []Lib
	for _, lib := range r.libs {
		parts = append(parts, lib, oldRunner(lib))
	}
	for pass := range r.P.contChunks {
		for i := range parts {
			lib := parts[(i+pass)%len(parts)]
			if failed[lib.Name] || ctx.Err() != nil {
				continue
			}
			chainChunk()
			res, err := contend(ctx, e, lib, contendSpec{lock: "contention", goroutines: r.P.contClients * r.P.contPerCl,
				clients: r.P.contClients, duration: r.P.duration / time.Duration(r.P.contChunks), warmGrants: r.P.contClients * r.P.contPerCl}, nil)
			if err != nil {
				r.fail(ScContention, lib.Name, err)
				failed[lib.Name] = true
				continue
			}
			if res.firstErr != nil && (merged[lib.Name] == nil || merged[lib.Name].firstErr == nil) {
				r.fail(ScContention, lib.Name, res.firstErr)
			}
			if m := merged[lib.Name]; m != nil {
				m.merge(res)
			} else {
				merged[lib.Name] = &res
			}
		}
	}
	chainChunk()
	if rig != nil {
		rig.close()
	}
	r.addChain(chain)
	for _, lib := range parts {
		if m := merged[lib.Name]; m != nil && !failed[lib.Name] {
			row(r.Contention, lib.Name).add(*m)
		}
	}
}

func (cr *contRow) add(res contendResult) {
	cr.rate.add(float64(res.grants) / res.elapsed.Seconds())
	cr.med.add(durPercentile(res.handoff, 50))
	cr.p99.add(durPercentile(res.handoff, 99))
	cr.medOther.add(durPercentile(res.other, 50))
	cr.p99Other.add(durPercentile(res.other, 99))
	cr.nOther.add(float64(len(res.other)))
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
	// The server's idle CPU and commands (event loop, cron, the connected
	// clients' keep-alives), measured now, so they can be taken out of
	// the drain's figures.
	idle0, err := serverUsage(ctx, t.admin)
	if err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	idle1, err := serverUsage(ctx, t.admin)
	if err != nil {
		return err
	}
	idleDur := idle1.at.Sub(idle0.at).Seconds()
	idleRate := (idle1.cpu - idle0.cpu) / idleDur // CPU seconds per second
	idleCmds := statsDelta(idle0.cmds, idle1.cmds)
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
	u0, err := serverUsage(ctx, t.admin)
	if err != nil {
		return err
	}
	e.cmds.startNames()
	c0 := e.cmds.n.Load()
	start := int64(time.Since(base))
	if err := holder.unlock(ctx); err != nil {
		_ = e.cmds.stopNames()
		return err
	}
	wg.Wait()
	u1, err := serverUsage(ctx, t.admin)
	sent := e.cmds.stopNames()
	if err != nil {
		return err
	}
	window := u1.at.Sub(u0.at).Seconds()
	cmds := e.cmds.n.Load() - c0
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	elapsed := time.Duration(lastEnd.Load() - start)
	fn := float64(n)
	cr.cpuPer.add((u1.cpu - u0.cpu) * 1e6 / fn)
	cr.cpuNet.add((u1.cpu - u0.cpu - idleRate*window) * 1e6 / fn)
	cr.cmdsPer.add(float64(cmds) / fn)
	// Redis commands per handoff, net of idle, from commandstats calls:
	// every command the server ran, those inside scripts included.
	var calls, usec float64
	per := map[string]float64{}
	for name, d := range statsDelta(u0.cmds, u1.cmds) {
		c := d.calls - idleCmds[name].calls/idleDur*window
		per[name] = c / fn
		calls += c
		if sent[name] { // top-level commands only: a script's inner calls are inside its time
			usec += d.usec - idleCmds[name].usec/idleDur*window
		}
	}
	if cr.perCmd == nil {
		cr.perCmd = map[string]*summary{}
	}
	for name := range per {
		if _, ok := cr.perCmd[name]; !ok { // 0 in the earlier rounds
			cr.perCmd[name] = &summary{vals: make([]float64, len(cr.redisCmds.vals))}
		}
	}
	for name, s := range cr.perCmd {
		s.add(per[name]) // 0 when this round did not run it
	}
	cr.redisCmds.add(calls / fn)
	cr.cmdUsec.add(usec / fn)
	cr.perHandoff.add(float64(elapsed)/float64(n)/float64(time.Microsecond) - float64(r.P.cpuHold)/float64(time.Microsecond))
	cr.violations += int(viol.Load())
	return nil
}

// usage is the server's CPU (INFO cpu) and commandstats at one moment.
type usage struct {
	at   time.Time
	cpu  float64
	cmds map[string]cmdStat
}

func serverUsage(ctx context.Context, rdb *redis.Client) (usage, error) {
	var u usage
	var err error
	if u.cpu, err = serverCPU(ctx, rdb); err != nil {
		return u, err
	}
	if u.cmds, err = commandStats(ctx, rdb); err != nil {
		return u, err
	}
	u.at = time.Now()
	return u, nil
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

package faulttests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/rwlock"
)

// The read-write lock under faults: several clients, each with goroutines
// that take read and write holds (Lock, LockWithLease, TryLock,
// TryLockFor, re-entry, an explicit lease left to run out, a rare
// ForceUnlock) on one read-write lock, while faults fire one after another:
// stalls longer than go-redis's read timeout (and than the lease), latency,
// connection resets, the server stopped (SIGSTOP), pub/sub connections
// killed. CheckRW then requires that no writer's believed-valid window
// overlapped another owner's, read or write; the run must also show
// readers sharing and writers holding, or the check proves nothing.
//
//	FAULT_SEED       replay a run
//	FAULT_RW_BROKEN  run with a broken script (see rwBroken) to see the check fail

// rwBroken are deliberately broken scripts the test can run with.
var rwBroken = map[string]struct{ file, old, new string }{
	// a writer takes a read-locked lock
	"writer-beside-readers": {wire.FileRWWriteAcquire, "if mode == false then", "if mode == false or mode == 'read' then"},
	// Redisson's read unlock reply: 0 (still held) while other owners
	// hold, so a reader whose last hold is gone believes it still holds
	"redisson-read-reply": {wire.FileRWReadUnlock, "local mine = 1\n", "local mine = 0\n"},
}

// rwHandles makes a read-write handle of c on lock id: its two halves as
// Handles of kind RWLock.
func rwHandles(t *testing.T, c *Client, id string) (r, w *Handle) {
	e := c.env
	name := e.LockName(id)
	rw, err := rwlock.New(c.C, name)
	if err != nil {
		t.Fatal(err)
	}
	r = &Handle{Client: c, Lock: name, Kind: RWLock, L: rw.ReadLock()}
	w = &Handle{Client: c, Lock: name, Kind: RWLock, L: rw.WriteLock()}
	c.hmu.Lock()
	c.handles = append(c.handles, r, w)
	c.hmu.Unlock()
	e.H.Update(func() { e.H.Locks[name] = RWLock })
	e.mu.Lock()
	e.owners[r.L.Owner()], e.owners[w.L.Owner()] = r, w
	e.mu.Unlock()
	return r, w
}

func TestRWFaults(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	seed := seedFromEnv(t)
	const dur = 20 * time.Second
	replay := fmt.Sprintf("FAULT_SEED=%d go test ./faulttests/ -run TestRWFaults -v", seed)
	t.Logf("seed %d; replay: %s", seed, replay)
	e := NewSingle(t)
	var scripts *wire.Scripts
	if name := os.Getenv("FAULT_RW_BROKEN"); name != "" {
		v, ok := rwBroken[name]
		if !ok {
			t.Fatalf("FAULT_RW_BROKEN=%q: no such variant", name)
		}
		if strings.Count(wire.Source(v.file), v.old) != 1 {
			t.Fatalf("variant %s does not apply", name)
		}
		scripts = wire.Edit(func(f, src string) string {
			if f != v.file {
				return src
			}
			return strings.Replace(src, v.old, v.new, 1)
		})
		t.Logf("running with the broken variant %s", name)
	}
	w := Workload{Seed: seed, Clients: 4, Workers: 2, MaxHold: 1200 * time.Millisecond, MaxCtx: 6 * time.Second}
	r := &run{e: e, w: w, stop: make(chan struct{}), final: make(chan struct{})}
	var opts []fairlock.Option
	if scripts != nil {
		opts = append(opts, core.WithScripts(scripts))
	}
	for i := 0; i < w.Clients; i++ {
		c := e.NewClient(opts...)
		for k := 0; k < w.Workers; k++ {
			rh, wh := rwHandles(t, c, "RW")
			rng := rand.New(rand.NewPCG(seed, uint64(i*1000+k)))
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				for !r.stopped(c) {
					h := rh
					if rng.Float64() < 0.5 {
						h = wh
					}
					r.op(h, rng)
					// pauses, so that the readers leave the lock free at
					// times and the writers get in
					r.sleep(c, between(rng, 0, 1500*time.Millisecond))
				}
			}()
		}
	}

	rng := rand.New(rand.NewPCG(seed, 1<<40))
	kinds := []FaultKind{FStall, FReset, FSigStop, FPubSubKill, FLatency}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	start := time.Now()
	for _, k := range kinds {
		time.Sleep(between(rng, 300*time.Millisecond, 1200*time.Millisecond))
		e.fire(k, rng, 4, e.LockName("RW"))
	}
	if rest := dur - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	r.Finish()

	shared, writes := rwShared(e.H)
	t.Logf("%s; %d pairs of readers shared the lock, %d write holds", Summary(e.H), shared, writes)
	if shared == 0 || writes == 0 {
		t.Errorf("the run proves nothing: %d reader pairs shared the lock, %d write holds", shared, writes)
	}
	fired := map[FaultKind]bool{}
	for _, f := range e.H.Faults {
		fired[f.Kind] = true
	}
	for _, k := range kinds {
		if !fired[k] {
			t.Errorf("fault %s never fired", k)
		}
	}
	reportRW(t, e.H, replay)
}

// reportRW is Report with CheckRWRun.
func reportRW(t *testing.T, h *History, replay string) {
	t.Helper()
	vs := CheckRWRun(h)
	if path := os.Getenv("FAULT_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(h.Timeline("", 0, Never, 0)), 0o644); err != nil {
			t.Logf("FAULT_HISTORY: %v", err)
		} else {
			t.Logf("the whole history is in %s", path)
		}
	}
	if len(vs) == 0 {
		return
	}
	count := map[string]int{}
	for _, v := range vs {
		count[v.Check]++
	}
	var kinds []string
	for k, n := range count {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(kinds)
	first := vs[0]
	var b strings.Builder
	fmt.Fprintf(&b, "%d violations (%s)\nreplay: %s\n\nfirst violation:\n  %s\n\nhistory of %s around it:\n%s",
		len(vs), strings.Join(kinds, ", "), replay, first, lockOr(first.Lock), h.Timeline(first.Lock, first.At-6*time.Second, first.At+2*time.Second, 50))
	for i, v := range vs {
		if i == 10 {
			break
		}
		fmt.Fprintf(&b, "\n  %s", v)
	}
	t.Error(b.String())
}

// checkRWScript is Script.Check with CheckRWRun.
func checkRWScript(t *testing.T, s *Script, replay string) {
	t.Helper()
	s.bg.Wait()
	for _, c := range s.e.Clients() {
		if !c.closed.Load() {
			c.Close()
		}
	}
	time.Sleep(DoneTolerance)
	close(s.final)
	s.watch.Wait()
	for _, v := range s.e.CheckLeftovers() {
		s.e.H.Problem(v)
	}
	reportRW(t, s.e.H, replay)
}

// A read or write Lock whose request is held back longer than go-redis's
// read timeout fails, and its request reaches Redis late, after the
// application tried again and got the lock: the late copy must not add a
// hold (the acquisition latch; the give-back through the half's own unlock
// when a copy got in first). After its one Unlock the owner holds nothing,
// and a writer of another client gets the lock.
func TestRWStallDuringLock(t *testing.T) {
	redistest.Long(t)
	t.Parallel()
	for _, write := range []bool{false, true} {
		name := map[bool]string{false: "read", true: "write"}[write]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := NewSingle(t)
			s := e.Script()
			a, b := e.NewClient(), e.NewClient()
			ra, wa := rwHandles(t, a, "RW")
			_, wb := rwHandles(t, b, "RW")
			ha := ra
			if write {
				ha = wa
			}
			warm(t, ha)
			undo := a.Net.Stall()
			i := e.record(FStall, a, "(until the Lock under it has returned)")
			err := s.Lock(ha, 2*ReadTimeout)
			t.Logf("Lock under the stall: %v", err)
			time.Sleep(time.Second)
			undo() // the held-back request reaches Redis now
			e.H.EndFault(i)
			if err == nil {
				t.Fatalf("Lock succeeded under a stall")
			}
			time.Sleep(300 * time.Millisecond)
			if err := s.Lock(ha, 5*time.Second); err != nil {
				t.Fatalf("Lock after the stall: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
			if err := s.Unlock(ha, 5*time.Second); err != nil {
				t.Errorf("Unlock: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
			if n := holdCount(t, ha); n != 0 {
				t.Errorf("after its one successful Lock and its Unlock, the %s half still holds %d hold(s) in Redis: the failed Lock under the stall counted too", name, n)
			}
			if err := s.Lock(wb, 20*time.Second); err == nil {
				_ = s.Unlock(wb, 5*time.Second)
			} else {
				t.Errorf("the other client's writer could not get the lock: %v", err)
			}
			checkRWScript(t, s, "go test ./faulttests/ -run '^TestRWStallDuringLock$' -v")
		})
	}
}

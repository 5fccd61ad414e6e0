package propertytests

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// A broken variant is the real scripts with one deliberate bug. Each must
// make its machine fail: that is what shows the machines can fail at all.
type brokenVariant struct {
	name    string
	machine machine
	file    string // the script to edit (fair_common.lua is inside every fair_*.lua)
	old     string // text to replace, exactly once (every occurrence, when all)
	new     string
	all     bool        // old occurs in both the fast and the full path: break both
	more    [][2]string // further edits, old -> new in every script (of wire.Files) that has old
}

var brokenVariants = []brokenVariant{
	{
		name: "no deadline shifting on acquire", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "    redis.call('lpop', queue)\n    q_drop_note(owner)\n    q_shift(wait, nil)",
		new: "    redis.call('lpop', queue)\n    q_drop_note(owner)",
	},
	{
		name: "no deadline shifting on acquire (tryLock)", machine: fairMachine, file: wire.FileFairTryLock,
		old: "    redis.call('lpop', queue)\n    q_drop_note(owner)\n    q_shift(wait, nil)",
		new: "    redis.call('lpop', queue)\n    q_drop_note(owner)",
	},
	{
		name: "notify every waiter", machine: fairMachine, file: wire.FileFairUnlock,
		old: "redis.call(PUBCMD, CHANNEL .. ':' .. owner, MESSAGE)",
		new: "for _, w in ipairs(redis.call('lrange', queue, 0, -1)) do redis.call(PUBCMD, CHANNEL .. ':' .. w, MESSAGE) end",
	},
	{
		// issue 33: a Java client decodes every message on its channel as a number
		name: "notes to Java clients' waiters too", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "return string.find(owner, '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-8%x%x%x%-') ~= nil",
		new: "return true",
	},
	{
		// issue 33: the waiter behind the head of a free lock is told to
		// sleep past the head's grace, when it must prune a dead head
		name: "a free lock's note lets the second sleep past the head's grace", machine: fairMachine, file: wire.FileFairUnlock,
		old: "note(owner, left)",
		new: "note(owner, left + grace)",
	},
	{
		// issue 33: the Redisson engine's release grants the lock only to
		// this library's heads; a Java client reads only "0"
		name: "a release grants the lock to a Java client's head", machine: fairMachine, file: wire.FileFairUnlock,
		old:  "    if not q_noted(owner) then\n        return nil\n    end\n    return grant_note_read(redis.call('hget', notes, owner))",
		new:  "    return grant_note_read(redis.call('hget', notes, owner))",
		more: [][2]string{{"    if not q_noted(owner) then\n        return\n    end\n    if not note then", "    if not note then"}},
	},
	{
		// issue 33: a pruned waiter's handoff note must go with it
		name: "a pruned head's handoff note is kept", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "        redis.call('zrem', timeouts, head)\n        q_drop_note(head)\n",
		new: "        redis.call('zrem', timeouts, head)\n",
	},
	{
		name: "pruned head left in the queue", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "local head = redis.call('lpop', queue)",
		new: "local head = redis.call('lindex', queue, 0)",
	},
	{
		name: "acquireFailed skips the leaver's successor", machine: fairMachine, file: wire.FileFairAcquireFailed,
		old: "for _, waiter in ipairs(waiters) do\n        if behind then",
		new: "for i, waiter in ipairs(waiters) do\n        if behind and waiters[i - 1] ~= owner then",
	},
	{
		name: "acquireFailed also shifts the waiter ahead", machine: fairMachine, file: wire.FileFairAcquireFailed,
		old: "for _, waiter in ipairs(waiters) do\n        if behind then",
		new: "for i, waiter in ipairs(waiters) do\n        if behind or waiters[i + 1] == owner then",
	},
	{
		name: "new waiter's deadline one slot short", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "q_append(owner, ttl + wait + now,",
		new: "q_append(owner, ttl + now,",
	},
	// The liveness rules (docs/design.md, "Liveness bound").
	{
		name: "no wake-up for the new head (take, prune, give-up)", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "(freed or started or head ~= head0)",
		new: "(freed or started)",
	},
	{
		name: "a release does not wake the waiter behind the head", machine: fairMachine, file: wire.FileFairUnlock,
		old: "if second and second ~= caller and (freed or started or second ~= second0) then",
		new: "if second and second ~= caller and (started or second ~= second0) then",
	},
	{
		name: "a release does not wake reentrant waiters", machine: fairMachine, file: wire.FileFairUnlock,
		old: "redis.call(ARGV[5], KEYS[4], ARGV[1])",
		new: "", all: true, // the fast release's and the full path's
	},
	{
		name: "a re-entry that cuts the lease short wakes nobody", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "return true, pttl == -1 or tonumber(lease) < pttl",
		new: "return true, false",
	},
	{
		name: "Redisson's prune: the caller prunes itself", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "while head and head ~= caller do",
		new: "while head do",
	},
	{
		name: "the grace lowers the head's deadline (a score Redisson reads)", machine: fairMachine, file: wire.FileFairUnlock,
		old: "redis.call('set', GRACE, value, 'px', grace + GRACE_MARGIN)",
		new: "redis.call('set', GRACE, value, 'px', grace + GRACE_MARGIN)\n    redis.call('zincrby', timeouts, -1, head)",
	},
	// Issue 19: a grace that ran out does not prune by itself; the head gets
	// a second grace, started (and the head woken) by whoever finds the
	// first run out.
	{
		name: "a first grace that ran out prunes the head (no second grace)", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "and not (graced == head and left <= 0 and (second or grace <= 0)) then",
		new: "and not (graced == head and left <= 0) then",
	},
	{
		name: "the head's second grace starts without waking it", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "grace_start(head, grace, graced ~= nil)\n            started = true",
		new: "grace_start(head, grace, graced ~= nil)\n            started = graced == nil",
	},
	{
		name: "a waiter behind a free lock sleeps until the head's deadline (grace ignored)", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "if graced == head and left < wait then",
		new: "if false then",
	},
	{
		name: "every queued waiter gets the head's grace poll", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "return sleep_held(pttl, grace, second == owner)",
		new: "return sleep_held(pttl, grace, true)",
	},
	// Issue 23's fast paths: each skips work only in states where the
	// full path would find nothing to do. (A release that keeps a grace key
	// left with no queue differs only in a state no machine builds, a Java
	// client's take: TestFastPathsMatchFullPathsCatchesAStaleGrace.)
	{
		name: "fast path: a free lock is taken while a queue exists", machine: fairMachine, file: wire.FileFairTryLockWait,
		old: "FAST_FREE and redis.call('exists', KEYS[2], KEYS[3], KEYS[4], KEYS[8]) == 0",
		new: "FAST_FREE",
	},
	{
		name: "fast path: a take reuses the last fencing token", machine: fairMachine, file: wire.FileFairTryLock,
		old: "local token = fair_token(KEYS[5], true)",
		new: "local token = fair_token(KEYS[5], false)",
	},
	{
		name: "fast path: the last hold's release deletes a re-entered lock", machine: reentrantMachine, file: wire.FileUnlock,
		old: "if count ~= '1' then",
		new: "if count == '0' then",
	},
	{
		name: "unlock latch not stored on release", machine: reentrantMachine, file: wire.FileUnlock,
		old: "redis.call('set', KEYS[3], '1', 'px', ARGV[5])",
		new: "",
	},
	{
		name: "re-entry does not reset the lease", machine: reentrantMachine, file: wire.FileAcquire,
		old: "redis.call('pexpire', KEYS[1], ARGV[1])",
		new: "if free then redis.call('pexpire', KEYS[1], ARGV[1]) end",
	},
}

func (v brokenVariant) scripts(t *testing.T) *wire.Scripts {
	src := wire.Source(v.file)
	if n := strings.Count(src, v.old); n != 1 && (!v.all || n == 0) {
		t.Fatalf("%s: %q occurs %d times in %s", v.name, v.old, n, v.file)
	}
	for _, e := range v.more {
		n := 0
		for _, f := range wire.Files {
			n += strings.Count(wire.Source(f), e[0])
		}
		if n == 0 {
			t.Fatalf("%s: %q is in no script", v.name, e[0])
		}
	}
	return wire.Edit(func(file, src string) string {
		for _, e := range v.more {
			src = strings.ReplaceAll(src, e[0], e[1])
		}
		if file != v.file {
			return src
		}
		if v.all {
			return strings.ReplaceAll(src, v.old, v.new)
		}
		return strings.Replace(src, v.old, v.new, 1)
	})
}

// TestBrokenVariantsFail runs each broken variant's machine on miniredis and
// on redis-server and requires rapid to report a failure.
func TestBrokenVariantsFail(t *testing.T) {
	redistest.Long(t)
	for _, v := range brokenVariants {
		t.Run(v.name, func(t *testing.T) {
			scripts := v.scripts(t)
			requireCaught(t, v.name, func(b backend, c *counts) func(*rapid.T) { return v.machine(b, scripts, c) })
		})
	}
}

// requireCaught runs machine on miniredis and on redis-server, each in a
// subtest, and requires rapid to report a failure on both: the test of a
// deliberately broken variant (name). Shrinking is not what it is about,
// and no fail file is written for an expected failure.
func requireCaught(t *testing.T, name string, machine func(b backend, c *counts) func(*rapid.T)) {
	t.Helper()
	setFlag(t, "rapid.shrinktime", "200ms")
	setFlag(t, "rapid.nofailfile", "true")
	backends := []struct {
		name string
		b    func(t *testing.T) backend
	}{
		{"miniredis", func(*testing.T) backend { return miniBackend{} }},
		{"redis-server", func(t *testing.T) backend { return newRealBackend(t) }},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := be.b(t)
			var c counts
			// Some variants break a path that random sequences reach in
			// about one run of rapid's 100 in ten ("the head's second
			// grace starts without waking it" was missed 8 times in 80
			// runs, before and after issue 20): each round has a fresh
			// seed, and a variant must be caught within five.
			if round, first := caughtIn(t.Name(), machine(b, &c)); round > 0 {
				t.Logf("caught in round %d (%d sequences run, shrinking included): %s", round, c.sequences, first)
				return
			}
			t.Fatalf("the machine did not catch %q in %d sequences, %d steps", name, c.sequences, c.steps)
		})
	}
}

// caughtRounds is how many rounds of rapid's checks a broken variant has to
// be caught in. Each variant stops at its first catch, so the bound costs
// time only when a catch is rare; a variant caught in a round with
// probability 0.4 is missed in 20 rounds once in 27,000 runs (5 rounds let
// one of them through in a CI run).
const caughtRounds = 20

// caughtIn runs prop under a recorder, a fresh seed a round, until a round
// fails or caughtRounds have passed: the round that failed and its first
// message, or 0 and "".
func caughtIn(name string, prop func(*rapid.T)) (int, string) {
	for round := 1; round <= caughtRounds; round++ {
		r := &recorder{name: name}
		func() {
			defer func() {
				if p := recover(); p != nil && p != errFailNow {
					panic(p)
				}
			}()
			rapid.Check(r, prop)
		}()
		if r.Failed() {
			return round, r.first()
		}
	}
	return 0, ""
}

func setFlag(t *testing.T, name, value string) {
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("no flag %s", name)
	}
	old := f.Value.String()
	if err := f.Value.Set(value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

var errFailNow = fmt.Errorf("recorder: FailNow")

// recorder is a rapid.TB that records failures instead of failing the test.
type recorder struct {
	mu     sync.Mutex
	name   string
	failed bool
	msgs   []string
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }
func (r *recorder) Logf(format string, args ...any) {
	r.log(fmt.Sprintf(format, args...))
}
func (r *recorder) Log(args ...any)                   { r.log(fmt.Sprint(args...)) }
func (r *recorder) Skipf(format string, args ...any)  { panic("recorder: skip") }
func (r *recorder) Skip(args ...any)                  { panic("recorder: skip") }
func (r *recorder) SkipNow()                          { panic("recorder: skip") }
func (r *recorder) Errorf(format string, args ...any) { r.Logf(format, args...); r.Fail() }
func (r *recorder) Error(args ...any)                 { r.Log(args...); r.Fail() }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); r.FailNow() }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); r.FailNow() }
func (r *recorder) FailNow()                          { r.Fail(); panic(errFailNow) }
func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recorder) log(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, s)
}

// first returns the first line that explains the failure.
func (r *recorder) first() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if strings.Contains(m, "failed after") || strings.Contains(m, "panic after") {
			if i := strings.Index(m, "\n"); i > 0 {
				return m[:i]
			}
			return m
		}
	}
	return strings.Join(r.msgs, "\n")
}

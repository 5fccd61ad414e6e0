package propertytests

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// semBroken are deliberately wrong fair-semaphore scripts; each must be
// caught by the machine (semFairMachine) and, where it breaks the order of
// grants, by the Weighted oracle too.
var semBroken = []struct {
	name, file, old, new string
	oracle               bool // the Weighted oracle must catch it as well
}{
	{"a smaller later request passes a blocked head", wire.FileSemFairAcquire,
		"        if head and head ~= owner then\n            return false, false",
		"        if head and head ~= owner and res_free(head) then\n            return false, false", true},
	{"an ended lease is not reclaimed", wire.FileSemFairAcquire,
		"        if s <= NOW then\n            ENDED[o] = true", "        if false then\n            ENDED[o] = true", false},
	{"a replayed request id is granted twice", wire.FileSemFairAcquire,
		"    latch_grant(KEYS[9], ARGV[5], token)\n", "", false},
	{"a replayed request id is not answered from its latch (granted anew)", wire.FileSemFairAcquire,
		"    local token = latch_token(state)\n", "    local token = nil\n", false},
	{"a copy whose latch expired is refused while its owner holds (issue 30 item 2)", wire.FileSemFairAcquire,
		"    if tonumber(HOLD[owner]) ~= n then\n", "    if true then\n", false},
	{"abandon keeps a grant whose latch expired (issue 30 item 2)", wire.FileSemFairAbandon,
		"local give = sem_holds(owner)\n", "local give = latch_token(was) ~= nil and sem_holds(owner)\n", false},
	{"a shrink that dooms the head does not wake it (issue 30 item 8)", wire.FileSemFairSetPermits,
		"            redis.call(PUBCMD, CHANNEL .. ':' .. head, MESSAGE)\n        end\n        head = q_front()", "        end\n        head = q_front()", false},
	{"an acquisition leaves its keys with no TTL (issue 30 item 7)", wire.FileSemFairAcquire,
		"    sem_expire(grace_margin, grace)\n", "", false},
	{"the queue's end ignores live waiters behind a holder (issue 30 item 7)", wire.FileSemFairAcquire,
		"        local ends = math.max(td, NOW + math.max(0, grace or 0), last or td)\n", "        local ends = td\n", false},
	{"the keys end at the last entry's end, no margin (issue 30 item 7)", wire.FileSemFairAcquire,
		"local SEM_KEEP = 10000\n", "local SEM_KEEP = 0\n", false},
	{"a release does not wake the new head", wire.FileSemFairRelease,
		"finish(nil, head0, second0, result == 1 or RECLAIMED, grace)",
		"finish(nil, head0, second0, RECLAIMED, grace)", false},
	// issue 33: a waiter woken while the head cannot be granted is sent
	// its attempt's reply (a note), which depends on the head alone.
	{"a note follows the woken waiter's own ask, not the head's (issue 33)", wire.FileSemFairRelease,
		"    if res_free(q_front() or w) then", "    if res_free(w) then", false},
	{"a note's sleep ignores the grace bound of the waiter behind the head (issue 33)", wire.FileSemFairRelease,
		"    if grace > 0 and second and (pttl < 0 or pttl > grace) then", "    if false then", false},
	// issue 33: a release grants the permits to the heads that fit
	// directly; the first copy of the request claims the grant.
	{"a handed-off grant is never claimed: its lease stays two graces (issue 33)", wire.FileSemFairAcquire,
		"                if ends > LEASE[owner] then", "                if false then", false},
	{"a release hands off to a request that was given up (issue 33)", wire.FileSemFairRelease,
		"            or redis.call('exists', latch) == 1 then", "            or false then", false},
	{"a release hands off to one head only (issue 33)", wire.FileSemFairRelease,
		"    while h and handoff(owner, h, grace, KEYS[7], ARGV[5]) do\n        h = q_front()",
		"    while h and handoff(owner, h, grace, KEYS[7], ARGV[5]) do\n        h = nil", false},
}

func TestSemFairBrokenVariantsFail(t *testing.T) {
	redistest.Long(t)
	for _, v := range semBroken {
		t.Run(v.name, func(t *testing.T) {
			if n := strings.Count(wire.SemFairSource(v.file), v.old); n != 1 {
				t.Fatalf("%q occurs %d times in %s", v.old, n, v.file)
			}
			scripts := wire.EditSemFair(func(file, src string) string {
				if file != v.file {
					return src
				}
				return strings.Replace(src, v.old, v.new, 1)
			})
			requireSemCaught(t, v.name, func(b semBackend) func(*rapid.T) { return semFairMachine(b, scripts, new(counts)) })
			if v.oracle {
				t.Run("oracle", func(t *testing.T) {
					requireSemCaught(t, v.name, func(b semBackend) func(*rapid.T) {
						return semOracleMachine(b, scripts, new(oracleStats))
					})
				})
			}
		})
	}
}

// requireSemCaught runs machine on miniredis and on redis-server and
// requires rapid to report a failure on both, within caughtRounds rounds.
func requireSemCaught(t *testing.T, name string, machine func(b semBackend) func(*rapid.T)) {
	t.Helper()
	setFlag(t, "rapid.shrinktime", "200ms")
	setFlag(t, "rapid.nofailfile", "true")
	for _, be := range []struct {
		name string
		b    func(t *testing.T) semBackend
	}{
		{"miniredis", func(*testing.T) semBackend { return semMini{} }},
		{"redis-server", func(t *testing.T) semBackend { return newSemReal(t) }},
	} {
		t.Run(be.name, func(t *testing.T) {
			b := be.b(t)
			if round, first := caughtIn(t.Name(), machine(b)); round > 0 {
				t.Logf("caught in round %d: %s", round, first)
				return
			}
			t.Fatalf("%q was not caught in %d rounds", name, caughtRounds)
		})
	}
}

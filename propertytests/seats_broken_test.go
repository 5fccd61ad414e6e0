package propertytests

import (
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// seatsBroken are deliberately wrong seats scripts; each must be caught by
// the machine (seatsMachine against the model) and, where it breaks a
// promise the history states (order, exclusion, wake-ups, no deadlock), by
// the history checks alone (the model not consulted).
var seatsBroken = []struct {
	name    string
	file    string
	edits   [][2]string // old, new
	history bool        // the history checks alone must catch it too
}{
	{"joins the queues in two steps (one seat per call)", wire.FileSeatsAcquire, [][2]string{
		{"            q_push(s, o)\n", "            q_push(s, o)\n            break\n"},
		{"    leave_all(owner) -- missing from a queue: leave all, join all again below\n    queued = false\n",
			"    join_all(owner, mine) -- the next step\n"},
	}, true},
	{"grants when heading only some of its queues", wire.FileSeatsAcquire, [][2]string{
		{"if seat_holder(s) or (h and h ~= owner) then",
			"if seat_holder(s) or (h and h ~= owner and s == seats[1]) then"},
	}, true},
	{"a release wakes nobody", wire.FileSeatsRelease, [][2]string{
		{"finish_all() -- the release's wake-ups\n", "\n"},
	}, true},
	{"prunes a ready head after one grace", wire.FileSeatsAcquire, [][2]string{
		{"if not (e and second and e <= S_NOW) then", "if not (e and e <= S_NOW) then"},
	}, false},
	{"a replayed request id is granted twice (latch not written)", wire.FileSeatsAcquire, [][2]string{
		{"    latch_grant(KEYS[9], latch_ttl, token)\n", ""},
	}, false},
	{"a copy whose latch expired is refused while its owner holds (issue 30 item 2)", wire.FileSeatsAcquire, [][2]string{
		{"    if not same then\n        return redis.error_reply('fairlock: seats: owner already holds seats')",
			"    if true then\n        return redis.error_reply('fairlock: seats: owner already holds seats')"},
	}, false},
	{"abandon keeps a grant whose latch expired (issue 30 item 2)", wire.FileSeatsAbandon, [][2]string{
		{"local give = seats_holds(owner)\n", "local give = latch_token(was) ~= nil and seats_holds(owner)\n"},
	}, false},
	{"the venue's keys get no TTL (issue 30 item 7)", wire.FileSeatsAcquire, [][2]string{
		{"    seats_expire()\n", ""},
	}, false},
	{"the venue's keys end at the last entry's end, no margin (issue 30 item 7)", wire.FileSeatsAcquire, [][2]string{
		{"local SEATS_KEEP = 60000\n", "local SEATS_KEEP = 0\n"},
	}, false},
	{"an ended lease is not reclaimed", wire.FileSeatsAcquire, [][2]string{
		{"    for _, o in ipairs(ended) do\n        give_back(o)\n", "    for _, o in ipairs({}) do\n        give_back(o)\n"},
	}, false},
}

func TestSeatsBrokenVariantsFail(t *testing.T) {
	redistest.Long(t)
	for _, v := range seatsBroken {
		t.Run(v.name, func(t *testing.T) {
			for _, e := range v.edits {
				if n := strings.Count(wire.SeatsSource(v.file), e[0]); n != 1 {
					t.Fatalf("%q occurs %d times in %s", e[0], n, v.file)
				}
			}
			scripts := wire.EditSeats(func(file, src string) string {
				if file != v.file {
					return src
				}
				for _, e := range v.edits {
					src = strings.Replace(src, e[0], e[1], 1)
				}
				return src
			})
			t.Run("machine", func(t *testing.T) {
				requireSeatsCaught(t, v.name, func(b seatsBackend) func(*rapid.T) {
					return seatsMachine(b, scripts, false, new(seatsCounts))
				})
			})
			if v.history {
				t.Run("history", func(t *testing.T) {
					requireSeatsCaught(t, v.name, func(b seatsBackend) func(*rapid.T) {
						return seatsMachine(b, scripts, true, new(seatsCounts))
					})
				})
			}
		})
	}
}

// requireSeatsCaught runs machine on miniredis and on redis-server and
// requires rapid to report a failure on both, within caughtRounds rounds.
func requireSeatsCaught(t *testing.T, name string, machine func(b seatsBackend) func(*rapid.T)) {
	t.Helper()
	setFlag(t, "rapid.shrinktime", "200ms")
	setFlag(t, "rapid.nofailfile", "true")
	for _, be := range []struct {
		name string
		b    func(t *testing.T) seatsBackend
	}{
		{"miniredis", func(*testing.T) seatsBackend { return seatsMini{} }},
		{"redis-server", func(t *testing.T) seatsBackend { return newSeatsReal(t) }},
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

package faulttests

import "testing"

// CheckRW catches a hand-made history where a writer overlaps a reader and
// another writer, and passes readers sharing, a writer with its own reads,
// and back-to-back windows.
func TestCheckRW(t *testing.T) {
	h := NewHistory()
	h.Locks["L"] = RWLock
	ok := []*Window{
		win("a:1", 0, 0, 5*s), win("b:1", 1, 1*s, 4*s), // readers share
		win("c:1:write", 2, 5*s, 7*s), win("c:1", 2, 6*s, 8*s), // a writer and its own read
		win("d:1", 3, 8*s, 9*s), // after both, back to back
	}
	h.Windows = ok
	expect(t, CheckRW(h), "rw-exclusion", 0)

	h.Windows = append(ok[:len(ok):len(ok)],
		win("e:1:write", 4, 3*s, 5*s),   // overlaps the readers a:1 and b:1
		win("f:1:write", 5, 10*s, 12*s), // overlaps writer g:1
		win("g:1:write", 6, 11*s, 13*s),
		win("h:1", 7, 12*s+500*ms(1), 14*s), // a reader inside writer g:1
	)
	expect(t, CheckRW(h), "rw-exclusion", 4) // e over a and b, f and g, g over h

	// The same writer-over-reader history is excused across a ForceUnlock
	// that deleted the lock, when the old window ends within its lease.
	h.Windows = []*Window{win("a:1", 0, 0, 2*s), win("e:1:write", 4, 1500*ms(1), 3*s)}
	expect(t, CheckRW(h), "rw-exclusion", 1)
	h.Calls = []*Call{{Lock: "L", Op: "ForceUnlock", Acquired: true, Start: 1 * s, End: 1200 * ms(1)}}
	expect(t, CheckRW(h), "rw-exclusion", 0)

	// A reader whose Lock call began before the ForceUnlock and returned
	// after it (a slow reply) was granted before it: excused while its
	// window ends within its lease of the ForceUnlock; a reader whose call
	// began after the ForceUnlock is not.
	r := win("a:1", 0, 2*s, 3*s)
	r.CallID = 7
	wr := win("e:1:write", 4, 1500*ms(1), 4*s)
	h.Windows = []*Window{wr, r}
	h.Calls = []*Call{
		{ID: 1, Lock: "L", Op: "ForceUnlock", Acquired: true, Start: 1 * s, End: 1200 * ms(1)},
		{ID: 7, Lock: "L", Op: "Lock", Acquired: true, Start: 500 * ms(1), End: 2 * s},
	}
	expect(t, CheckRW(h), "rw-exclusion", 0)
	h.Calls[1].Start = 1300 * ms(1)
	expect(t, CheckRW(h), "rw-exclusion", 1)
}

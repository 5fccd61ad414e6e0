package faulttests

import "testing"

// CheckPositions on hand-made histories: a rise without a join is caught;
// falls, rises after a join, unknown positions and rises across a
// data-losing fault are not.
func TestCheckPositions(t *testing.T) {
	h := hist()
	call := func(ps ...PositionReport) *Call {
		return &Call{ID: len(h.Calls) + 1, Client: 0, Owner: "a:1", Lock: "L", Op: "Lock[position]", Wait: true,
			Start: 0, End: 10 * s, CtxEnd: Never, Acquired: true, Positions: ps}
	}
	at := func(t, ahead int, joined bool) PositionReport {
		return PositionReport{At: ms(t), Ahead: ahead, Joined: joined}
	}

	h.Calls = []*Call{call(at(100, 4, true), at(200, 3, false), at(300, 3, false), at(400, 0, false))}
	expect(t, CheckPositions(h), "position", 0) // falls and stays

	h.Calls = []*Call{call(at(100, 4, true), at(200, 3, false), at(300, 5, false))}
	expect(t, CheckPositions(h), "position", 1) // rises without a join

	h.Calls = []*Call{call(at(100, 4, true), at(200, 2, false), at(300, 5, true), at(400, 4, false))}
	expect(t, CheckPositions(h), "position", 0) // pruned, joined again at the tail

	h.Calls = []*Call{call(at(100, 4, true), at(200, -1, false), at(300, 5, false))}
	expect(t, CheckPositions(h), "position", 0) // unknown in between: nothing to compare with

	h.Calls = []*Call{call(at(100, 2, true), at(200, -2, false))}
	expect(t, CheckPositions(h), "position", 1) // not a position at all

	// two calls of one owner are two waits: the second may start further back
	h.Calls = []*Call{call(at(100, 1, true)), call(at(200, 6, true), at(300, 7, false))}
	expect(t, CheckPositions(h), "position", 1) // ...but not rise within itself

	// a data-losing fault between two reports excuses a rise (the queue
	// read may be an older copy); one before both does not
	h.Faults = []Fault{{Kind: FFailover, Client: -1, Start: ms(250), End: ms(260)}}
	h.Calls = []*Call{call(at(100, 4, true), at(200, 1, false), at(300, 3, false))}
	expect(t, CheckPositions(h), "position", 0)
	h.Calls = []*Call{call(at(100, 4, true), at(200, 1, false), at(300, 3, false), at(30000, 2, false), at(30100, 5, false))}
	h.Faults[0].Kind = FRestart
	expect(t, CheckPositions(h), "position", 1)

	// the checker runs with the others
	expect(t, Check(h), "position", 1)
}

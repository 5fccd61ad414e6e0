package faulttests

import (
	"fmt"
	"time"
)

// CheckPositions: a fair waiter's reported queue position (the number of
// waiters ahead of it, fair.AcquireOptions.Position) never goes up between
// two reports of one call unless the later report says Joined (it may have
// joined the tail again: pruned, or a copy of an unanswered attempt). A
// data-losing fault (restart without persistence, failover) between the
// two reports excuses a rise: the queue the later one read may be an older
// copy. Unknown positions (-1) are not compared.
func CheckPositions(h *History) []Violation {
	var vs []Violation
	for _, c := range h.Calls {
		prev := -1
		var prevAt time.Duration
		for i, p := range c.Positions {
			switch {
			case p.Ahead < -1:
				vs = append(vs, Violation{Check: "position", Lock: c.Lock, At: p.At,
					Msg: fmt.Sprintf("%s reported %d waiters ahead (call #%d %s)", short(c.Owner), p.Ahead, c.ID, c)})
			case p.Joined || p.Ahead < 0:
				prev = p.Ahead
				if p.Ahead >= 0 {
					prevAt = p.At
				}
				continue
			case prev >= 0 && p.Ahead > prev && !dataLossBetween(h, prevAt, p.At):
				vs = append(vs, Violation{Check: "position", Lock: c.Lock, At: p.At,
					Msg: fmt.Sprintf("%s's position went up from %d to %d without joining again (report %d of call #%d %s; reports %v)",
						short(c.Owner), prev, p.Ahead, i+1, c.ID, c, c.Positions)})
			}
			prev, prevAt = p.Ahead, p.At
		}
	}
	return vs
}

// dataLossBetween reports a data-losing fault that was under way at some
// moment between from and to (its recovery included).
func dataLossBetween(h *History, from, to time.Duration) bool {
	for _, f := range h.Faults {
		if f.Kind.dataLoss() && f.Start <= to && (f.End == Never || f.End+f.Kind.recovery() >= from) {
			return true
		}
	}
	return false
}

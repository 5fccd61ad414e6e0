package lockstate

import (
	"fmt"
	"time"
)

// checkQueue flags what is wrong with the queue as a whole.
func (s *State) checkQueue() {
	holders := make([]string, 0, len(s.Holders))
	for _, h := range s.Holders {
		holders = append(holders, h.Owner)
	}
	s.Problems = append(s.Problems, queueProblems(s.Queue, !s.Locked, "the lock is free", holders)...)
}

// queueProblems flags what is wrong with a queue (head first) as a whole:
// free says the head could be granted now ("free" describes that), holders
// are the owners holding.
func queueProblems(queue []Waiter, free bool, freeText string, holders []string) []Problem {
	var ps []Problem
	add := func(sev, code, format string, args ...any) {
		ps = append(ps, Problem{Code: code, Severity: sev, Message: fmt.Sprintf(format, args...)})
	}
	if len(queue) == 0 {
		return nil
	}
	head := queue[0]
	if head.HasDeadline && head.LeftMs <= 0 {
		add(Warning, "stale-head",
			"the head's deadline passed %v ago: it is dead and the next attempt by anyone prunes it", ms(-head.LeftMs))
	}
	if free {
		add(Warning, "free-with-queue",
			"%s but %d waiters are queued (normal for a moment while the head is woken; "+
				"the head has until its deadline to take it)", freeText, len(queue))
	}
	last := int64(0)
	for _, w := range queue {
		if !w.HasDeadline {
			continue
		}
		if w.DeadlineMs < last {
			add(Error, "deadline-order",
				"waiter %d's deadline is earlier than the one ahead of it (deadlines must not decrease along the queue)", w.Position)
		}
		last = w.DeadlineMs
	}
	for _, h := range holders {
		for _, w := range queue {
			if w.Owner == h {
				add(Warning, "holder-queued", "the holder %s is also queued (position %d)", h, w.Position)
			}
		}
	}
	return ps
}

// ms renders a duration of milliseconds compactly.
func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

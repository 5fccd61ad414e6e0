package lockstate

import "time"

// checkQueue flags what is wrong with the queue as a whole.
func (s *State) checkQueue() {
	if len(s.Queue) == 0 {
		return
	}
	head := s.Queue[0]
	if head.HasDeadline && head.LeftMs <= 0 {
		s.problem(Warning, "stale-head",
			"the head's deadline passed %v ago: it is dead and the next attempt by anyone prunes it", ms(-head.LeftMs))
	}
	if !s.Locked {
		s.problem(Warning, "free-with-queue",
			"the lock is free but %d waiters are queued (normal for a moment while the head is woken; "+
				"the head has until its deadline to take it)", len(s.Queue))
	}
	last := int64(0)
	for _, w := range s.Queue {
		if !w.HasDeadline {
			continue
		}
		if w.DeadlineMs < last {
			s.problem(Error, "deadline-order",
				"waiter %d's deadline is earlier than the one ahead of it (deadlines must not decrease along the queue)", w.Position)
		}
		last = w.DeadlineMs
	}
	for _, h := range s.Holders {
		for _, w := range s.Queue {
			if w.Owner == h.Owner {
				s.problem(Warning, "holder-queued", "the holder %s is also queued (position %d)", h.Owner, w.Position)
			}
		}
	}
}

// ms renders a duration of milliseconds compactly.
func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

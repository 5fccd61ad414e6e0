package fairlock

import "github.com/fairlock-go/fairlock/internal/core"

// Position is a queued waiter's place in a fair queue, reported by a
// waiting fair acquisition that asked for it (fair.AcquireOptions.Position):
// how many waiters are ahead (Ahead), whether it (re)joined the tail since
// the last report (Joined), and an estimate of its wait (ETA, from the rate
// at which the queue ahead of it moved; 0 until measurable). Each field's
// doc says how exact it is on each engine; docs/design.md ("Queue position
// and ETA") says how it is computed and what it costs.
type Position = core.Position

package multi

// Deliberately broken variants, for the tests that show each check able to
// fail.

// BreakOrder makes l take its members in the caller's order (Redisson's
// MultiLock), not the canonical one.
func BreakOrder(l *MultiLock) { l.callerOrder = true }

// BreakRollback makes l leave what it took when an acquisition fails.
func BreakRollback(l *MultiLock) { l.noRollback = true }

// BreakDone makes l's Done ignore members' losses (it closes on Unlock only).
func BreakDone(l *MultiLock) { l.ignoreLoss = true }

// BreakQuorum makes r count one grant as a majority.
func BreakQuorum(r *RedLock) { r.quorum = 1 }

// BreakValidity makes r ignore the validity rule (a round that took
// longer than the lease still wins).
func BreakValidity(r *RedLock) { r.noValidity = true }

package core

// EndReleased ends the current hold, if any, as released (Done closed, Err
// nil), as a confirmed unlock does: for a lock package whose own force
// unlock deleted the lock under this handle (the read-write lock deletes
// both halves' holds of its owner at once, and only when the lock is in the
// half's mode: a force unlock that deleted nothing must end nothing).
func (m *Mutex) EndReleased() {
	m.mu.Lock()
	h := m.cur
	m.mu.Unlock()
	m.released(h)
}

package model

import "strings"

// Names are the key and channel names of one lock, as Redisson builds them
// (and as package lua does; the property tests check that they agree).
type Names struct {
	Lock     string // the hash: owner -> hold count
	Channel  string // redisson_lock__channel:{name}
	Queue    string // redisson_lock_queue:{name}
	Timeouts string // redisson_lock_timeout:{name}
	Grace    string // fairlock_grace:{name}: the fair lock's head grace (not in Redisson)
	Token    string // redisson_lock_token:{name}: the fencing token (fenced lock; fair lock, not in Redisson)
	Notes    string // fairlock_notes:{name}: the Redisson engine's handoff notes of this library's waiters (not in Redisson)
	latch    string
	alatch   string
}

// NamesFor returns the names of the lock called name.
func NamesFor(name string) Names {
	return Names{
		Lock:     name,
		Channel:  tagged("redisson_lock__channel", name),
		Queue:    tagged("redisson_lock_queue", name),
		Timeouts: tagged("redisson_lock_timeout", name),
		Grace:    tagged("fairlock_grace", name),
		Token:    tagged("redisson_lock_token", name),
		Notes:    tagged("fairlock_notes", name),
		latch:    tagged("redisson_unlock_latch", name),
		alatch:   tagged("fairlock_acquire_latch", name),
	}
}

// WaiterChannel is the fair lock's own channel of one waiter: the fair lock
// wakes the first two waiters of its queue here.
func (n Names) WaiterChannel(owner string) string { return n.Channel + ":" + owner }

// Latch is the key of the unlock latch of one request id.
func (n Names) Latch(requestID string) string { return n.latch + ":" + requestID }

// LatchPrefix is what every latch key of this lock starts with.
func (n Names) LatchPrefix() string { return n.latch + ":" }

// tagged is Redisson's prefixName: "prefix:{name}", or "prefix:name" when
// the name carries its own hash tag, so that every key shares one slot.
func tagged(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// AcquireLatchPrefix is what every acquisition latch key of this lock
// starts with ("fairlock_acquire_latch:{name}:"; the request id follows).
func (n Names) AcquireLatchPrefix() string { return n.alatch + ":" }

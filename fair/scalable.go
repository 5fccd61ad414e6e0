package fair

import (
	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Engine is how a fair lock keeps its queue in Redis. Both engines have the
// same semantics: the same grant order, replies, pruning and deadlines.
type Engine int

const (
	// Redisson is the default engine: Redisson's keys and scripts
	// (redisson_lock_queue:{name}, redisson_lock_timeout:{name}), so Go and
	// Java services can share a lock. Each acquisition rewrites every queued
	// waiter's deadline: a handoff costs O(n log n) Redis work with n waiters.
	Redisson Engine = iota
	// Scalable keeps the queue as a linked list with relative deadlines in
	// one hash (fairlock_squeue:{name}): every script runs O(1) commands
	// whatever the queue's length. Redisson clients cannot share its locks.
	// Both engines run the same scripts and rules over their own queue.
	// Every handle on one name must choose the same engine: an acquisition
	// is refused, with an error matching ErrMixedEngines, on a lock whose
	// queue the other engine keeps (releasing and giving up never are).
	Scalable
)

// ErrMixedEngines reports an acquisition on a lock name whose queue the
// other engine keeps. Nothing was changed.
var ErrMixedEngines = wire.ErrMixedEngines

// WithEngine chooses the engine. Default: Redisson. Every handle on one
// lock name must use the same engine.
func WithEngine(e Engine) fairlock.LockOption { return func(o *core.LockConfig) { o.Engine = int(e) } }

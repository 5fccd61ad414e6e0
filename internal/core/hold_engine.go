package core

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/watchdog"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// The primitives whose holds are not fields of a lock hash (the semaphores:
// one acquisition of n permits is one hold) run on the same wait loop as
// the locks: each acquisition is a Mutex of its own (NewHold), whose owner
// is the acquisition's id, and its engine says what differs from a lock
// through the optional interfaces below.

// Voider is an engine whose requests are voided by a script of its own
// (abandon.lua voids a lock's): Abandon voids request a.AcquireID so that
// later copies of it do nothing, and reports whether a copy was granted and
// still holds (the give-back then runs the engine's Unlock).
type Voider interface {
	Abandon(ctx context.Context, a wire.Args) (held bool, err error)
}

// HandingOff is an engine whose release may grant the lock to the queue's
// live head directly (the scalable fair engine, when Handoff reports
// true): the grant comes as a message on the head's wake channel
// (wire.Grant), and the head's acquisition takes it (handoff.go).
type HandingOff interface {
	Handoff() bool
}

// HeldChecker is an engine whose holds the replica acknowledgement
// (replicas.go) checks with a script of its own instead of the lock hash's
// field: the script, run with keys and args, replies 1 when owner still
// holds, after a write that changes nothing (so that WAIT on its connection
// covers the acquisition), and 0 when it does not, writing nothing.
type HeldChecker interface {
	HeldScript(owner string) (sc *redis.Script, keys []string, args []any)
}

// Keeper is an engine whose grant Redis may keep for a time other than the
// lease sent: the permit-expirable semaphore, whose keys' TTL (Redisson's
// expire()) can end a grant sooner, and whose updateLeaseTime (any
// client's, Java's included) can move its end either way.
type Keeper interface {
	// GrantKeptMs, called after Try reported a grant, is how long Redis
	// keeps that grant from the script's run regardless of the lease (ms;
	// -1: no bound but the lease). The hold's validity is cut to it.
	GrantKeptMs() int64
	// KeptMs asks Redis how long owner's grant is still kept: ms, 0 when
	// it is no longer held, -1 when it does not expire. A hold with an
	// explicit lease asks it when that lease runs out on the local clock,
	// and goes on when the grant's end was moved (updateLeaseTime) instead
	// of ending and giving the grant back.
	KeptMs(ctx context.Context, owner string) (int64, error)
}

// NewHold builds the handle of one acquisition of such a primitive: owner
// is the acquisition's id, e its engine, name the key the replica
// acknowledgement and errors name, kind its watchdog renewal (registered
// with Session.RegisterKind). queue: its attempts may join a wait queue
// (the engine's GiveUp leaves it).
func NewHold(s *Session, name, owner string, e Engine, kind watchdog.Kind, queue bool) (*Mutex, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidValue)
	}
	if e == nil || owner == "" {
		return nil, fmt.Errorf("%w: hold without an engine or an owner", ErrInvalidValue)
	}
	return &Mutex{S: s, E: e, Keys: wire.Keys{Name: name}, Owner: owner, WatchKind: kind, Queue: queue}, nil
}

package core

import "context"

// Tracer starts a span around each acquisition (every Lock, TryLock,
// TryLockFor, Acquire of any lock kind; op "acquire") and each release
// (Unlock, Release; op "release"): Start is called with the caller's ctx
// when the call begins, the call runs on the ctx it returns (so the Redis
// commands of a traced go-redis client nest under the span), and end is
// called once when it returns: ok says whether the lock was acquired (for a
// release, whether it succeeded), err is the call's error. Set one with
// fairlock.WithTracer; package otelobserve has an OpenTelemetry one.
// Without one nothing is called or built.
type Tracer interface {
	Start(ctx context.Context, s Span) (context.Context, func(ok bool, err error))
}

// Span says what a span is about.
type Span struct {
	Op       string // "acquire" or "release"
	Name     string // the lock's name (its Redis key)
	Owner    string // the owner id
	LockKind string // "reentrant", "fair", "rwlock", "semaphore", ...
}

func (m *Mutex) span(op string) Span {
	return Span{Op: op, Name: m.Keys.Name, Owner: m.Owner, LockKind: m.lockKind()}
}

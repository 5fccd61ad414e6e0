package core

import (
	"context"
	"time"
)

// Exports for lock packages that run their own wait loop over the session
// (package semaphore): the same registration, binding, cleanup and error
// rules the Mutex's loops use.

// Begin registers an acquisition in progress (Close waits for it); false
// once the session is closed. Each true Begin needs one End.
func (s *Session) Begin() bool { return s.begin() }

// End ends what Begin registered.
func (s *Session) End() { s.end() }

// Closing is closed when Close starts: waits must end.
func (s *Session) Closing() <-chan struct{} { return s.closeCtx.Done() }

// Bind returns a context that ends when ctx ends or the session closes
// (its cause is then ErrClosed).
func (s *Session) Bind(ctx context.Context) (context.Context, context.CancelFunc) { return s.bind(ctx) }

// Cleanup runs f in the background now, and again with backoff while it
// fails, until it succeeds, the session closes, or until passes (see
// runCleanup). Close waits for it, bounded by CleanupTime.
func (s *Session) Cleanup(until time.Time, f func(context.Context) error) <-chan struct{} {
	return s.runCleanup(until, false, f)
}

// Transient reports an error after which the same Redis call may succeed
// if sent again (transient.go).
func Transient(err error) bool { return transient(err) }

// Canceled wraps a context's error so that it matches ErrCanceled too.
func Canceled(err error) error { return canceled(err) }

// IsScriptError reports an error a script replied (nothing is unknown
// about the call's outcome).
func IsScriptError(err error) bool { return isScriptError(err) }

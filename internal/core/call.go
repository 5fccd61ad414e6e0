package core

import (
	"context"
	"reflect"
	"time"
)

// Every Redis call the locks make is bounded by its context, whatever the
// user's go-redis client is set to.
//
// go-redis applies a context's deadline to socket reads only when the
// client's ContextTimeoutEnabled is set (it is off by default), and it never
// watches a context's cancellation during a read; with the defaults a call to
// a stalled Redis takes ReadTimeout (3 s) per try, and tries up to four times.
// We do not require ContextTimeoutEnabled (most clients are built without it,
// and a lock library should not dictate the settings of a shared client), and
// we do not build a second client from the user's options (it would lose the
// user's hooks and cannot be done for every UniversalClient). Instead a call
// whose context can end runs on its own goroutine and the caller stops
// waiting when the context ends. The abandoned call finishes (or times out) in
// the background; its outcome is unknown to the caller, which the locks
// handle as they handle any ambiguous call: acquisitions carry a request id
// and are voided (abandon.lua), unlocks carry a latch.
//
// Even a client with ContextTimeoutEnabled applies only deadlines, not
// cancellation, so the goroutine is used for every context that can end; a
// context that can never end (context.Background) runs the call inline.
//
// The goroutine is a session's worker (workers below) when one is idle: a
// new goroutine per call cost about 25 µs per Redis call with a cancellable
// context (creating it and growing its small stack inside go-redis, ≈16 µs;
// the two hand-offs, ≈9 µs: docs/benchmarks.md, issue 23), which a reused
// worker does not pay. The hand-offs stay: a call blocked on a stalled
// socket can only be left behind by a caller on another goroutine.

type result[T any] struct {
	v   T
	err error
}

// how says where a call runs: inline (on the caller's goroutine), or on a
// worker of w (nil: a goroutine of its own).
type how struct {
	inline bool
	w      *workers
}

// call runs f bounded by ctx: it returns f's result, or ctx's error as soon
// as ctx ends, leaving f to finish in the background.
func call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	return callC(ctx, how{inline: ctx.Done() == nil}, nil, f)
}

// callC is call that also returns ErrClosed as soon as closing is closed
// (the session's Close), when f runs on its own goroutine. With inline set
// (Session.inline: a ctx that can never end, or a deadline the client
// enforces itself) it runs f on the caller's goroutine; closing is then not
// watched: the call is bounded by the client's own timeouts (or the
// deadline), and its caller finds the session closed when it returns.
// Inline is the fast path: handing the call to a goroutine costs a
// scheduler wake-up on each side, which on a busy 2-core machine was most
// of an uncontended Lock+Unlock (about 200 µs against 120 µs inline).
func callC[T any](ctx context.Context, h how, closing <-chan struct{}, f func(context.Context) (T, error)) (T, error) {
	if h.inline {
		return f(ctx)
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	ch := make(chan result[T], 1)
	h.w.run(func() {
		v, err := f(ctx)
		ch <- result[T]{v, err}
	})
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	case <-closing:
		var zero T
		return zero, ErrClosed
	}
}

// call2 is callC for functions with two results.
func call2[A, B any](ctx context.Context, h how, closing <-chan struct{}, f func(context.Context) (A, B, error)) (A, B, error) {
	if h.inline {
		return f(ctx)
	}
	type ab struct {
		a A
		b B
	}
	r, err := callC(ctx, how{w: h.w}, closing, func(ctx context.Context) (ab, error) {
		a, b, err := f(ctx)
		return ab{a, b}, err
	})
	return r.a, r.b, err
}

// isNil reports a nil interface or an interface holding a nil pointer (a
// typed nil, such as a nil *redis.Client).
func isNil(x any) bool {
	if x == nil {
		return true
	}
	v := reflect.ValueOf(x)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// callErr is callC for functions with only an error.
func callErr(ctx context.Context, h how, closing <-chan struct{}, f func(context.Context) error) error {
	if h.inline {
		return f(ctx)
	}
	_, err := callC(ctx, how{w: h.w}, closing, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}

// workerIdle is how long an idle worker waits for another call before it
// ends.
const workerIdle = 10 * time.Second

// workers is a session's pool of goroutines for calls whose context can
// end. A call is handed to an idle worker, or starts a new one; a worker
// ends after workerIdle without a call, or once its session is closed
// (after the call it runs: an abandoned call still finishes in the
// background, bounded by the client's timeouts), so no worker outlives its
// client by more than that call.
type workers struct {
	work chan func()     // unbuffered: a send succeeds only to an idle worker
	stop <-chan struct{} // closed when the session's Close is done
}

func newWorkers(stop <-chan struct{}) *workers {
	return &workers{work: make(chan func()), stop: stop}
}

// run runs f on an idle worker, or on a new one (on a goroutine of its own
// when w is nil).
func (w *workers) run(f func()) {
	if w == nil {
		go f()
		return
	}
	select {
	case w.work <- f:
	default:
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	f()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case f = <-w.work:
			f()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-w.stop:
			return
		}
	}
}

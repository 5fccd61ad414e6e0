package core

import (
	"context"
	"reflect"
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

type result[T any] struct {
	v   T
	err error
}

// call runs f bounded by ctx: it returns f's result, or ctx's error as soon
// as ctx ends, leaving f to finish in the background.
func call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	return callC(ctx, ctx.Done() == nil, nil, f)
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
func callC[T any](ctx context.Context, inline bool, closing <-chan struct{}, f func(context.Context) (T, error)) (T, error) {
	if inline {
		return f(ctx)
	}
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	ch := make(chan result[T], 1)
	go func() {
		v, err := f(ctx)
		ch <- result[T]{v, err}
	}()
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
func call2[A, B any](ctx context.Context, inline bool, closing <-chan struct{}, f func(context.Context) (A, B, error)) (A, B, error) {
	if inline {
		return f(ctx)
	}
	type ab struct {
		a A
		b B
	}
	r, err := callC(ctx, false, closing, func(ctx context.Context) (ab, error) {
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
func callErr(ctx context.Context, inline bool, closing <-chan struct{}, f func(context.Context) error) error {
	if inline {
		return f(ctx)
	}
	_, err := callC(ctx, false, closing, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}

package semaphore_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/semaphore"
)

// callEvery calls every exported method of v with plausible arguments (a
// live context, one-second durations, zero values otherwise) and reports
// each one that panics, blocks, or returns an error that does not match
// ErrInvalidValue; a channel it returns must be closed (a zero value
// holds nothing).
func callEvery(t *testing.T, what string, v any) {
	t.Helper()
	rv := reflect.ValueOf(v)
	for i := range rv.NumMethod() {
		m := rv.Type().Method(i)
		fn := rv.Method(i)
		args := make([]reflect.Value, fn.Type().NumIn())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for j := range args {
			in := fn.Type().In(j)
			switch {
			case in == reflect.TypeFor[context.Context]():
				args[j] = reflect.ValueOf(ctx)
			case in == reflect.TypeFor[time.Duration]():
				args[j] = reflect.ValueOf(time.Second)
			case in.Kind() == reflect.Int:
				args[j] = reflect.ValueOf(1).Convert(in)
			case in.Kind() == reflect.String:
				args[j] = reflect.ValueOf("00112233445566778899aabbccddeeff").Convert(in)
			case in.Kind() == reflect.Slice && in.Elem().Kind() == reflect.String && !fn.Type().IsVariadic():
				args[j] = reflect.ValueOf([]string{"00112233445566778899aabbccddeeff"})
			default:
				args[j] = reflect.Zero(in)
			}
		}
		type result struct {
			out   []reflect.Value
			panic any
		}
		done := make(chan result, 1)
		start := time.Now()
		go func() {
			var r result
			defer func() { r.panic = recover(); done <- r }()
			if fn.Type().IsVariadic() {
				r.out = fn.CallSlice(append(args[:len(args)-1], reflect.ValueOf([]string{"00112233445566778899aabbccddeeff"})))
			} else {
				r.out = fn.Call(args)
			}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(20 * time.Second):
			cancel()
			t.Errorf("%s.%s blocks", what, m.Name)
			continue
		}
		cancel()
		if r.panic != nil {
			t.Errorf("%s.%s panics: %v", what, m.Name, r.panic)
			continue
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s.%s took %v (it waited for its ctx)", what, m.Name, d)
		}
		if m.Name == "Err" {
			continue // it reports an ended hold: nil is as clear as an error here
		}
		for _, o := range r.out {
			if o.Type() == reflect.TypeFor[error]() {
				if err, _ := o.Interface().(error); !errors.Is(err, fairlock.ErrInvalidValue) {
					t.Errorf("%s.%s returns %v, want an error matching ErrInvalidValue", what, m.Name, err)
				}
			}
			if o.Type() == reflect.TypeFor[<-chan struct{}]() {
				select {
				case <-o.Interface().(<-chan struct{}):
				default:
					t.Errorf("%s.%s: the channel is not closed (a zero value holds nothing)", what, m.Name)
				}
			}
		}
	}
}

// Issue 30 item 9: a zero or nil value of every public type of the package
// returns an error matching ErrInvalidValue (or reports holding nothing),
// never panics, never blocks.
func TestZeroAndNilValuesReturnErrors(t *testing.T) {
	for what, v := range map[string]any{
		"Expirable{}":       &semaphore.Expirable{},
		"(*Expirable)(nil)": (*semaphore.Expirable)(nil),
		"Fair{}":            &semaphore.Fair{},
		"(*Fair)(nil)":      (*semaphore.Fair)(nil),
		"Permit{}":          &semaphore.Permit{},
		"(*Permit)(nil)":    (*semaphore.Permit)(nil),
	} {
		t.Run(what, func(t *testing.T) { callEvery(t, what, v) })
	}
}

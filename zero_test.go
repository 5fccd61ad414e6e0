package fairlock_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/rwlock"
)

// callAll calls every exported method of v with plausible arguments (a live
// context, one-second durations, zero values) and reports each one that
// panics, or returns an error that does not match ErrInvalidValue.
func callAll(t *testing.T, what string, v any) {
	t.Helper()
	rv := reflect.ValueOf(v)
	for i := range rv.NumMethod() {
		m := rv.Type().Method(i)
		fn := rv.Method(i)
		args := make([]reflect.Value, fn.Type().NumIn())
		for j := range args {
			in := fn.Type().In(j)
			switch {
			case in == reflect.TypeFor[context.Context]():
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				args[j] = reflect.ValueOf(ctx)
			case in == reflect.TypeFor[time.Duration]():
				args[j] = reflect.ValueOf(time.Second)
			default:
				args[j] = reflect.Zero(in)
			}
		}
		var out []reflect.Value
		panicked := func() (p any) {
			defer func() { p = recover() }()
			out = fn.Call(args)
			return nil
		}()
		if panicked != nil {
			t.Errorf("%s.%s panics: %v", what, m.Name, panicked)
			continue
		}
		if m.Name == "Err" {
			continue // it reports an ended hold: nil is as clear as an error here
		}
		for _, o := range out {
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

// Issue 19 (e): zero values of every public lock type, and nil options,
// return ErrInvalidValue instead of panicking. (A nil *Mutex panics, as a
// nil *sync.Mutex does: the calls every lock shares are fairlock.Handle's,
// promoted through the embedded field, and Go dereferences a nil outer
// pointer to reach it.)
func TestZeroValuesAndNilOptions(t *testing.T) {
	var rw rwlock.RWMutex
	for what, v := range map[string]any{
		"reentrant.Mutex{}":            &reentrant.Mutex{},
		"fair.Mutex{}":                 &fair.Mutex{},
		"fenced.Mutex{}":               &fenced.Mutex{},
		"rwlock.RWMutex{}":             &rw,
		"rwlock.RWMutex{}.ReadLock()":  rw.ReadLock(),
		"rwlock.RWMutex{}.WriteLock()": rw.WriteLock(),
		"rwlock.Lock{}":                &rwlock.Lock{},
	} {
		callAll(t, what, v)
	}

	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	check := func(what string, f func() error) {
		t.Helper()
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			err = f()
		}()
		if !errors.Is(err, fairlock.ErrInvalidValue) {
			t.Errorf("%s: %v, want an error matching ErrInvalidValue", what, err)
		}
	}
	check("NewClient(rdb, nil)", func() error { _, err := fairlock.NewClient(rdb, nil); return err })
	c, err := fairlock.NewClient(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	check("reentrant.New(c, name, nil)", func() error { _, err := reentrant.New(c, "x", nil); return err })
	check("fair.New(c, name, nil)", func() error { _, err := fair.New(c, "x", nil); return err })
	check("fenced.New(c, name, nil)", func() error { _, err := fenced.New(c, "x", nil); return err })
	check("rwlock.New(c, name, nil)", func() error { _, err := rwlock.New(c, "x", nil); return err })
}

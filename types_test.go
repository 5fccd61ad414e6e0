package fairlock

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/core"
)

// The root package defines Event, EventKind, Span and Position itself (so
// that go doc shows their fields) and hands the session's values over:
// every kind, every field, nothing lost. A field added to core's Event and
// not here fails this test.
func TestPublicTypesCarryEveryCoreField(t *testing.T) {
	for k := core.WaitStarted; k <= core.EventsDropped; k++ {
		if got := EventKind(k).String(); got != k.String() || got == "unknown" {
			t.Errorf("kind %d: %q, core says %q", k, got, k.String())
		}
	}
	for _, pair := range [][2]EventKind{
		{WaitStarted, EventKind(core.WaitStarted)}, {Granted, EventKind(core.Granted)},
		{WaitEnded, EventKind(core.WaitEnded)}, {Released, EventKind(core.Released)},
		{Lost, EventKind(core.Lost)}, {RenewFailed, EventKind(core.RenewFailed)},
		{LongWait, EventKind(core.LongWait)}, {LongHold, EventKind(core.LongHold)},
		{EventsDropped, EventKind(core.EventsDropped)},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%v is %d, core's is %d", pair[0], pair[0], pair[1])
		}
	}

	// every field of core.Event set to a non-zero value
	var ce core.Event
	v := reflect.ValueOf(&ce).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Uint8, reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.String:
			f.SetString(v.Type().Field(i).Name)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Struct:
			f.Set(reflect.ValueOf(time.Unix(int64(i+1), 0)))
		case reflect.Interface:
			f.Set(reflect.ValueOf(errors.New("e")))
		default:
			t.Fatalf("field %s: kind %v not handled by this test", v.Type().Field(i).Name, f.Kind())
		}
	}
	var got Event
	coreObserver{ObserverFunc(func(e Event) { got = e })}.Observe(ce)
	gv := reflect.ValueOf(got)
	if gv.NumField() != v.NumField() {
		t.Fatalf("fairlock.Event has %d fields, core.Event %d", gv.NumField(), v.NumField())
	}
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		g := gv.FieldByName(name)
		if !g.IsValid() {
			t.Errorf("fairlock.Event has no field %s", name)
			continue
		}
		if g.Kind() == reflect.Uint8 { // Kind: another type, same value
			if g.Uint() != v.Field(i).Uint() {
				t.Errorf("%s: %v, want %v", name, g, v.Field(i))
			}
			continue
		}
		if !reflect.DeepEqual(g.Interface(), v.Field(i).Interface()) {
			t.Errorf("%s: %v, want %v", name, g, v.Field(i))
		}
	}

	var gotSpan Span
	ctx, end := coreTracer{tracerFunc(func(ctx context.Context, s Span) (context.Context, func(bool, error)) {
		gotSpan = s
		return ctx, func(bool, error) {}
	})}.Start(context.Background(), core.Span{Op: "acquire", Name: "n", Owner: "o", LockKind: "fair"})
	end(true, nil)
	if ctx == nil || gotSpan != (Span{Op: "acquire", Name: "n", Owner: "o", LockKind: "fair"}) {
		t.Errorf("span %+v", gotSpan)
	}
}

type tracerFunc func(context.Context, Span) (context.Context, func(bool, error))

func (f tracerFunc) Start(ctx context.Context, s Span) (context.Context, func(bool, error)) {
	return f(ctx, s)
}

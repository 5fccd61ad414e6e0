package otelobserve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/otelobserve"
	"github.com/fairlock-go/fairlock/reentrant"
)

// A run of two holds, one after a wait, one ended by Close, gives the
// histograms and counters their counts; names are recorded only through
// WithNames.
func TestMetrics(t *testing.T) {
	for _, named := range []bool{false, true} {
		reader := sdkmetric.NewManualReader()
		meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
		var opts []otelobserve.Option
		if named {
			opts = append(opts, otelobserve.WithNames(func(n string) string { return strings.SplitN(n, ":", 2)[0] }))
		}
		o, err := otelobserve.New(meter, opts...)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		defer rdb.Close()
		c, err := fairlock.NewClient(rdb, fairlock.WithObserver(o))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		a, _ := reentrant.New(c, "acct:1")
		b, _ := reentrant.New(c, "acct:1")
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- b.Lock(ctx) }()
		for deadline := time.Now().Add(15 * time.Second); waiting(t, reader) != 1; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the second handle was not seen waiting within 15s")
			}
		}
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil { // b's hold ends as closed
			t.Fatal(err)
		}

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		counts := map[string]uint64{}
		sums := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						counts[m.Name+" "+attr(p.Attributes, "outcome")] += p.Count
						checkName(t, named, m.Name, p.Attributes)
					}
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						sums[m.Name] += p.Value
						checkName(t, named, m.Name, p.Attributes)
					}
				}
			}
		}
		want := map[string]uint64{"fairlock.wait.duration granted": 1, "fairlock.hold.duration released": 1, "fairlock.hold.duration closed": 1}
		for k, v := range want {
			if counts[k] != v {
				t.Errorf("named %v: %s: %d, want %d (all: %v)", named, k, counts[k], v, counts)
			}
		}
		if sums["fairlock.waiting"] != 0 || sums["fairlock.held"] != 0 {
			t.Errorf("named %v: waiting %d, held %d after the run, want 0", named, sums["fairlock.waiting"], sums["fairlock.held"])
		}
	}
}

func waiting(t *testing.T, r *sdkmetric.ManualReader) int64 {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "fairlock.waiting" {
				for _, p := range d.DataPoints {
					n += p.Value
				}
			}
		}
	}
	return n
}

func attr(s attribute.Set, k string) string {
	v, _ := s.Value(attribute.Key(k))
	return v.AsString()
}

func checkName(t *testing.T, named bool, metric string, s attribute.Set) {
	t.Helper()
	v, ok := s.Value("lock.name")
	switch {
	case named && (!ok || v.AsString() != "acct"):
		t.Errorf("%s: lock.name %q, want the mapped \"acct\"", metric, v.AsString())
	case !named && ok:
		t.Errorf("%s: lock.name %q recorded without WithNames", metric, v.AsString())
	}
	if k, _ := s.Value("lock.kind"); k.AsString() != "reentrant" {
		t.Errorf("%s: lock.kind %q", metric, k.AsString())
	}
}

// A fair wait records how many waiters were ahead of it when it started:
// two waiters queued one after the other behind a holder record 0 and 1.
func TestWaitAhead(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	o, err := otelobserve.New(meter)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	c, err := fairlock.NewClient(rdb, fairlock.WithObserver(o))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, _ := fair.New(c, "seat", fairlock.WithThreadID(9))
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	for i := range 2 {
		m, _ := fair.New(c, "seat", fairlock.WithThreadID(int64(i+1)))
		go func() { _ = m.Lock(wctx); done <- struct{}{} }()
		for deadline := time.Now().Add(15 * time.Second); waiting(t, reader) != int64(i+1); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d was not seen waiting within 15s", i)
			}
		}
	}
	stop()
	<-done
	<-done
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Histogram[int64]); ok && m.Name == "fairlock.wait.ahead" {
				for _, p := range d.DataPoints {
					found = true
					if p.Count != 2 || p.Sum != 1 {
						t.Errorf("fairlock.wait.ahead: count %d sum %d, want 2 and 1 (0 then 1 ahead)", p.Count, p.Sum)
					}
				}
			}
		}
	}
	if !found {
		t.Error("no fairlock.wait.ahead recorded")
	}
}

// Each acquisition and release is a span under the caller's, with its
// outcome; a failed release is an error span, a wait that ran out is not.
func TestTracerSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	c, err := fairlock.NewClient(rdb, fairlock.WithTracer(otelobserve.NewTracer(tp)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	a, _ := fair.New(c, "seat:1", fairlock.WithThreadID(1))
	b, _ := fair.New(c, "seat:1", fairlock.WithThreadID(2))
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLockFor(ctx, 50*time.Millisecond, 0); ok || err != nil {
		t.Fatalf("TryLockFor: %v %v", ok, err)
	}
	if err := b.Unlock(ctx); err == nil {
		t.Fatal("a non-owner's Unlock succeeded")
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	parent.End()
	type want struct {
		name   string
		key    attribute.Key // the outcome's attribute: lock.acquired, lock.released
		ok     bool
		status codes.Code
	}
	wants := []want{{"fairlock.acquire", "lock.acquired", true, codes.Unset}, {"fairlock.acquire", "lock.acquired", false, codes.Unset},
		{"fairlock.release", "lock.released", false, codes.Error}, {"fairlock.release", "lock.released", true, codes.Unset}}
	var got []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name != "request" {
			got = append(got, s)
		}
	}
	if len(got) != len(wants) {
		t.Fatalf("%d lock spans, want %d", len(got), len(wants))
	}
	for i, w := range wants {
		s := got[i]
		ok, has, other := false, false, false
		name := ""
		for _, kv := range s.Attributes {
			switch kv.Key {
			case w.key:
				ok, has = kv.Value.AsBool(), true
			case "lock.acquired", "lock.released":
				other = true // the other op's outcome: a release did not acquire
			case "lock.name":
				name = kv.Value.AsString()
			}
		}
		if s.Name != w.name || !has || other || ok != w.ok || s.Status.Code != w.status || name != "seat:1" {
			t.Errorf("span %d: %s %s=%v (set %v, other outcome %v) status=%v name=%q, want %+v",
				i, s.Name, w.key, ok, has, other, s.Status.Code, name, w)
		}
		if s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d is not a child of the caller's span", i)
		}
	}
}

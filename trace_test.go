package fairlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/reentrant"
)

type spanKey struct{}

// spanRec is a Tracer that records its spans and marks the ctx it returns.
type spanRec struct {
	mu    sync.Mutex
	spans []recSpan
}

type recSpan struct {
	fairlock.Span
	ended bool
	ok    bool
	err   error
}

func (r *spanRec) Start(ctx context.Context, s fairlock.Span) (context.Context, func(bool, error)) {
	r.mu.Lock()
	i := len(r.spans)
	r.spans = append(r.spans, recSpan{Span: s})
	r.mu.Unlock()
	return context.WithValue(ctx, spanKey{}, i), func(ok bool, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.spans[i].ended {
			panic("span ended twice")
		}
		r.spans[i].ended, r.spans[i].ok, r.spans[i].err = true, ok, err
	}
}

func (r *spanRec) all() []recSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recSpan(nil), r.spans...)
}

// ctxHook records which span's ctx each Redis command ran on.
type ctxHook struct {
	mu   sync.Mutex
	seen map[int]int // span index -> commands
}

func (h *ctxHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *ctxHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if i, ok := ctx.Value(spanKey{}).(int); ok {
			h.mu.Lock()
			h.seen[i]++
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (h *ctxHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Every acquisition and release gets one span, ended once with its
// outcome, and its Redis commands run on the span's ctx.
func TestTracerSpans(t *testing.T) {
	_, rdb := obsRedis(t)
	hook := &ctxHook{seen: map[int]int{}}
	rdb.AddHook(hook)
	rec := &spanRec{}
	c, err := fairlock.NewClient(rdb, fairlock.WithTracer(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	fm, _ := fair.New(c, "traced", fairlock.WithThreadID(1))
	other, _ := fair.New(c, "traced", fairlock.WithThreadID(2))
	rm, _ := reentrant.New(c, "plain")
	if err := fm.Lock(ctx); err != nil { // 0
		t.Fatal(err)
	}
	if ok, err := other.TryLockFor(ctx, 100*time.Millisecond, 0); ok || err != nil { // 1
		t.Fatalf("TryLockFor: %v %v", ok, err)
	}
	if err := other.Unlock(ctx); !errors.Is(err, fairlock.ErrNotHeld) { // 2
		t.Fatalf("non-owner Unlock: %v", err)
	}
	if err := fm.Unlock(ctx); err != nil { // 3
		t.Fatal(err)
	}
	if err := rm.Lock(ctx); err != nil { // 4
		t.Fatal(err)
	}
	if err := rm.Unlock(ctx); err != nil { // 5
		t.Fatal(err)
	}
	want := []struct {
		op, kind string
		ok       bool
		err      bool
	}{
		{"acquire", "fair", true, false},
		{"acquire", "fair", false, false},
		{"release", "fair", false, true},
		{"release", "fair", true, false},
		{"acquire", "reentrant", true, false},
		{"release", "reentrant", true, false},
	}
	spans := rec.all()
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d: %+v", len(spans), len(want), spans)
	}
	for i, w := range want {
		s := spans[i]
		if s.Op != w.op || s.LockKind != w.kind || !s.ended || s.ok != w.ok || (s.err != nil) != w.err {
			t.Errorf("span %d: %+v, want %+v", i, s, w)
		}
		hook.mu.Lock()
		n := hook.seen[i]
		hook.mu.Unlock()
		if n == 0 {
			t.Errorf("span %d (%s): no Redis command ran on its ctx", i, s.Op)
		}
	}
	if spans[0].Name != "traced" || spans[0].Owner != fm.Owner() {
		t.Errorf("span 0 names %q %q, want traced %q", spans[0].Name, spans[0].Owner, fm.Owner())
	}
}

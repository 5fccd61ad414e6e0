package otelobserve

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairlock-go/fairlock"
)

// Tracer is a fairlock.Tracer (fairlock.WithTracer) that records a span
// "fairlock.acquire" around each acquisition and "fairlock.release" around
// each release, child of the span in the caller's ctx, with the attributes
// lock.kind, lock.name and lock.owner (span attributes make no time
// series, so the name needs no mapping here); an acquisition's span also
// carries lock.acquired (false when its wait ran out, which is not an
// error), a release's lock.released (whether it released). A call's error
// is recorded on its span and sets its status to Error.
type Tracer struct {
	t trace.Tracer
}

// NewTracer makes a Tracer from tp (e.g. otel.GetTracerProvider()).
func NewTracer(tp trace.TracerProvider) *Tracer {
	return &Tracer{t: tp.Tracer("github.com/fairlock-go/fairlock")}
}

// Start implements fairlock.Tracer.
func (t *Tracer) Start(ctx context.Context, s fairlock.Span) (context.Context, func(bool, error)) {
	ctx, span := t.t.Start(ctx, "fairlock."+s.Op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("lock.kind", s.LockKind),
		attribute.String("lock.name", s.Name),
		attribute.String("lock.owner", s.Owner),
	))
	outcome := attribute.Key("lock.acquired")
	if s.Op == "release" {
		outcome = "lock.released"
	}
	return ctx, func(ok bool, err error) {
		span.SetAttributes(outcome.Bool(ok))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

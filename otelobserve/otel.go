// Package otelobserve is a fairlock observer (fairlock.WithObserver) that
// records OpenTelemetry metrics. It is a module of its own so that the
// fairlock module does not depend on OpenTelemetry.
//
// Instruments (all with the attribute lock.kind, and lock.name only when
// WithNames maps names to a bounded set):
//
//   - fairlock.wait.duration (histogram, s): each acquisition that waited,
//     at its grant (outcome=granted) or when it gave up (outcome=gave_up);
//   - fairlock.hold.duration (histogram, s): each hold, at its end
//     (outcome=released or lost or closed);
//   - fairlock.handoff.duration (histogram, s): a grant that followed a
//     release's wake-up, from the wake-up to the grant;
//   - fairlock.wait.ahead (histogram): on a fair lock or the fair
//     semaphore, how many waiters were ahead of a wait when it started (the
//     queue's length at join, less one);
//   - fairlock.waiting and fairlock.held (up-down counters): waits and holds
//     in progress;
//   - fairlock.renew.failures, fairlock.alerts (alert=long_wait or
//     long_hold) and fairlock.events.dropped (counters).
//
// NewTracer makes a fairlock.Tracer (fairlock.WithTracer) that records a
// span around each acquisition and release.
package otelobserve

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fairlock-go/fairlock"
)

// Observer records a client's lock events as metrics.
type Observer struct {
	names func(string) string

	wait, hold    metric.Float64Histogram
	handoff       metric.Float64Histogram
	ahead         metric.Int64Histogram
	waiting, held metric.Int64UpDownCounter
	renew, alerts metric.Int64Counter
	dropped       metric.Int64Counter
}

// Option configures an Observer.
type Option func(*Observer)

// WithNames adds the attribute lock.name, set to f(name), to every
// measurement. Lock names are unbounded when they carry ids
// ("account:42"): f must map them to a small set (a prefix, a class), or
// every name becomes a time series. Without it no name is recorded.
func WithNames(f func(name string) string) Option { return func(o *Observer) { o.names = f } }

// New makes an Observer recording through meter (from a MeterProvider:
// provider.Meter("github.com/fairlock-go/fairlock")).
func New(meter metric.Meter, opts ...Option) (*Observer, error) {
	o := &Observer{}
	for _, f := range opts {
		f(o)
	}
	var err, e error
	o.wait, e = meter.Float64Histogram("fairlock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long acquisitions that waited waited, until the grant or giving up."))
	err = errors.Join(err, e)
	o.hold, e = meter.Float64Histogram("fairlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long holds lasted, first grant to release or loss."))
	err = errors.Join(err, e)
	o.handoff, e = meter.Float64Histogram("fairlock.handoff.duration", metric.WithUnit("s"),
		metric.WithDescription("Grants that followed a release's wake-up: from the wake-up to the grant."))
	err = errors.Join(err, e)
	o.ahead, e = meter.Int64Histogram("fairlock.wait.ahead", metric.WithUnit("{waiter}"),
		metric.WithDescription("Waiters ahead of a fair wait when it started (the queue's length at join, less one)."))
	err = errors.Join(err, e)
	o.waiting, e = meter.Int64UpDownCounter("fairlock.waiting", metric.WithDescription("Acquisitions waiting."))
	err = errors.Join(err, e)
	o.held, e = meter.Int64UpDownCounter("fairlock.held", metric.WithDescription("Holds in progress."))
	err = errors.Join(err, e)
	o.renew, e = meter.Int64Counter("fairlock.renew.failures", metric.WithDescription("Watchdog renewals that got no answer."))
	err = errors.Join(err, e)
	o.alerts, e = meter.Int64Counter("fairlock.alerts", metric.WithDescription("Long waits and long holds (WithLongWaitAlert, WithLongHoldAlert)."))
	err = errors.Join(err, e)
	o.dropped, e = meter.Int64Counter("fairlock.events.dropped", metric.WithDescription("Events dropped because the observer fell behind."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, err
	}
	return o, nil
}

// Observe records e.
func (o *Observer) Observe(e fairlock.Event) {
	ctx := context.Background()
	if e.Kind == fairlock.EventsDropped {
		o.dropped.Add(ctx, int64(e.Dropped))
		return
	}
	base := []attribute.KeyValue{attribute.String("lock.kind", e.LockKind)}
	if o.names != nil {
		base = append(base, attribute.String("lock.name", o.names(e.Name)))
	}
	set := metric.WithAttributes(base...)
	with := func(k, v string) metric.MeasurementOption {
		return metric.WithAttributes(append(base[:len(base):len(base)], attribute.String(k, v))...)
	}
	switch e.Kind {
	case fairlock.WaitStarted:
		o.waiting.Add(ctx, 1, set)
		if e.Ahead >= 0 {
			o.ahead.Record(ctx, int64(e.Ahead), set)
		}
	case fairlock.Granted:
		if e.Waited {
			o.waiting.Add(ctx, -1, set)
			o.wait.Record(ctx, e.Duration.Seconds(), with("outcome", "granted"))
			if e.Handoff > 0 {
				o.handoff.Record(ctx, e.Handoff.Seconds(), set)
			}
		}
		if !e.Reentry {
			o.held.Add(ctx, 1, set)
		}
	case fairlock.WaitEnded:
		o.waiting.Add(ctx, -1, set)
		o.wait.Record(ctx, e.Duration.Seconds(), with("outcome", "gave_up"))
	case fairlock.Released, fairlock.Lost:
		outcome := "released"
		switch {
		case errors.Is(e.Err, fairlock.ErrClosed):
			outcome = "closed"
		case e.Kind == fairlock.Lost:
			outcome = "lost"
		}
		o.held.Add(ctx, -1, set)
		o.hold.Record(ctx, e.Duration.Seconds(), with("outcome", outcome))
	case fairlock.RenewFailed:
		o.renew.Add(ctx, 1, set)
	case fairlock.LongWait, fairlock.LongHold:
		o.alerts.Add(ctx, 1, with("alert", e.Kind.String()))
	}
}

package otelobserve_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/otelobserve"
	"github.com/fairlock-go/fairlock/reentrant"
)

// Metrics through an OpenTelemetry Meter (fairlock.WithObserver) and a span
// around each acquisition and release (fairlock.WithTracer). Here the
// providers are the SDK's with in-memory readers; in a service they are
// the ones the service exports with (otel.GetMeterProvider(), ...).
func Example() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())).Meter("example")
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	obs, err := otelobserve.New(meter)
	if err != nil {
		panic(err)
	}
	client, err := fairlock.NewClient(rdb, fairlock.WithObserver(obs), fairlock.WithTracer(otelobserve.NewTracer(tp)))
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	m, _ := reentrant.New(client, "report:daily")
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	for _, s := range spans.Ended() {
		for _, a := range s.Attributes() {
			if a.Key == "lock.name" {
				fmt.Println(s.Name(), a.Value.AsString())
			}
		}
	}
	// Output:
	// fairlock.acquire report:daily
	// fairlock.release report:daily
}

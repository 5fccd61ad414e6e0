package core

import (
	"context"
	"runtime/metrics"
	"testing"
	"time"
)

func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Calls with a context that can end run on the session's workers: one after
// another they reuse one goroutine instead of starting one each (issue 23:
// a goroutine per call cost about 25 µs of a 23 µs call), and the workers
// end once the session's stop channel is closed.
func TestCallsReuseAWorkerAndWorkersEnd(t *testing.T) {
	stop := make(chan struct{})
	w := newWorkers(stop)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := how{w: w}
	// The first call starts the worker.
	if _, err := callC(ctx, h, nil, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	before := goroutinesCreated()
	const calls = 200
	for i := range calls {
		v, err := callC(ctx, h, nil, func(context.Context) (int, error) { return i, nil })
		if err != nil || v != i {
			t.Fatalf("call %d: %v %v", i, v, err)
		}
	}
	// A worker that has not reached its receive again when the next call
	// comes makes that call start another one; sequential calls still
	// reuse workers nearly always.
	if n := goroutinesCreated() - before; n > calls/4 {
		t.Fatalf("%d sequential calls started %d goroutines: the workers are not reused", calls, n)
	}

	// A worker blocked in its call keeps the caller free: the caller
	// returns at its ctx's end, the call finishes later on the worker.
	release := make(chan struct{})
	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := callC(ctx2, h, nil, func(context.Context) (int, error) { <-release; return 0, nil })
		done <- err
	}()
	cancel2()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("the call on a cancelled ctx returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the caller did not return when its ctx ended")
	}
	close(release)

	// Once stop is closed, no worker is left waiting for calls.
	close(stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case w.work <- func() {}:
			// A worker still took a call (it had not seen stop yet).
		default:
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a worker still takes calls 30 s after its session's stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

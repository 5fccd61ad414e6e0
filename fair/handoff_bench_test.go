package fair_test

import (
	"testing"

	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// BenchmarkHandoff: two goroutines, each with its own handle on one client,
// pass the fair lock back and forth, on each engine; each op is one
// handoff, from the start of the holder's Unlock to the return of the
// waiter's Lock (the waiter is queued, subscribed and asleep). handoff-µs is
// the median; compare it with BenchmarkHandoffFloor's from the same run
// (the reentrant package has the same pair).
func BenchmarkHandoff(b *testing.B) {
	for _, e := range []struct {
		name string
		opts []fair.Option
	}{{"redisson", nil}, {"scalable", []fair.Option{fair.WithEngine(fair.Scalable)}}} {
		b.Run(e.name, func(b *testing.B) {
			be := redistest.Real(b)
			c := newClient(b, be.Client(b))
			name := redistest.Prefix(b) + "lock"
			redistest.BenchHandoff(b, newMutex(b, c, name, e.opts...), newMutex(b, c, name, e.opts...))
		})
	}
}

// BenchmarkHandoffFloor is BenchmarkHandoff's floor on the same server
// (redistest.BenchHandoffFloor).
func BenchmarkHandoffFloor(b *testing.B) { redistest.BenchHandoffFloor(b) }

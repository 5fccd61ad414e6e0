package fair_test

import (
	"context"
	"testing"

	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// BenchmarkLockUnlock is an uncontended Lock+Unlock cycle of each engine on
// a real redis-server: ns/op and allocs/op, to set beside reentrant's
// BenchmarkLockUnlock (go test -bench LockUnlock ./reentrant/ ./fair/).
func BenchmarkLockUnlock(b *testing.B) {
	for _, e := range []struct {
		name string
		opts []fair.Option
	}{{"redisson", nil}, {"scalable", []fair.Option{fair.WithEngine(fair.Scalable)}}} {
		b.Run(e.name, func(b *testing.B) {
			be := redistest.Real(b)
			c := newClient(b, be.Client(b))
			m := newMutex(b, c, redistest.Prefix(b)+"lock", e.opts...)
			ctx := context.Background()
			// load the scripts once, outside the measurement
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package clustertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
)

// BenchmarkLockUnlock is an uncontended Lock+Unlock cycle of the reentrant
// and the fair lock on the single loopback redis-server, on a primary with
// one replica (plain client), and on the 3-primary/3-replica cluster, with
// the replica acknowledgement (WAIT after each acquisition) off and on. On
// the single server there are no replicas, so there is nothing to
// acknowledge. Compare ns/op across the
// sub-benchmarks of one run for the cluster/single ratio and the cost of
// WAIT.
func BenchmarkLockUnlock(b *testing.B) {
	type setup struct {
		name string
		rdb  func(b *testing.B) redis.UniversalClient
		ack  time.Duration
	}
	single := func(b *testing.B) redis.UniversalClient { return redistest.Real(b).Client(b) }
	replicated := func(b *testing.B) redis.UniversalClient { return replicatedPrimary(b) }
	cluster := func(b *testing.B) redis.UniversalClient { return redistest.SharedCluster(b).Client(b) }
	for _, s := range []setup{
		{"single", single, 0}, // default settings: ack on, no replicas to wait for
		{"replicated/wait=off", replicated, -1},
		{"replicated/wait=on", replicated, 0},
		{"cluster/wait=off", cluster, -1},
		{"cluster/wait=on", cluster, 0},
	} {
		for _, kind := range []string{"reentrant", "fair"} {
			b.Run(s.name+"/"+kind, func(b *testing.B) {
				rdb := s.rdb(b)
				c := newClient(b, rdb, fairlock.WithReplicaAck(s.ack))
				name := redistest.Prefix(b) + "bench"
				var lock, unlock func(context.Context) error
				if kind == "fair" {
					m, err := fair.New(c, name)
					if err != nil {
						b.Fatal(err)
					}
					lock, unlock = m.Lock, m.Unlock
				} else {
					m, err := reentrant.New(c, name)
					if err != nil {
						b.Fatal(err)
					}
					lock, unlock = m.Lock, m.Unlock
				}
				ctx := context.Background()
				// load the scripts and the replica count, unmeasured
				if err := lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := unlock(ctx); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if err := lock(ctx); err != nil {
						b.Fatal(err)
					}
					if err := unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkRoundTrip is one GET through the same clients: the transport
// floor that BenchmarkLockUnlock's cluster/single ratio is to be read
// against (a Lock+Unlock cycle is two script calls).
func BenchmarkRoundTrip(b *testing.B) {
	for _, s := range []struct {
		name string
		rdb  func(b *testing.B) redis.UniversalClient
	}{
		{"single", func(b *testing.B) redis.UniversalClient { return redistest.Real(b).Client(b) }},
		{"cluster", func(b *testing.B) redis.UniversalClient { return redistest.SharedCluster(b).Client(b) }},
	} {
		b.Run(s.name, func(b *testing.B) {
			rdb := s.rdb(b)
			ctx := context.Background()
			key := redistest.Prefix(b) + "k"
			if err := rdb.Get(ctx, key).Err(); err != nil && err != redis.Nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := rdb.Get(ctx, key).Err(); err != redis.Nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var replicated struct {
	once sync.Once
	s    *redistest.Sentinels
	err  error
}

// replicatedPrimary is a client of the primary of a primary+replica pair
// (the Sentinel setup, started once per test binary, stopped by TestMain).
func replicatedPrimary(b *testing.B) *redis.Client {
	replicated.once.Do(func() { replicated.s, replicated.err = redistest.StartSentinels("") })
	if replicated.err != nil {
		b.Skip(replicated.err)
	}
	c := redis.NewClient(&redis.Options{Addr: replicated.s.Primary.Addr})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

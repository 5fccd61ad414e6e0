package etcd

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/etcd/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The benchmarks run on one embedded member with fsync on, as a real etcd.
// The hand-off is the time from the holder's Unlock call to the return of
// the Lock of a waiter (another client) queued well before it (reported as
// handoff-ms, the median; p90-ms too), beside etcd's concurrency.Mutex on
// the same server, and one Put for scale.

func benchServer(b *testing.B) (*etcdtest.Server, *clientv3.Client, *clientv3.Client) {
	srv := etcdtest.Start(b, etcdtest.Options{Fsync: true})
	return srv, etcdtest.Client(b, srv.Endpoint), etcdtest.Client(b, srv.Endpoint)
}

func BenchmarkPut(b *testing.B) {
	_, c1, _ := benchServer(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := c1.Put(ctx, "bench/put", fmt.Sprint(i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	b.Run("fairlock-etcd", func(b *testing.B) {
		_, c1, _ := benchServer(b)
		c, err := New(c1)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(ctx)
		m, _ := c.NewMutex("bench")
		if err := m.Lock(ctx); err != nil { // the lease is granted once
			b.Fatal(err)
		}
		m.Unlock(ctx)
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
	b.Run("concurrency.Mutex", func(b *testing.B) {
		_, c1, _ := benchServer(b)
		s, err := concurrency.NewSession(c1, concurrency.WithTTL(30))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		m := concurrency.NewMutex(s, "bench-cm/")
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

// handoff measures one hand-off: hold, let the waiter queue, wait a
// little, then time Unlock → the waiter's Lock returning.
func handoffs(b *testing.B, put func() error, hold, unlock func() error, wait func(queued chan<- struct{}, got chan<- time.Time) error) {
	var d, puts []time.Duration
	for b.Loop() {
		if err := hold(); err != nil {
			b.Fatal(err)
		}
		queued, got := make(chan struct{}, 1), make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			errc <- wait(queued, got)
		}()
		<-queued
		time.Sleep(20 * time.Millisecond) // the waiter is watching
		t0 := time.Now()
		if err := unlock(); err != nil {
			b.Fatal(err)
		}
		t1 := <-got
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		d = append(d, t1.Sub(t0))
		p0 := time.Now()
		if err := put(); err != nil {
			b.Fatal(err)
		}
		puts = append(puts, time.Since(p0))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "handoff-ms")
	b.ReportMetric(float64(d[len(d)*9/10].Microseconds())/1000, "p90-ms")
	sort.Slice(puts, func(i, j int) bool { return puts[i] < puts[j] })
	b.ReportMetric(float64(puts[len(puts)/2].Microseconds())/1000, "put-ms")
	b.ReportMetric(float64(d[len(d)/2])/float64(puts[len(puts)/2]), "handoff/put")
}

func BenchmarkHandoff(b *testing.B) {
	ctx := context.Background()
	b.Run("fairlock-etcd", func(b *testing.B) {
		_, c1, c2 := benchServer(b)
		ca, _ := New(c1)
		cb, _ := New(c2)
		defer ca.Close(ctx)
		defer cb.Close(ctx)
		ma, _ := ca.NewMutex("bench")
		mb, _ := cb.NewMutex("bench")
		put := func() error { _, err := c1.Put(ctx, "bench/put", "x"); return err }
		handoffs(b, put, func() error { return ma.Lock(ctx) }, func() error { return ma.Unlock(ctx) },
			func(queued chan<- struct{}, got chan<- time.Time) error {
				_, err := mb.Acquire(ctx, AcquireOptions{Wait: Forever, Position: func(fairlock.Position) {
					select {
					case queued <- struct{}{}:
					default:
					}
				}})
				got <- time.Now()
				if err == nil {
					err = mb.Unlock(ctx)
				}
				return err
			})
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		_, c1, c2 := benchServer(b)
		sa, _ := concurrency.NewSession(c1, concurrency.WithTTL(30))
		sb, _ := concurrency.NewSession(c2, concurrency.WithTTL(30))
		defer sa.Close()
		defer sb.Close()
		ma, mb := concurrency.NewMutex(sa, "bench-cm/"), concurrency.NewMutex(sb, "bench-cm/")
		put := func() error { _, err := c1.Put(ctx, "bench/put", "x"); return err }
		handoffs(b, put, func() error { return ma.Lock(ctx) }, func() error { return ma.Unlock(ctx) },
			func(queued chan<- struct{}, got chan<- time.Time) error {
				go func() { // queued: two keys under the prefix
					for {
						r, err := c1.Get(ctx, "bench-cm/", clientv3.WithPrefix(), clientv3.WithCountOnly())
						if err == nil && r.Count == 2 {
							queued <- struct{}{}
							return
						}
						time.Sleep(time.Millisecond)
					}
				}()
				err := mb.Lock(ctx)
				got <- time.Now()
				if err == nil {
					err = mb.Unlock(ctx)
				}
				return err
			})
	})
}

// BenchmarkContended: 4 clients take turns on one lock as fast as they
// can; ns/op is the time per acquisition (a hand-off each, mostly).
func BenchmarkContended(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, lock func(i int) (func() error, func() error)) {
		var n atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for i := range 4 {
			l, u := lock(i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n.Add(1) <= int64(b.N) {
					if err := l(); err != nil {
						b.Error(err)
						return
					}
					if err := u(); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	b.Run("fairlock-etcd", func(b *testing.B) {
		srv, _, _ := benchServer(b)
		run(b, func(int) (func() error, func() error) {
			c, _ := New(etcdtest.Client(b, srv.Endpoint))
			m, _ := c.NewMutex("contended")
			return func() error { return m.Lock(ctx) }, func() error { return m.Unlock(ctx) }
		})
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		srv, _, _ := benchServer(b)
		run(b, func(int) (func() error, func() error) {
			s, _ := concurrency.NewSession(etcdtest.Client(b, srv.Endpoint), concurrency.WithTTL(30))
			m := concurrency.NewMutex(s, "contended/")
			return func() error { return m.Lock(ctx) }, func() error { return m.Unlock(ctx) }
		})
	})
}

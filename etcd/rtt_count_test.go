package etcd

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/etcd/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// rpcCount counts a client's gRPC calls by method: unary calls and opened
// streams.
type rpcCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *rpcCount) add(m string) {
	r.mu.Lock()
	r.n[m]++
	r.mu.Unlock()
}

func (r *rpcCount) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.n
	r.n = map[string]int{}
	return out
}

func countingClient(t *testing.T, endpoint string) (*clientv3.Client, *rpcCount) {
	t.Helper()
	rc := &rpcCount{n: map[string]int{}}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				rc.add(method)
				return inv(ctx, method, req, reply, cc, opts...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				rc.add(method + " (stream opened)")
				return s(ctx, desc, cc, method, opts...)
			}),
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, rc
}

// TestRoundTripsUncontended counts the gRPC calls of uncontended
// Lock+Unlock cycles, ours and concurrency.Mutex's, on one server: ours
// make two calls a cycle (the Txn that joins the queue and reads the head,
// the fenced delete), as concurrency.Mutex does, and open no stream (the
// hold's loss watch goes on the Client's open watch stream; it used to
// open a stream in most cycles).
func TestRoundTripsUncontended(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	ctx := context.Background()
	const cycles = 20
	cli, rc := countingClient(t, srv.Endpoint)
	c, err := New(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	m := mustMutex(t, c, "rtt")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	_ = m.Unlock(ctx)
	time.Sleep(100 * time.Millisecond)
	rc.take()
	for range cycles {
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	ours := rc.take()

	cli2, rc2 := countingClient(t, srv.Endpoint)
	s, err := concurrency.NewSession(cli2, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cm := concurrency.NewMutex(s, "rtt-cm/")
	time.Sleep(100 * time.Millisecond)
	rc2.take()
	for range cycles {
		if err := cm.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cm.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	theirs := rc2.take()
	t.Logf("%d cycles, ours: %v", cycles, ours)
	t.Logf("%d cycles, concurrency.Mutex: %v", cycles, theirs)
	if len(ours) != 1 || ours["/etcdserverpb.KV/Txn"] != 2*cycles {
		t.Fatalf("%d uncontended cycles made %v, want %d Txn calls and nothing else", cycles, ours, 2*cycles)
	}
}

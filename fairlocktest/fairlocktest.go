// Package fairlocktest gives a user's unit tests a ready *fairlock.Client
// backed by an embedded Redis (miniredis, in process, no server to install):
//
//	func TestCheckout(t *testing.T) {
//		c := fairlocktest.New(t) // closed, with its Redis, when t ends
//		m, _ := fair.New(c, "cart:42")
//		...
//	}
//
// The client is a real one (fairlock.NewClient over a go-redis client): the
// locks run the library's own Lua scripts on miniredis, waiters are woken by
// Redis pub/sub, the watchdog renews leases, and every option of NewClient
// can be passed to New. Nothing is mocked, so what a test sees is what the
// same calls do against Redis, within the limits below.
//
// Use NewServer when a test needs more than one client (two processes
// sharing a lock: each Client has its own client id, so they are different
// owners) or needs the server itself: Server.Miniredis to inspect keys,
// simulate an outage (Close, SetError) or move time, Server.Redis for a
// go-redis client on the same data.
//
// # Time
//
// Three clocks are involved, and a test double can move only some of them.
//
//   - Key TTLs: a lock's lease in Redis, a fair head's grace, the latches
//     that make retried calls idempotent. NewServer turns on miniredis's
//     ClockTTL, so TTLs run down with the wall clock as on Redis. (By
//     default miniredis expires a key only through FastForward: a live
//     holder would still give its lock back when its lease ran out on its
//     own clock, but the lock of a holder that died, a dead fair head's
//     grace and the latches would never expire.) Server.FastForward(d) runs
//     every TTL down by d at once.
//   - The server clock the scripts read with TIME (only the semaphores, for
//     their permits' leases and deadlines; the locks use TTLs). It is the
//     wall clock; FastForward does not move it, so it does not end a
//     semaphore permit's lease. miniredis's SetTime sets it (and, with
//     ClockTTL, a jump forward also runs the TTLs down), but it then stays
//     frozen at that instant: TIME no longer advances and TTLs no longer
//     run down until the next SetTime.
//   - The clients' clocks: the watchdog's renewals (every lease/3), a
//     waiter's retry timers and deadlines, a hold's validity (ValidUntil;
//     Done closes when an explicit lease runs out on it), and the wall clock
//     the fair scripts receive as "now" (Redisson's wait-slot deadlines).
//     These are the test process's own clocks; nothing here moves them.
//
// So FastForward ends a lease in Redis at once, but the clients learn of it
// only when they next talk to Redis:
//
//   - a new attempt by another owner (TryLock, Lock) takes the lock at once;
//   - a waiter already blocked in Lock is not woken: it retries when the TTL
//     it last read has passed on its own clock, or when a wake-up is
//     published (an Unlock);
//   - a holder kept by the watchdog sees the loss (Done closed, Err matching
//     fairlock.ErrLost) at its next renewal, lease/3 later in real time
//     (pass fairlock.WithLease with a short lease to make that quick);
//   - a holder with an explicit lease sees it when that lease runs out on
//     its own clock, or at its Unlock (fairlock.ErrNotHeld).
//
// Nothing makes a fair waiter's wait slot (default 5 min) pass faster but a
// shorter one (fairlock.WithWaitSlot). A test that needs the clients to
// react to a lease running out is usually simpler with a short lease, in
// real time, than with FastForward.
//
// # What else differs from Redis
//
// miniredis is a single Redis server: no cluster, no replicas (the
// replica-ack wait finds none and is skipped), no persistence, no failover.
// Scripts run atomically, as on Redis, with one difference: Redis freezes
// its clock for key expiry while a script runs, and miniredis's ClockTTL
// does not, so a key whose TTL ends within a script's microseconds can
// vanish between two of its calls. Outages and error replies can be staged
// with miniredis's own tools (Close and Restart, SetError of
// Server.Miniredis), but neither their timing nor go-redis's reconnects are
// those of a real server. For those faults and for real-Redis behaviour, the
// library's own tests run on a real redis-server as well; a user's unit
// tests rarely need to.
package fairlocktest

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
)

// Server is an embedded Redis for one test, with a go-redis client on it.
// Everything it made is closed when the test ends (testing.TB's Cleanup).
type Server struct {
	mini *miniredis.Miniredis
	rdb  *redis.Client
}

// NewServer starts a miniredis for t, with TTLs that run down with the wall
// clock as on Redis (see Time in the package doc), and a go-redis client on
// it. Both are closed when t ends, after every Client made from the server.
// It must be called from the test's goroutine (it may call t.Fatal).
func NewServer(t testing.TB) *Server {
	t.Helper()
	mini := miniredis.NewMiniRedis()
	if err := mini.Start(); err != nil {
		t.Fatalf("fairlocktest: starting miniredis: %v", err)
	}
	t.Cleanup(mini.Close)
	mini.ClockTTL(true)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return &Server{mini: mini, rdb: rdb}
}

// Client makes a fairlock.Client on the server with opts (fairlock.WithLease,
// fairlock.WithWaitSlot, ...), closed when t ends, before the server. Each
// call makes a new Client with its own client id: several of them are
// several processes sharing the locks. A Close that does not finish cleanly
// (fairlock.Client.Close returned an error) fails t. It must be called from
// the test's goroutine (it may call t.Fatal).
func (s *Server) Client(t testing.TB, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(s.rdb, opts...)
	if err != nil {
		t.Fatalf("fairlocktest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("fairlocktest: closing the client: %v", err)
		}
	})
	return c
}

// Miniredis returns the embedded server, to inspect keys (Keys, TTL, Dump),
// to stage faults (SetError, Close, Restart) or to move time (FastForward,
// SetTime; see Time in the package doc).
func (s *Server) Miniredis() *miniredis.Miniredis { return s.mini }

// Redis returns the go-redis client the server's Clients use. It is shared:
// do not close it (the server closes it when the test ends).
func (s *Server) Redis() *redis.Client { return s.rdb }

// Addr returns the server's host:port, to connect other clients to it.
func (s *Server) Addr() string { return s.mini.Addr() }

// FastForward runs every key's TTL down by d at once, as if d had passed in
// Redis: leases shorter than d end, and so do latches and fair graces. It
// does not move TIME nor any client's clock: clients learn of an ended lease
// only when they next talk to Redis (see Time in the package doc).
func (s *Server) FastForward(d time.Duration) { s.mini.FastForward(d) }

// New starts a Server for t and returns a Client on it made with opts: the
// one-line test double. Everything is closed when t ends. Use NewServer
// when the test also needs the server or a second client.
func New(t testing.TB, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	return NewServer(t).Client(t, opts...)
}

// Package fairlock is a distributed lock engine on Redis, faithful to the
// design of Redisson (the Java library): a reentrant lock (package
// reentrant, Redisson's RLock) and a fair FIFO lock (package fair, Redisson's
// RFairLock), wire-compatible with Redisson so Go and Java services can share
// one lock.
//
// Make one Client per process over any go-redis client and build locks from
// it:
//
//	c, err := fairlock.NewClient(rdb)
//	...
//	defer c.Close()
//	m, err := fair.New(c, "seats")
//	if err := m.Lock(ctx); err != nil { ... }
//	defer m.Unlock(ctx)
//
// The Client owns what all its locks share: the client id (a random UUID,
// the first half of every owner id "<client-uuid>:<thread-id>"), one pub/sub
// connection that carries every waiter's wake-ups, and one watchdog goroutine
// that renews the lease of every lock held without an explicit lease.
package fairlock

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/core"
	_ "github.com/fairlock-go/fairlock/lua" // the scripts the locks run (wire.Load)
)

// Errors returned by the locks. Test them with errors.Is.
var (
	// ErrNotHeld: Unlock by an owner that does not hold the lock. Nothing
	// was changed.
	ErrNotHeld = core.ErrNotHeld
	// ErrCanceled: a wait ended by its context. The error also matches
	// the context's error (context.Canceled or context.DeadlineExceeded).
	ErrCanceled = core.ErrCanceled
	// ErrLost: a held lock was lost (its lease ran out, it was deleted, or
	// Redis lost it); Mutex.Err returns it after Done is closed.
	ErrLost = core.ErrLost
	// ErrClosed: the Client was closed.
	ErrClosed = core.ErrClosed
	// ErrInvalidName: an empty name, or one whose braces do not form a
	// Redis hash tag.
	ErrInvalidName = core.ErrInvalidName
	// ErrNoReplicaAck: the lock was taken on the primary but no replica
	// acknowledged it within the replica-ack timeout; the acquisition was
	// undone. See WithReplicaAck.
	ErrNoReplicaAck = core.ErrNoReplicaAck
	// ErrInvalidValue: a nil client or context, a negative duration, or a
	// setting out of range.
	ErrInvalidValue = core.ErrInvalidValue
	// ErrUnavailable: Redis did not answer within a call's bound: a wait
	// that found Redis unreachable for longer than its outage budget
	// (WithOutageBudget), or a timed call (TryLock, TryLockFor) whose
	// attempt or earlier give-back did not get through within its bound.
	// The error names the address and wraps the last Redis error.
	ErrUnavailable = core.ErrUnavailable
)

// Client is one process's connection to the locks on a Redis deployment.
// It is safe for concurrent use; make one and share it. Close it when done.
type Client struct {
	s *core.Session
}

func init() {
	core.RegisterUnwrap(func(x any) *core.Session {
		if c, ok := x.(*Client); ok && c != nil {
			return c.s
		}
		return nil
	})
}

// Option configures a Client. For every option that takes a duration or a
// count, 0 keeps the default; a value the option does not define is
// refused by NewClient with ErrInvalidValue.
type Option func(*core.Config)

// invalid records, on the first out-of-range option only, an error
// matching ErrInvalidValue that names the option and its value; NewClient
// returns it.
func invalid(c *core.Config, option string, v any, why string) {
	if c.Invalid == nil {
		c.Invalid = fmt.Errorf("%w: %s(%v): %s", ErrInvalidValue, option, v, why)
	}
}

// WithLease sets the watchdog lease (Redisson's lockWatchdogTimeout): the
// lease of a lock taken without an explicit lease, renewed every lease/3
// while the holder lives. Default 30 s (0 keeps it); any other value must
// be at least 3 ms (NewClient fails with ErrInvalidValue otherwise).
func WithLease(d time.Duration) Option {
	return func(c *core.Config) {
		if d != 0 && d < 3*time.Millisecond {
			invalid(c, "WithLease", d, "the watchdog lease must be at least 3ms")
			return
		}
		c.Lease = d
	}
}

// WithWaitSlot sets the fair lock's default wait slot (Redisson's
// fairLockWaitTimeout): how long a queued waiter may go without taking the
// lock before it is treated as dead. Default 5 min (0 keeps it); any
// other value must be at least 1 ms (NewClient fails with ErrInvalidValue
// otherwise).
func WithWaitSlot(d time.Duration) Option {
	return func(c *core.Config) {
		if d != 0 && d < time.Millisecond {
			invalid(c, "WithWaitSlot", d, "the wait slot must be at least 1ms")
			return
		}
		c.WaitSlot = d
	}
}

// WithHeadGrace sets how long the head of a fair queue has to take a lock
// that became free (not in Redisson; see docs/design.md). A head that lets
// its grace run out is woken and given a second one; one that lets both
// run out is pruned as dead by its followers, so a Redis pause that eats a
// grace costs a live head nothing. Default 5 s (0 keeps it); a negative
// value turns it off, which is Redisson's behaviour: a dead head then
// blocks the queue for its whole slot. A positive grace must be at least
// 1 ms (the grace is counted in whole milliseconds; NewClient fails with
// ErrInvalidValue otherwise).
func WithHeadGrace(d time.Duration) Option {
	return func(c *core.Config) {
		if d > 0 && d < time.Millisecond {
			invalid(c, "WithHeadGrace", d, "a positive grace must be at least 1ms (a negative value turns it off)")
			return
		}
		c.HeadGrace = d
	}
}

// WithLatchTTL sets how long the outcome of an unlock or an acquisition is
// kept in Redis (a small key per call), so that a retried or late copy of
// the call returns it instead of acting twice. A copy that reaches Redis
// later than this after the first one (a network stall longer than the
// latch) is not recognised. Default 10 s (0 keeps it); any other value must
// be at least 1 ms (NewClient fails with ErrInvalidValue otherwise).
func WithLatchTTL(d time.Duration) Option {
	return func(c *core.Config) {
		if d != 0 && d < time.Millisecond {
			invalid(c, "WithLatchTTL", d, "the latch lifetime must be at least 1ms")
			return
		}
		c.LatchTTL = d
	}
}

// WithCleanupTimeout bounds the work done after a caller's context has
// ended: Unlock with a dead context finishes its release within it. An
// acquisition whose context ends returns at once; leaving the queue (or
// voiding a request whose outcome is unknown) goes on in the background,
// where what cannot be done now (Redis unreachable) is retried, and a wait
// that ran out waits for it at most this bound. It also bounds the
// releases Close makes. Default 2 s (0 keeps it). A negative value is
// refused (NewClient fails with ErrInvalidValue).
func WithCleanupTimeout(d time.Duration) Option {
	return func(c *core.Config) {
		if d < 0 {
			invalid(c, "WithCleanupTimeout", d, "the cleanup timeout must be positive (0 keeps the default)")
			return
		}
		c.CleanupTime = d
	}
}

// WithRenewBatch sets how many locks one renewal call covers. Default 100
// (0 keeps it). A negative value is refused (NewClient fails with
// ErrInvalidValue).
func WithRenewBatch(n int) Option {
	return func(c *core.Config) {
		if n < 0 {
			invalid(c, "WithRenewBatch", n, "a renewal call covers at least 1 lock (0 keeps the default)")
			return
		}
		c.RenewBatch = n
	}
}

// WithShardedPubSub makes the scripts publish with SPUBLISH and waiters
// subscribe with SSUBSCRIBE (Redis 7+), or not. Default: on for a
// *redis.ClusterClient whose servers know sharded pub/sub (decided at the
// first lock operation, like Redisson's default shardedSubscriptionMode
// AUTO, so that Go and Java clients of one lock hear each other's
// wake-ups), off otherwise.
func WithShardedPubSub(on bool) Option {
	return func(c *core.Config) { c.ShardedPubSub, c.ShardedSet = on, true }
}

// WithReplicaAck sets how long, after each acquisition, the client waits
// (Redis WAIT) for a replica of the lock's primary to acknowledge it, like
// Redisson's synced scripts. It applies only when the primary has replicas
// (INFO replication, re-read every 5 s); when none acknowledges, the
// acquisition is undone and the call fails with ErrNoReplicaAck. This makes
// a failover right after an acquisition far less likely to lose the lock,
// not impossible (see docs/design.md). Default 1 s (0 keeps it); a
// negative value turns it off.
func WithReplicaAck(timeout time.Duration) Option {
	return func(c *core.Config) { c.ReplicaAck = timeout }
}

// WithFunctions(false) makes the locks send their scripts with EVALSHA (and
// EVAL), never as Redis Functions. By default, on a *redis.Client or a
// *redis.ClusterClient whose servers have Functions (Redis 7 and later),
// each script is loaded once as a function library named fairlock_<sha1 of
// the script> (FUNCTION LOAD, on a cluster on the primary of the lock's
// slot) and sent with FCALL, which saves Redis the definition of its shared
// functions at every call; a server without Functions, a user not allowed
// FUNCTION LOAD or FCALL, and ring clients keep EVALSHA by themselves. Turn
// it off where libraries must not be loaded into the server. It applies to
// rdb: every Client made over the same go-redis client sends EVALSHA from
// then on. WithFunctions(true) is the default.
func WithFunctions(on bool) Option {
	return func(c *core.Config) { c.NoFunctions = !on }
}

// WithOutageBudget bounds how long a wait with no end of its own (Lock,
// LockWithLease, a Forever wait; a semaphore's or Seats' too) goes on while
// Redis does not answer: counted from the send of the first attempt of the
// current run of failed attempts (a timeout, a refused or reset
// connection, LOADING, ...); any definite answer ends the run, so a blip
// shorter than the budget costs nothing, not even a fair waiter's place.
// Past it, the wait ends at its next failed attempt with an error matching
// ErrUnavailable that names the address and wraps the last Redis error;
// what the wait left is given back in the background, as when ctx ends.
//
// Default: the longer of two head graces (WithHeadGrace) and the watchdog
// lease (WithLease), 30 s with the defaults. By then a fair head cut off
// from Redis has lost its turn (its followers prune a head that let two
// graces run out), and every watchdog-kept hold whose holder could not
// reach Redis has ended: waiting on keeps nothing the waiter could count
// on. A negative value turns it off (wait until ctx ends, as before issue
// 30). Timed calls (TryLock, TryLockFor) have a tighter bound of their own.
func WithOutageBudget(d time.Duration) Option { return func(c *core.Config) { c.OutageBudget = d } }

// NewClient makes a Client over rdb (a *redis.Client, *redis.ClusterClient,
// a Sentinel-backed client, or any redis.UniversalClient), with any of
// go-redis's settings: every call the locks make is bounded by its context
// whether or not rdb has ContextTimeoutEnabled (see docs/design.md). It sends
// nothing to Redis yet. A nil rdb, typed or not, a nil option and an
// option given a value out of its range (each option's doc says which) are
// refused with ErrInvalidValue, naming the option and the value. Close does not close rdb.
func NewClient(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	var cfg core.Config
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidValue, i)
		}
		o(&cfg)
	}
	s, err := core.NewSession(rdb, cfg)
	if err != nil {
		return nil, err
	}
	return &Client{s: s}, nil
}

// ID is the client's UUID, the first part of its owner ids ("" for a zero
// Client).
func (c *Client) ID() string {
	if c == nil || c.s == nil {
		return ""
	}
	return c.s.ID
}

// Close ends everything the client started. After it returns:
//   - every lock call still waiting has returned ErrClosed and left its
//     place in a fair queue (or, Redis being unreachable, gave up trying
//     within the cleanup timeout);
//   - every hold has ended: its Done channel is closed and Err matches
//     ErrClosed; each held lock was released in Redis, best effort, within
//     the cleanup timeout (WithCleanupTimeout); a release that could not be
//     made then ends with the lock's lease;
//   - new acquisitions fail with ErrClosed;
//   - the watchdog and the pub/sub connections are stopped.
//
// Close is bounded: it waits at most about three cleanup timeouts plus one
// renewal period (lease/3) and a few seconds, and with a healthy Redis it
// returns at once. It does not close the Redis client. Closing a zero
// Client, or closing twice, is a no-op.
func (c *Client) Close() error {
	if c == nil || c.s == nil {
		return nil
	}
	return c.s.Close()
}

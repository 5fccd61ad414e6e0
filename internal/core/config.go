package core

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// Config holds a session's settings. Zero fields take the defaults.
type Config struct {
	Lease         time.Duration // watchdog lease (Redisson lockWatchdogTimeout); default 30 s
	WaitSlot      time.Duration // fair lock wait slot (fairLockWaitTimeout); default 5 min
	HeadGrace     time.Duration // fair lock head grace; default 5 s; negative turns it off
	LatchTTL      time.Duration // unlock latch lifetime; default 10 s
	CleanupTime   time.Duration // bound on Unlock / give-up cleanup run after ctx ended; default 2 s
	RenewBatch    int           // keys per renewal call; default 100
	ShardedPubSub bool          // publish with SPUBLISH (Redis 7+ cluster)
	ShardedSet    bool          // ShardedPubSub was chosen; else a ClusterClient decides at first use (Redisson's AUTO)
	ReplicaAck    time.Duration // WAIT timeout after an acquisition (see replicas.go); default 1 s; negative turns it off
	OutageBudget  time.Duration // how long a wait goes on while Redis does not answer; default max(2 head graces, lease); negative: until ctx ends
	NoFunctions   bool          // send the scripts with EVALSHA, never as Redis Functions (WithFunctions(false))

	Observer Observer      // receives the locks' events (observe.go); nil: none, and no cost
	LongWait time.Duration // report a wait lasting this long (LongWait event); 0: off
	LongHold time.Duration // report a hold lasting this long (LongHold event); 0: off
	Tracer   Tracer        // starts a span around each acquisition and release (trace.go); nil: none, and no cost

	// Invalid is the first option given an out-of-range value (the option
	// names itself and the value); NewSession refuses it.
	Invalid error

	// Set only by tests, through the options below, when the client is
	// made; never changed on a live session.
	Scripts *wire.Scripts // the scripts the locks run; default wire.Default()
	// SemFairScripts are the fair semaphore's; default wire.SemFairDefault().
	SemFairScripts *wire.SemFairScripts
	// SeatsScripts are the multi-seat hold's; default wire.SeatsDefault().
	SeatsScripts *wire.SeatsScripts
	WallClock    func() int64 // the wall clock in Unix ms the fair scripts read ("now"); default time.Now
}

// WithScripts makes a client run scripts (a test's deliberately broken
// variant, wire.Edit). It is a client option: pass it to fairlock.NewClient.
func WithScripts(scripts *wire.Scripts) func(*Config) {
	return func(c *Config) { c.Scripts = scripts }
}

// WithSemFairScripts is WithScripts for the fair semaphore's scripts.
func WithSemFairScripts(scripts *wire.SemFairScripts) func(*Config) {
	return func(c *Config) { c.SemFairScripts = scripts }
}

// WithSeatsScripts is WithScripts for the multi-seat hold's scripts
// (package multi's Seats, and their renewal).
func WithSeatsScripts(scripts *wire.SeatsScripts) func(*Config) {
	return func(c *Config) { c.SeatsScripts = scripts }
}

// WithWallClock makes a client read its wall clock (the fair scripts' "now")
// from clock, e.g. a SkewedClock a fault test shifts. The local monotonic
// clock that times leases and waits is not affected. A client option.
func WithWallClock(clock func() int64) func(*Config) {
	return func(c *Config) { c.WallClock = clock }
}

// SkewedClock is a wall clock a test can shift while a client reads it
// (WithWallClock(clock.UnixMilli)): time.Now plus the skew set last.
type SkewedClock struct{ ms atomic.Int64 }

// Set makes the clock read d ahead of time.Now (behind when negative).
func (c *SkewedClock) Set(d time.Duration) { c.ms.Store(d.Milliseconds()) }

// UnixMilli reads the clock.
func (c *SkewedClock) UnixMilli() int64 { return time.Now().UnixMilli() + c.ms.Load() }

func (c *Config) fill() error {
	if c.Invalid != nil {
		return c.Invalid
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Lease, 30*time.Second)
	def(&c.WaitSlot, 5*time.Minute)
	def(&c.HeadGrace, 5*time.Second)
	def(&c.LatchTTL, 10*time.Second)
	def(&c.CleanupTime, 2*time.Second)
	def(&c.ReplicaAck, time.Second)
	if c.OutageBudget == 0 {
		// Two head graces: a fair head cut off from Redis for that long
		// has lost its turn (its followers prune it); a lease: every hold
		// kept by a watchdog that could not reach Redis for that long has
		// ended. Waiting on keeps nothing a waiter could still count on.
		c.OutageBudget = max(2*c.HeadGrace, c.Lease)
	}
	if c.RenewBatch == 0 {
		c.RenewBatch = 100
	}
	if c.SemFairScripts == nil {
		c.SemFairScripts = wire.SemFairDefault()
	}
	if c.SeatsScripts == nil {
		c.SeatsScripts = wire.SeatsDefault()
	}
	if c.Scripts == nil {
		c.Scripts = wire.Default()
	}
	if c.WallClock == nil {
		c.WallClock = func() int64 { return time.Now().UnixMilli() }
	}
	switch {
	case c.Lease < 3*time.Millisecond:
		return fmt.Errorf("%w: lease %v (need at least 3ms)", ErrInvalidValue, c.Lease)
	case c.WaitSlot < time.Millisecond:
		return fmt.Errorf("%w: wait slot %v", ErrInvalidValue, c.WaitSlot)
	case c.LongWait < 0 || c.LongHold < 0:
		return fmt.Errorf("%w: long-wait alert %v, long-hold alert %v", ErrInvalidValue, c.LongWait, c.LongHold)
	case c.LatchTTL < time.Millisecond || c.CleanupTime < 0 || c.RenewBatch < 0:
		return fmt.Errorf("%w: latch %v, cleanup %v, batch %d", ErrInvalidValue, c.LatchTTL, c.CleanupTime, c.RenewBatch)
	}
	return nil
}

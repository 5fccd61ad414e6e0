// Package core is the machinery shared by the reentrant and the fair lock:
// the per-process session (client id, Redis client, scripts, pub/sub hub,
// watchdog, settings), the errors, and the acquire / wait / unlock loops that
// both locks run over their own scripts (an Engine).
package core

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/pubsub"
	"github.com/fairlock-go/fairlock/internal/watchdog"
	"github.com/fairlock-go/fairlock/lua"
)

// Errors shared by every lock. Packages fairlock, reentrant and fair export
// the same values.
var (
	ErrNotHeld      = errors.New("fairlock: lock not held")
	ErrCanceled     = errors.New("fairlock: lock wait ended by its context")
	ErrLost         = errors.New("fairlock: lock lost")
	ErrClosed       = errors.New("fairlock: client closed")
	ErrInvalidName  = lua.ErrInvalidName
	ErrInvalidValue = errors.New("fairlock: invalid argument")
)

// Config holds a session's settings. Zero fields take the defaults.
type Config struct {
	Lease         time.Duration // watchdog lease (Redisson lockWatchdogTimeout); default 30 s
	WaitSlot      time.Duration // fair lock wait slot (fairLockWaitTimeout); default 5 min
	HeadGrace     time.Duration // fair lock head grace; default 5 s; negative turns it off
	LatchTTL      time.Duration // unlock latch lifetime; default 10 s
	CleanupTime   time.Duration // bound on Unlock / give-up cleanup run after ctx ended; default 5 s
	RenewBatch    int           // keys per renewal call; default 100
	ShardedPubSub bool          // publish with SPUBLISH (Redis 7+ cluster)
	ShardedSet    bool          // ShardedPubSub was chosen; else a ClusterClient decides at first use (Redisson's AUTO)
	ReplicaAck    time.Duration // WAIT timeout after an acquisition (see replicas.go); default 1 s; negative turns it off
}

func (c *Config) fill() error {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Lease, 30*time.Second)
	def(&c.WaitSlot, 5*time.Minute)
	def(&c.HeadGrace, 5*time.Second)
	def(&c.LatchTTL, 10*time.Second)
	def(&c.CleanupTime, 5*time.Second)
	def(&c.ReplicaAck, time.Second)
	if c.RenewBatch == 0 {
		c.RenewBatch = 100
	}
	switch {
	case c.Lease < 3*time.Millisecond:
		return fmt.Errorf("%w: lease %v (need at least 3ms)", ErrInvalidValue, c.Lease)
	case c.WaitSlot < time.Millisecond:
		return fmt.Errorf("%w: wait slot %v", ErrInvalidValue, c.WaitSlot)
	case c.LatchTTL < time.Millisecond || c.CleanupTime < 0 || c.RenewBatch < 0:
		return fmt.Errorf("%w: latch %v, cleanup %v, batch %d", ErrInvalidValue, c.LatchTTL, c.CleanupTime, c.RenewBatch)
	}
	return nil
}

// Session is one client: create one per process and share it.
type Session struct {
	ID       string
	RDB      redis.UniversalClient
	Scripts  *lua.Scripts
	Hub      *pubsub.Hub
	Watchdog *watchdog.Watchdog
	Config   Config

	acks       replicaAck
	nextThread atomic.Int64
	closeOnce  sync.Once
	closed     atomic.Bool
	skewMs     atomic.Int64 // test hook: added to the wall clock (SetClockSkew)
}

// WallMs is the client's wall clock in Unix milliseconds, as the fair-lock
// scripts read it (their "now" argument): time.Now plus the test skew.
func (s *Session) WallMs() int64 { return time.Now().UnixMilli() + s.skewMs.Load() }

// SetClockSkew shifts this session's wall clock (WallMs) by d. It is a test
// hook for fault tests that skew one client's clock; the local monotonic
// clock that times leases and waits is not affected.
func (s *Session) SetClockSkew(d time.Duration) { s.skewMs.Store(d.Milliseconds()) }

// NewSession starts a session over rdb: the watchdog goroutine starts now,
// the pub/sub connection at the first wait.
func NewSession(rdb redis.UniversalClient, cfg Config) (*Session, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidValue)
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Session{ID: newUUID(), RDB: rdb, Scripts: lua.Default, Config: cfg}
	mode := pubsub.Sharded(cfg.ShardedPubSub, Slot)
	if _, ok := rdb.(*redis.ClusterClient); ok && !cfg.ShardedSet {
		mode = pubsub.AutoSharded(Slot)
	}
	s.Hub = pubsub.New(rdb, 30*time.Second, mode)
	var slot watchdog.SlotFunc
	if _, ok := rdb.(*redis.ClusterClient); ok {
		slot = Slot
	}
	leaseMs := cfg.Lease.Milliseconds()
	s.Watchdog = watchdog.New(func(ctx contextT, names, owners []string) ([]bool, error) {
		return s.Scripts.Renew(ctx, s.RDB, names, owners, leaseMs)
	}, slot, cfg.Lease, cfg.RenewBatch)
	return s, nil
}

// NewThreadID hands out the thread part of an owner id: 1, 2, 3, ...
func (s *Session) NewThreadID() int64 { return s.nextThread.Add(1) }

// PubCmd is the publish command the scripts are told to use.
func (s *Session) PubCmd() string {
	if s.Hub.Sharded() {
		return lua.SPublish
	}
	return lua.Publish
}

// GraceMs is the head grace in milliseconds, 0 when off.
func (s *Session) GraceMs() int64 {
	if s.Config.HeadGrace < 0 {
		return 0
	}
	return s.Config.HeadGrace.Milliseconds()
}

// Closed reports whether Close was called.
func (s *Session) Closed() bool { return s.closed.Load() }

// Close stops the watchdog and the pub/sub connection. Locks still held are
// not released; their leases run out. It does not close the Redis client.
func (s *Session) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.Watchdog.Close()
		err = s.Hub.Close()
	})
	return err
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	h := fmt.Sprintf("%x", b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// RequestID is a fresh unlock latch id: 16 random bytes, hex.
func RequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var sessionOf func(any) *Session

// RegisterUnwrap lets package fairlock tell core how to reach the session
// inside a *fairlock.Client without exporting it to users.
func RegisterUnwrap(f func(any) *Session) { sessionOf = f }

// Of returns the session of a *fairlock.Client, or nil.
func Of(client any) *Session {
	if sessionOf == nil || client == nil {
		return nil
	}
	return sessionOf(client)
}

// ThreadLabel formats a thread id for messages.
func ThreadLabel(id int64) string { return strconv.FormatInt(id, 10) }

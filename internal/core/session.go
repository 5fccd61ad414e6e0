// Package core is the machinery shared by the reentrant and the fair lock:
// the per-process session (client id, Redis client, scripts, pub/sub hub,
// watchdog, settings), the errors, and the acquire / wait / unlock loops that
// both locks run over their own scripts (an Engine).
package core

import (
	"context"
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
	"github.com/fairlock-go/fairlock/internal/wire"
)

// Errors shared by every lock. Packages fairlock, reentrant and fair export
// the same values.
var (
	ErrNotHeld      = errors.New("fairlock: lock not held")
	ErrCanceled     = errors.New("fairlock: lock wait ended by its context")
	ErrLost         = errors.New("fairlock: lock lost")
	ErrClosed       = errors.New("fairlock: client closed")
	ErrInvalidName  = wire.ErrInvalidName
	ErrInvalidValue = errors.New("fairlock: invalid argument")
	ErrUnavailable  = errors.New("fairlock: Redis unavailable")
)

// Session is one client: create one per process and share it.
type Session struct {
	ID       string
	RDB      redis.UniversalClient
	Hub      *pubsub.Hub
	Watchdog *watchdog.Watchdog
	Config   Config

	acks       replicaAck
	nextThread atomic.Int64
	closeOnce  sync.Once
	closed     atomic.Bool

	// resendAfter: a call that lasted this long may have been resent by
	// go-redis after a timeout (the smaller of the client's read and write
	// timeouts; 0 when unknown: every call is suspect).
	resendAfter time.Duration
	// enforcesDeadlines: the client applies a context's deadline to its
	// socket I/O (see inline).
	enforcesDeadlines bool
	// work runs the calls whose context can end (call.go).
	work *workers
	// attempt is the attempt timeout: how long one Redis call of a timed
	// acquisition may last (the client's read or write timeout, the
	// longer; go-redis's 3 s when unknown or none). See bound.go.
	attempt time.Duration
	// addr names the Redis the client talks to, for errors.
	addr string

	closeCtx context.Context // ended when Close starts: waits end
	closeNow context.CancelCauseFunc
	bgCtx    context.Context // ended when Close is done: background cleanups stop
	bgStop   context.CancelFunc
	life     sync.Mutex
	active   sync.WaitGroup              // Acquire calls in progress
	bg       sync.WaitGroup              // background cleanups
	held     map[*Mutex]int              // handles with a current hold
	kinds    map[watchdog.Kind]RenewEach // renewal of each watchdog kind (guarded by life)
	watching bool                        // watch runs (from the first hold on)
	obs      *observer                   // nil: no observer (Config.Observer)
}

// WallMs is the client's wall clock in Unix milliseconds, as the fair-lock
// scripts read it (their "now" argument).
func (s *Session) WallMs() int64 { return s.Config.WallClock() }

// Scripts is the set of scripts the client's locks run.
func (s *Session) Scripts() *wire.Scripts { return s.Config.Scripts }

// SemFairScripts is the set of scripts the client's fair semaphores run.
func (s *Session) SemFairScripts() *wire.SemFairScripts { return s.Config.SemFairScripts }

// SeatsScripts is the set of scripts the client's multi-seat holds run.
func (s *Session) SeatsScripts() *wire.SeatsScripts { return s.Config.SeatsScripts }

// NewSession starts a session over rdb: the watchdog goroutine starts now,
// the pub/sub connection at the first wait.
// SubscriptionLinger is how long a fair waiter's own wake channel stays
// subscribed after the last wait on it ended (pubsub.Linger); a channel all
// waiters share (a reentrant lock's) is dropped at once (acquire.go).
var SubscriptionLinger = 2 * time.Second

func NewSession(rdb redis.UniversalClient, cfg Config) (*Session, error) {
	if isNil(rdb) {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidValue)
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Session{ID: newUUID(), RDB: rdb, Config: cfg, held: map[*Mutex]int{}}
	s.closeCtx, s.closeNow = context.WithCancelCause(context.Background())
	s.bgCtx, s.bgStop = context.WithCancel(context.Background())
	s.work = newWorkers(s.bgCtx.Done())
	if cfg.Observer != nil {
		s.obs = newObserver(cfg.Observer)
	}
	if cfg.NoFunctions {
		wire.DisableFunctions(rdb)
	}
	s.resendAfter = resendAfter(rdb)
	s.enforcesDeadlines = enforcesDeadlines(rdb)
	s.attempt, s.addr = attemptTimeout(rdb), addrOf(rdb)
	mode := pubsub.Sharded(cfg.ShardedPubSub, Slot)
	if _, ok := rdb.(*redis.ClusterClient); ok && !cfg.ShardedSet {
		mode = pubsub.AutoSharded(Slot)
	}
	// A pub/sub connection that comes back after a failure (a restart, a
	// failover) has every held lock re-checked at once: what Redis lost is
	// reported to its holder then, not at the next renewal.
	// A fair waiter's wake channel stays subscribed for SubscriptionLinger
	// after its last wait, so that an owner that waits again soon (a
	// contended lock) reuses it: no SUBSCRIBE, PING, re-check, UNSUBSCRIBE,
	// PING per wait.
	s.Hub = pubsub.New(rdb, 30*time.Second, mode, pubsub.OnRecover(func() { s.Watchdog.RenewNow() }),
		pubsub.Linger(SubscriptionLinger))
	var slot watchdog.SlotFunc
	if _, ok := rdb.(*redis.ClusterClient); ok {
		slot = Slot
	}
	s.kinds = map[watchdog.Kind]RenewEach{
		watchdog.KindLock: func(ctx context.Context, s *Session, names, owners []string, leaseMs int64) ([]wire.RenewStatus, error) {
			return s.Scripts().RenewEach(ctx, s.RDB, names, owners, leaseMs)
		},
		KindRW: func(ctx context.Context, s *Session, names, owners []string, leaseMs int64) ([]wire.RenewStatus, error) {
			return s.Scripts().RWRenewEach(ctx, s.RDB, names, owners, leaseMs)
		},
	}
	s.Watchdog = watchdog.New(s.renewFunc(s.kinds[watchdog.KindLock]), slot, cfg.Lease, cfg.RenewBatch)
	s.Watchdog.SetRenew(KindRW, s.renewFunc(s.kinds[KindRW]))
	return s, nil
}

// RenewEach renews names[i] for owners[i] to leaseMs (one script call; all
// names in one slot): a watchdog kind's renewal, also used to re-assert a
// grant whose reply came late.
type RenewEach func(ctx context.Context, s *Session, names, owners []string, leaseMs int64) ([]wire.RenewStatus, error)

// Watchdog kinds of the primitives outside package core that register their
// renewal with RegisterKind: their holds are not fields of a lock hash.
const (
	KindSemaphore     watchdog.Kind = 2 // the permit-expirable semaphore's permits
	KindFairSemaphore watchdog.Kind = 3 // the fair semaphore's holders
	KindSeats         watchdog.Kind = 4 // the fair multi-seat hold's holders (package multi)
)

// RegisterKind makes r the renewal of watchdog kind k in this session (once:
// a kind already registered keeps its renewal).
func (s *Session) RegisterKind(k watchdog.Kind, r RenewEach) {
	s.life.Lock()
	defer s.life.Unlock()
	if _, ok := s.kinds[k]; ok {
		return
	}
	s.kinds[k] = r
	s.Watchdog.SetRenew(k, s.renewFunc(r))
}

// KindRW is the watchdog kind of read-write lock holds (rw_renew.lua).
const KindRW watchdog.Kind = 1

// renewFunc adapts a renewal script call to the watchdog.
func (s *Session) renewFunc(f RenewEach) watchdog.RenewFunc {
	leaseMs := s.Config.Lease.Milliseconds()
	return func(ctx context.Context, names, owners []string) ([]watchdog.Status, error) {
		st, err := call(ctx, func(ctx context.Context) ([]wire.RenewStatus, error) { return f(ctx, s, names, owners, leaseMs) })
		if err != nil {
			if !isScriptError(err) {
				s.connError()
			}
			return nil, err
		}
		out := make([]watchdog.Status, len(st))
		for i, r := range st {
			switch r {
			case wire.RenewOK:
				out[i] = watchdog.Renewed
			case wire.RenewGone:
				out[i] = watchdog.Gone
			default:
				out[i] = watchdog.Broken
			}
		}
		return out, nil
	}
}

// NewThreadID hands out the thread part of an owner id: 1, 2, 3, ...
func (s *Session) NewThreadID() int64 { return s.nextThread.Add(1) }

// PubCmd is the publish command the scripts are told to use.
func (s *Session) PubCmd() string {
	if s.Hub.Sharded() {
		return wire.SPublish
	}
	return wire.Publish
}

// GraceMs is the head grace in milliseconds, 0 when off.
func (s *Session) GraceMs() int64 {
	if s.Config.HeadGrace < 0 {
		return 0
	}
	return s.Config.HeadGrace.Milliseconds()
}

// connError is told of a connection error on a lock call. On a cluster,
// go-redis reloads its slot map on MOVED but not after a refused dial to a
// primary that died, so the next calls would go on dialing the dead node
// until its periodic reload: ask for a reload now (go-redis runs it in the
// background and coalesces requests).
func (s *Session) connError() {
	if cc, ok := s.RDB.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
}

// Closed reports whether Close was called.
func (s *Session) Closed() bool { return s.closed.Load() }

// begin registers an acquisition in progress; false once closed.
func (s *Session) begin() bool {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed.Load() {
		return false
	}
	s.active.Add(1)
	return true
}

func (s *Session) end() { s.active.Done() }

// bind returns a context that ends when ctx ends or the session closes
// (its cause is then ErrClosed).
func (s *Session) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.closeCtx, func() { cancel(ErrClosed) })
	return c, func() { stop(); cancel(nil) }
}

// track records that m holds the lock; false once closed.
func (s *Session) track(m *Mutex) bool {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed.Load() {
		return false
	}
	s.held[m]++
	if !s.watching {
		s.watching = true
		s.bg.Add(1)
		go s.watch()
	}
	return true
}

func (s *Session) watchChannel() string { return "fairlock_client:{" + s.ID + "}" }

// WaitChannels is how many channels the hub keeps for waiters: its
// channels that have a waiter (one that only lingers, SubscriptionLinger,
// is not counted) but the session's own (watch). For tests.
func (s *Session) WaitChannels() int {
	n := s.Hub.Waited()
	if s.Hub.Has(s.watchChannel()) {
		n--
	}
	return n
}

// watch keeps the hub's connection open from the session's first hold on,
// with a subscription of the session's own (nobody publishes to it): a
// restart or a failover then breaks it at once, and its recovery has the
// holds re-checked (OnRecover above), even on a client that never waited.
// One SUBSCRIBE per client; in sharded mode it watches the node that serves
// the channel's slot only.
func (s *Session) watch() {
	defer s.bg.Done()
	for s.closeCtx.Err() == nil {
		w, err := s.Hub.Subscribe(s.closeCtx, s.watchChannel())
		if err == nil {
			<-s.closeCtx.Done()
			w.Close()
			return
		}
		t := time.NewTimer(time.Second)
		select {
		case <-t.C:
		case <-s.closeCtx.Done():
			t.Stop()
		}
	}
}

func (s *Session) untrack(m *Mutex) {
	s.life.Lock()
	defer s.life.Unlock()
	if s.held[m]--; s.held[m] <= 0 {
		delete(s.held, m)
	}
}

// cleanupTry bounds one try of a background cleanup.
const cleanupTry = 10 * time.Second

// runCleanup runs f in the background now, and again with backoff while it
// fails, until it succeeds, the session closes, or until passes; each try is
// bounded by the larger of CleanupTime and cleanupTry. A first try that fails
// with an error proving nothing was sent is not retried when giveUpUnsent is
// set. The returned channel is closed when it is over.
func (s *Session) runCleanup(until time.Time, giveUpUnsent bool, f func(context.Context) error) <-chan struct{} {
	done := make(chan struct{})
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed.Load() {
		// Closing: one try, bounded by CleanupTime (Close is waiting).
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), s.Config.CleanupTime)
			defer cancel()
			_ = f(ctx)
		}()
		return done
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer close(done)
		backoff := 100 * time.Millisecond
		for first := true; ; first = false {
			ctx, cancel := context.WithTimeout(s.bgCtx, max(s.Config.CleanupTime, cleanupTry))
			err := f(ctx)
			cancel()
			if err == nil || (first && giveUpUnsent && notSent(err)) || !time.Now().Before(until) {
				return
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.bgCtx.Done():
				t.Stop()
				return
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}()
	return done
}

// Close ends everything the session started, within bounds:
//   - new acquisitions fail with ErrClosed;
//   - every acquisition in progress returns ErrClosed after leaving its
//     queue place (its cleanup is bounded by CleanupTime);
//   - every hold ends (Done closed, Err matching ErrClosed) and is released
//     in Redis, best effort, within CleanupTime; a release that cannot be
//     made then is left to the lease;
//   - the watchdog, the background cleanups and the pub/sub connections stop.
//
// It does not close the Redis client.
func (s *Session) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.life.Lock()
		s.closed.Store(true)
		s.life.Unlock()
		s.closeNow(ErrClosed)
		bound := s.Config.CleanupTime + 2*time.Second
		waitFor(&s.active, bound)

		s.life.Lock()
		held := make([]*Mutex, 0, len(s.held))
		for m := range s.held {
			held = append(held, m)
		}
		s.life.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.Config.CleanupTime)
		var wg sync.WaitGroup
		for _, m := range held {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.closeHold(ctx)
			}()
		}
		wg.Wait()
		cancel()

		s.Watchdog.Close()
		// Background cleanups (give-ups that have not got through) get the
		// cleanup timeout to finish, then stop.
		waitFor(&s.bg, s.Config.CleanupTime)
		s.bgStop()
		waitFor(&s.bg, time.Second)
		err = s.Hub.Close()
		if s.obs != nil {
			// The events of the holds Close ended are delivered first.
			s.obs.close(s.Config.CleanupTime)
		}
	})
	return err
}

// waitFor waits for wg, at most d.
func waitFor(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// enforcesDeadlines reports whether go-redis applies a context's deadline
// to the socket reads and writes of rdb (ContextTimeoutEnabled).
func enforcesDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// inline reports whether a call on ctx may run on the caller's goroutine
// (call.go): when ctx can never end, or when it has a deadline that the
// client itself enforces on the socket. A cancellation before that deadline
// is then seen when the call returns, at the latest at the deadline.
func (s *Session) inline(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	if !s.enforcesDeadlines {
		return false
	}
	_, ok := ctx.Deadline()
	return ok
}

// how says where a call on ctx runs: inline, or on one of the session's
// workers (call.go).
func (s *Session) how(ctx context.Context) how { return how{inline: s.inline(ctx), w: s.work} }

// resendAfter is how long a call must last before go-redis may have timed
// it out and sent it again.
func resendAfter(rdb redis.UniversalClient) time.Duration {
	var rd, wr time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		rd, wr = c.Options().ReadTimeout, c.Options().WriteTimeout
	case *redis.ClusterClient:
		rd, wr = c.Options().ReadTimeout, c.Options().WriteTimeout
	default:
		return 0
	}
	norm := func(d time.Duration) time.Duration {
		switch {
		case d == 0:
			return 3 * time.Second // go-redis's default
		case d < 0:
			return time.Duration(1<<63 - 1) // no timeout: never resent for one
		}
		return d
	}
	// A write timeout is 0 by default meaning "the read timeout".
	r := norm(rd)
	w := r
	if wr != 0 {
		w = norm(wr)
	}
	return min(r, w)
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	// Version 8 (RFC 9562), never Redisson's 4: the Redisson engine's
	// scripts send this library's waiters notes, not plain wake-ups
	// (q_noted in lua/queue_redisson.lua).
	b[6] = b[6]&0x0f | 0x80
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

// reassert sets the lease of owner's hold on lock name again (the renewal
// script of the hold's watchdog kind, with leaseMs): held reports whether
// owner still held it.
func (s *Session) reassert(ctx context.Context, kind watchdog.Kind, name, owner string, leaseMs int64) (bool, error) {
	s.life.Lock()
	renew := s.kinds[kind]
	s.life.Unlock()
	if renew == nil {
		return false, fmt.Errorf("fairlock: no renewal for watchdog kind %d", kind)
	}
	st, err := renew(ctx, s, []string{name}, []string{owner}, leaseMs)
	if err != nil {
		return false, err
	}
	return len(st) == 1 && st[0] == wire.RenewOK, nil
}

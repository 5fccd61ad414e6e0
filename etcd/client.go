// Package etcd is the etcd engine of fairlock: the fair lock of package
// fair, on etcd instead of Redis. etcd replicates every write through raft
// before acknowledging it, so no failover can lose a granted lock; the cost
// is a quorum round trip (and an fsync) per write.
//
// A lock is a queue of keys under <prefix>/<name>/, one per waiting or
// holding handle, each attached to an etcd lease kept alive by its Client.
// A key's create revision is its place in the queue (etcd's revision
// counter totally orders all writes) and the hold's fencing token: the
// holder is the key with the smallest create revision, so tokens strictly
// increase from holder to holder. Each waiter watches only the key just
// ahead of it. docs/design.md ("The etcd engine") states the algorithm,
// what a partitioned holder may believe, and how the engine compares with
// the Redis engines.
//
// Errors are the root package's sentinels (fairlock.ErrNotHeld, ErrLost,
// ErrClosed, ErrCanceled, ErrInvalidValue), so errors.Is works as with the
// Redis locks, and a *Mutex is a multi.Member.
package etcd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fairlock-go/fairlock"
)

// Defaults.
const (
	// DefaultTTL is the TTL of the lease a Client keeps alive for its holds
	// (the analogue of the watchdog's lease): a holder whose process dies
	// frees its locks at most this long after its last keep-alive.
	DefaultTTL = 30 * time.Second
	// DefaultPrefix is where the locks' keys live.
	DefaultPrefix = "fairlock"
	// DefaultCleanupTimeout bounds a cleanup or release that runs after
	// the caller's context ended.
	DefaultCleanupTimeout = 5 * time.Second
)

// Option configures a Client.
type Option func(*config)

type config struct {
	ttl     time.Duration
	prefix  string
	cleanup time.Duration
}

// WithTTL sets the TTL of the Client's lease (whole seconds, at least 1 s;
// etcd raises a TTL below its minimum, 1.5 election timeouts, to that
// minimum). Default DefaultTTL.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithPrefix sets the key prefix of the Client's locks (default
// DefaultPrefix). Clients that are to exclude each other must share it.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithCleanupTimeout bounds a release or cleanup that runs on a fresh
// context because the caller's context ended. Default DefaultCleanupTimeout.
func WithCleanupTimeout(d time.Duration) Option { return func(c *config) { c.cleanup = d } }

// Client makes lock handles on one etcd client and keeps alive the lease
// their keys are attached to. It does not own the etcd client: Close ends
// this Client's holds and waits, not the connection.
type Client struct {
	cli    *clientv3.Client
	cfg    config
	id     string // the client part of owner ids
	closed chan struct{}
	// ctx ends when closed is closed (for context.AfterFunc: a call's
	// context ends with the Client without a goroutine per call).
	ctx       context.Context
	ctxCancel context.CancelFunc

	handles atomic.Int64

	mu   sync.Mutex
	sess *session            // the shared session of watchdog holds; nil: none yet or lost
	all  map[*session]bool   // every live session (shared and explicit-lease ones)
	hold map[*Mutex]struct{} // handles that hold or wait
	done bool
	// streamKept: the watch that keeps the Client's gRPC watch stream open
	// runs (see keepWatchStream).
	streamKept bool
}

// New returns a Client on cli. It talks to nobody until a lock is taken.
func New(cli *clientv3.Client, opts ...Option) (*Client, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcd: nil *clientv3.Client", fairlock.ErrInvalidValue)
	}
	cfg := config{ttl: DefaultTTL, prefix: DefaultPrefix, cleanup: DefaultCleanupTimeout}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.ttl < time.Second {
		return nil, fmt.Errorf("%w: etcd: TTL %v (at least 1 s)", fairlock.ErrInvalidValue, cfg.ttl)
	}
	if cfg.cleanup <= 0 {
		return nil, fmt.Errorf("%w: etcd: cleanup timeout %v", fairlock.ErrInvalidValue, cfg.cleanup)
	}
	if cfg.prefix == "" {
		return nil, fmt.Errorf("%w: etcd: empty prefix", fairlock.ErrInvalidValue)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{cli: cli, cfg: cfg, id: hex.EncodeToString(b[:]), closed: make(chan struct{}),
		ctx: ctx, ctxCancel: cancel, all: map[*session]bool{}, hold: map[*Mutex]struct{}{}}, nil
}

// ID is the client part of this Client's owner ids.
func (c *Client) ID() string { return c.id }

// Close ends this Client: its holds end (their leases are revoked, so every
// key of this Client goes in one etcd write per lease and the next waiters
// are let in; Done closes, Err matches fairlock.ErrClosed), waits return an
// error matching fairlock.ErrClosed, and every later call returns one. It
// waits for the revocations as long as ctx allows (and at most the cleanup
// timeout); a lease it could not revoke expires by itself within its TTL.
// Close is idempotent.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return nil
	}
	c.done = true
	close(c.closed)
	c.ctxCancel()
	sessions := make([]*session, 0, len(c.all))
	for s := range c.all {
		sessions = append(sessions, s)
	}
	c.sess = nil
	handles := make([]*Mutex, 0, len(c.hold))
	for m := range c.hold {
		handles = append(handles, m)
	}
	c.mu.Unlock()
	for _, m := range handles {
		m.closed()
	}
	ctx, cancel := c.cleanupCtx(ctx)
	defer cancel()
	var errs []error
	for _, s := range sessions {
		s.end(errClosed)
		if _, err := c.cli.Revoke(ctx, s.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var errClosed = fmt.Errorf("%w: etcd", fairlock.ErrClosed)

// keepWatchStream keeps one watch open, until Close, on the gRPC watch
// stream the holds' watches use (same context metadata: require-leader),
// on a key nobody writes. clientv3 closes a watch stream with its last
// watch and opens a new one for the next: without this every hold that
// opens its loss watch would open and tear down a stream for it (a third
// of an uncontended cycle, when every hold opened one). The watch ends with the stream (e.g. no leader);
// the next hold starts it again.
func (c *Client) keepWatchStream() {
	c.mu.Lock()
	if c.done || c.streamKept {
		c.mu.Unlock()
		return
	}
	c.streamKept = true
	c.mu.Unlock()
	go func() {
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
		defer cancel()
		go func() {
			select {
			case <-c.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
		for range c.cli.Watch(ctx, c.cfg.prefix+"\x00stream/"+c.id) {
		}
		c.mu.Lock()
		c.streamKept = false
		c.mu.Unlock()
	}()
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// cleanupCtx is ctx if it has not ended, else a fresh context carrying its
// values; either way ended after the cleanup timeout. The timeout cancels
// it rather than setting a deadline: a deadline would go with each call to
// etcd (a grpc-timeout the server sets a timer for), and the bound is the
// client's business.
func (c *Client) cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil || ctx.Err() != nil {
		if ctx == nil {
			ctx = context.Background()
		}
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(c.cfg.cleanup, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() { t.Stop(); cancel(context.Canceled) }
}

// ttlSeconds is d in whole seconds, rounded up, at least 1.
func ttlSeconds(d time.Duration) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}

// drift is the margin taken off a lease's TTL for the local clock's rate:
// 1% of it plus 2 ms (as the Redis engines).
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// session is one etcd lease and its keep-alive loop. Its validity is the
// send time of the latest keep-alive (or the grant) the server confirmed,
// plus the TTL it confirmed, less the drift margin: the leader cannot expire
// the lease before then (it refreshes a lease to a full TTL when it handles
// a keep-alive, after the client sent it; a new leader refreshes every
// lease). When the validity passes with no newer confirmation, or the
// server says the lease is gone, the session is lost: done is closed.
type session struct {
	c  *Client
	id clientv3.LeaseID

	mu    sync.Mutex
	valid time.Time // local validity
	ttl   time.Duration
	err   error         // why it ended
	done  chan struct{} // closed when the session ends (lost, closed, revoked by us)
	// ctx ends when done is closed and when the Client closes (for
	// context.AfterFunc).
	ctx       context.Context
	ctxCancel context.CancelFunc
	stop      chan struct{} // closed to stop keep-alives (explicit-lease holds)
	once      sync.Once
	sonce     sync.Once
}

// grant starts a session with a lease of ttl. keep says whether to keep it
// alive (a watchdog session) or only until stopKeepAlive.
func (c *Client) grant(ctx context.Context, ttl time.Duration) (*session, error) {
	sent := time.Now()
	resp, err := c.cli.Grant(ctx, ttlSeconds(ttl))
	if err != nil {
		return nil, err
	}
	got := time.Duration(resp.TTL) * time.Second
	s := &session{c: c, id: resp.ID, ttl: got, valid: sent.Add(got - drift(got)),
		done: make(chan struct{}), stop: make(chan struct{})}
	// s.ctx ends with the session and with the Client (Close), so an
	// acquisition's calls are bound by both through one context.AfterFunc.
	s.ctx, s.ctxCancel = context.WithCancel(c.ctx)
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		rctx, cancel := c.cleanupCtx(nil)
		_, _ = c.cli.Revoke(rctx, resp.ID)
		cancel()
		return nil, errClosed
	}
	c.all[s] = true
	c.mu.Unlock()
	go s.keepAlive()
	return s, nil
}

// shared returns the Client's watchdog session, granting one if there is
// none or the last one was lost.
func (c *Client) shared(ctx context.Context) (*session, error) {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return nil, errClosed
	}
	if s := c.sess; s != nil && !s.ended() {
		c.mu.Unlock()
		return s, nil
	}
	c.mu.Unlock()
	s, err := c.grant(ctx, c.cfg.ttl)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.sess; cur != nil && !cur.ended() {
		// Another goroutine granted one first: use it, give ours back.
		go s.revoke()
		return cur, nil
	}
	c.sess = s
	return s, nil
}

func (s *session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// validUntil is the session's local validity (zero once it ended).
func (s *session) validUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return time.Time{}
	}
	return s.valid
}

// end ends the session with err (the first reason wins).
func (s *session) end(err error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
		s.ctxCancel()
		s.stopKeepAlive()
		s.c.mu.Lock()
		delete(s.c.all, s)
		if s.c.sess == s {
			s.c.sess = nil
		}
		s.c.mu.Unlock()
	})
}

// expireIfPast ends the session now when its validity has passed (the
// keep-alive goroutine would end it too, but only when it next runs: after
// a pause of the process, a check must not get there first and be told the
// hold is still valid). The lease is given back in the background.
func (s *session) expireIfPast() {
	s.mu.Lock()
	valid, ended := s.valid, s.err != nil
	s.mu.Unlock()
	if ended || time.Now().Before(valid) {
		return
	}
	s.end(fmt.Errorf("%w: etcd: lease %x not confirmed within its TTL (validity passed at %s)",
		fairlock.ErrLost, int64(s.id), valid.Format(time.RFC3339Nano)))
	go func() {
		ctx, cancel := s.c.cleanupCtx(nil)
		defer cancel()
		_, _ = s.c.cli.Revoke(ctx, s.id)
	}()
}

func (s *session) reason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *session) stopKeepAlive() { s.sonce.Do(func() { close(s.stop) }) }

// revoke ends the session and revokes its lease (in the caller's goroutine,
// bounded by the cleanup timeout): its keys go in one etcd write.
func (s *session) revoke() {
	s.end(fmt.Errorf("%w: etcd: lease %x revoked by its client", fairlock.ErrLost, int64(s.id)))
	ctx, cancel := s.c.cleanupCtx(nil)
	defer cancel()
	_, _ = s.c.cli.Revoke(ctx, s.id)
}

// refresh sends one keep-alive and, when the server confirms it, moves the
// validity to its send time plus the TTL. It reports whether the lease is
// known to be gone (then the session has ended).
func (s *session) refresh(ctx context.Context) (gone bool, err error) {
	sent := time.Now()
	resp, err := s.c.cli.KeepAliveOnce(ctx, s.id)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.end(fmt.Errorf("%w: etcd: lease %x expired or was revoked", fairlock.ErrLost, int64(s.id)))
			return true, err
		}
		return false, err
	}
	if resp.TTL <= 0 {
		s.end(fmt.Errorf("%w: etcd: lease %x expired or was revoked", fairlock.ErrLost, int64(s.id)))
		return true, nil
	}
	ttl := time.Duration(resp.TTL) * time.Second
	s.mu.Lock()
	if v := sent.Add(ttl - drift(ttl)); v.After(s.valid) {
		s.valid = v
	}
	s.ttl = ttl
	s.mu.Unlock()
	return false, nil
}

// keepAlive sends a keep-alive every third of the TTL (more often after a
// failure, and at once when less validity is left than that) until the
// session ends or keep-alives are stopped; when the validity passes with no
// confirmed keep-alive the session is lost.
func (s *session) keepAlive() {
	next := time.Duration(0)
	failed := false // the last keep-alive got no confirmation
	for {
		s.mu.Lock()
		valid, ttl := s.valid, s.ttl
		s.mu.Unlock()
		if next == 0 {
			next = ttl / 3
		}
		left := time.Until(valid)
		if left <= 0 {
			s.end(fmt.Errorf("%w: etcd: lease %x not confirmed within its TTL (validity passed at %s)",
				fairlock.ErrLost, int64(s.id), valid.Format(time.RFC3339Nano)))
			// The holds on it have ended: if etcd can be reached, give the
			// lease back now rather than at its expiry.
			ctx, cancel := s.c.cleanupCtx(nil)
			_, _ = s.c.cli.Revoke(ctx, s.id)
			cancel()
			return
		}
		wait := min(next, left)
		if left <= next && !failed {
			// Less validity left than the time to the next keep-alive (a
			// grant or keep-alive answered late: the validity counts from
			// its send): send one now, not at the validity's end, when it
			// would be too late.
			wait = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-s.done:
			t.Stop()
			return
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if time.Until(valid) <= 0 {
			continue // the validity passed: lost (top of the loop)
		}
		// A keep-alive answered after the validity passed is no use: the
		// session is lost by then.
		deadline := time.Now().Add(max(ttl/3, 500*time.Millisecond))
		if valid.Before(deadline) {
			deadline = valid
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		gone, err := s.refresh(ctx)
		cancel()
		if gone {
			return
		}
		failed = err != nil
		if failed {
			next = min(ttl/10, 250*time.Millisecond) // try again soon
		} else {
			next = 0
		}
	}
}

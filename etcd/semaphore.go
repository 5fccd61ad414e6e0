package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fairlock-go/fairlock"
)

// Semaphore is a fair weighted semaphore on etcd with the rule of
// golang.org/x/sync/semaphore.Weighted: requests are granted in arrival
// order (etcd's create revision), and a request at the head that does not
// fit blocks every later one, even a smaller one that would fit (no
// barging). A request holds when the weights of all requests that joined
// before it, plus its own, fit in the capacity: the holders are always a
// prefix of the queue. Each request is a key <prefix>/sem/<escaped
// name>/q/… whose value is its weight, under a lease as a lock's key; the
// capacity is kept in <prefix>/sem/<escaped name>/cap, written by the first
// acquisition and checked by every later one (every handle of a name must
// be made with the same capacity: ErrInvalidValue otherwise).
//
// Waiting is herd-free: the first blocked request watches the queue for
// deletions; every other blocked request watches only the request just
// ahead of it, which writes its key once when it is granted after a wait,
// so each release or grant wakes one waiter.
type Semaphore struct {
	c        *Client
	name     string
	dir      string
	capacity int64

	once  sync.Mutex
	known bool // the capacity was checked against etcd
}

// NewSemaphore returns a handle on the semaphore name with capacity
// permits. It talks to nobody.
func (c *Client) NewSemaphore(name string, capacity int64) (*Semaphore, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: etcd: nil *Client", fairlock.ErrInvalidValue)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: etcd: empty semaphore name", fairlock.ErrInvalidName)
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("%w: etcd: capacity %d", fairlock.ErrInvalidValue, capacity)
	}
	return &Semaphore{c: c, name: name, dir: c.cfg.prefix + "/sem/" + url.PathEscape(name) + "/", capacity: capacity}, nil
}

// Permit is a hold of n permits: its own key, lease rules and loss
// notification, as a lock's hold.
type Permit struct {
	m *Mutex
	n int64
}

// Count is the number of permits held.
func (p *Permit) Count() int64 { return p.n }

// Token is the hold's create revision: unique, and increasing in arrival
// (and so grant) order.
func (p *Permit) Token() int64 {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if p.m.last == nil {
		return 0
	}
	return p.m.last.rev
}

// Release gives the permits back (the permit's key deleted; see Mutex.Unlock).
func (p *Permit) Release(ctx context.Context) error { return p.m.Unlock(ctx) }

// Done is closed when the hold ends (see Mutex.Done).
func (p *Permit) Done() <-chan struct{} { return p.m.Done() }

// Err says why the hold ended (see Mutex.Err).
func (p *Permit) Err() error { return p.m.Err() }

// ValidUntil is the hold's local validity (see Mutex.ValidUntil).
func (p *Permit) ValidUntil() time.Time { return p.m.ValidUntil() }

// Acquire takes n permits, waiting in arrival order until ctx ends. lease
// 0: the Client's lease keeps them; otherwise an explicit lease as
// Mutex.LockWithLease. n above the capacity is refused (ErrInvalidValue):
// Weighted would block until ctx ends.
func (s *Semaphore) Acquire(ctx context.Context, n int64, lease time.Duration) (*Permit, error) {
	return s.AcquireWith(ctx, n, AcquireOptions{Wait: Forever, Lease: lease})
}

// TryAcquire takes n permits waiting at most wait (0: one attempt, granted
// only when nobody waits and n permits are free). A nil Permit with a nil
// error: the wait ran out (the request left the queue).
func (s *Semaphore) TryAcquire(ctx context.Context, n int64, wait, lease time.Duration) (*Permit, error) {
	if wait < 0 {
		return nil, fmt.Errorf("%w: wait %v", fairlock.ErrInvalidValue, wait)
	}
	return s.AcquireWith(ctx, n, AcquireOptions{Wait: wait, Lease: lease})
}

// AcquireWith is the general acquisition (o.Position counts the requests
// ahead).
func (s *Semaphore) AcquireWith(ctx context.Context, n int64, o AcquireOptions) (*Permit, error) {
	if s == nil || s.c == nil {
		return nil, fmt.Errorf("%w: etcd: a zero Semaphore", fairlock.ErrInvalidValue)
	}
	if n <= 0 || n > s.capacity {
		return nil, fmt.Errorf("%w: etcd: %d permits of %d", fairlock.ErrInvalidValue, n, s.capacity)
	}
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", fairlock.ErrInvalidValue)
	}
	if err := s.checkCapacity(ctx); err != nil {
		return nil, err
	}
	m := s.c.newHandle(s.name, s.dir+"q/", s.dir+"q/", s.dir+"q/")
	m.weight, m.capacity = n, s.capacity
	ok, _, err := m.acquire(ctx, o)
	if err != nil || !ok {
		return nil, err
	}
	return &Permit{m: m, n: n}, nil
}

// checkCapacity writes the capacity if none is set and refuses a handle
// whose capacity differs from the one set.
func (s *Semaphore) checkCapacity(ctx context.Context) error {
	s.once.Lock()
	defer s.once.Unlock()
	if s.known {
		return nil
	}
	if s.c.isClosed() {
		return errClosed
	}
	key := s.dir + "cap"
	v := strconv.FormatInt(s.capacity, 10)
	resp, err := s.c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, v)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		if ctx.Err() != nil {
			return canceled(ctx)
		}
		return err
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 1 && string(kvs[0].Value) != v {
			return fmt.Errorf("%w: etcd: semaphore %q has capacity %s, not %d", fairlock.ErrInvalidValue, s.name, kvs[0].Value, s.capacity)
		}
	}
	s.known = true
	return nil
}

// runSem is a semaphore request's way through the queue (waiter.run for a
// handle with a capacity).
func (w *waiter) runSem() (ok bool, rev, hdr int64, err error) {
	m, cli := w.m, w.m.c.cli
	val := strconv.FormatInt(m.weight, 10)
	lease := clientv3.WithLease(w.sess.id)
	resp, rev, err := w.enqueue(new(newEnqueueTxn(w.key, clientv3.OpPut(w.key, val, lease))))
	if resp == nil {
		return false, 0, 0, err // err nil: the wait ran out
	}
	var (
		watch      clientv3.WatchChan
		wc         struct{ cancel context.CancelFunc }
		target     string // the watched key, or "" for the queue
		watchStart int64
		waited     bool
	)
	wc.cancel = func() {}
	defer func() { wc.cancel() }()
	var timer <-chan time.Time
	if !w.deadline.IsZero() {
		t := time.NewTimer(time.Until(w.deadline))
		defer t.Stop()
		timer = t.C
	}
	for {
		resp, err := cli.Get(w.ctx, m.block, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithMaxCreateRev(rev))
		if err != nil {
			if e := w.retry(err); e != nil {
				return false, rev, 0, e
			}
			if w.expired() {
				return false, rev, 0, nil
			}
			continue
		}
		R := resp.Header.Revision
		kvs := resp.Kvs
		if len(kvs) == 0 || string(kvs[len(kvs)-1].Key) != w.key || kvs[len(kvs)-1].CreateRevision != rev {
			return false, 0, 0, w.lostErr()
		}
		// Prefix sums: the first request that does not fit blocks itself
		// and everything after it.
		sum, blocked := int64(0), -1
		for i, kv := range kvs {
			wt, _ := strconv.ParseInt(string(kv.Value), 10, 64)
			if wt <= 0 {
				wt = m.capacity // an unreadable weight blocks (never over-grants)
			}
			sum += wt
			if sum > m.capacity {
				blocked = i
				break
			}
		}
		me := len(kvs) - 1
		if blocked == -1 {
			if waited {
				// Tell the request behind us (watching our key) that we
				// are granted: one write, fenced on our key.
				if _, err := cli.Txn(w.ctx).If(clientv3.Compare(clientv3.CreateRevision(w.key), "=", rev)).
					Then(clientv3.OpPut(w.key, val, lease)).Commit(); err != nil {
					if e := w.stopErr(); e != nil {
						return false, rev, 0, e
					}
					// The request behind will see our grant at its next
					// read; not fatal.
				}
			}
			return true, rev, R, nil
		}
		if w.o.Wait == 0 { // TryAcquire: no queueing
			return false, rev, 0, nil
		}
		if w.o.Position != nil {
			w.o.Position(fairlock.Position{Ahead: me, Joined: !w.reported, At: time.Now()})
			w.reported = true
		}
		if w.expired() {
			return false, rev, 0, nil
		}
		waited = true
		want := "" // the head watches the queue for deletions
		if blocked < me {
			want = string(kvs[me-1].Key) // others watch the request ahead
		}
		if watch == nil || want != target || watchStart > R {
			wc.cancel()
			var wctx context.Context
			wctx, wc.cancel = context.WithCancel(clientv3.WithRequireLeader(w.ctx))
			opts := []clientv3.OpOption{clientv3.WithCreatedNotify()}
			key := want
			if want == "" {
				key = m.block
				opts = append(opts, clientv3.WithPrefix(), clientv3.WithFilterPut())
			}
			watch, target = cli.Watch(wctx, key, opts...), want
			select {
			case wr, ok := <-watch:
				if !ok || wr.Err() != nil {
					watch = nil
					if e := w.retry(fmt.Errorf("etcd: watch: %v", wr.Err())); e != nil {
						return false, rev, 0, e
					}
					continue
				}
				watchStart = wr.Header.Revision
			case <-w.ctx.Done():
				return false, rev, 0, w.stopErr()
			case <-w.m.c.closed:
				return false, rev, 0, errClosed
			case <-w.sess.done:
				return false, 0, 0, w.lostErr()
			}
			if watchStart > R {
				continue // read again at or after the watch's start
			}
		}
		// Wait for a change the watch reports (any event of the target;
		// for the queue, a deletion).
		select {
		case wr, ok := <-watch:
			if !ok || wr.Err() != nil {
				watch = nil
			}
		case <-timer:
			return false, rev, 0, nil
		case <-w.ctx.Done():
			return false, rev, 0, w.stopErr()
		case <-w.m.c.closed:
			return false, rev, 0, errClosed
		case <-w.sess.done:
			return false, 0, 0, w.lostErr()
		}
	}
}

var _ = mvccpb.DELETE

package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fairlock-go/fairlock"
)

// waiter is one acquisition's way through the queue.
type waiter struct {
	m *Mutex
	// ctx bounds every etcd call and wait of the acquisition: the caller's
	// context, ended also at the wait bound, when the session ends and
	// when the Client closes (a call to an unreachable etcd waits for a
	// connection: without this it would outlast the wait bound and the
	// lease); for the first attempt the handle's callBound's, which
	// watches all but the wait bound only from callWatchDelay into the
	// call (see start). user is the caller's own context.
	ctx      context.Context
	user     context.Context
	o        AcquireOptions
	key      string
	sess     *session
	deadline time.Time // zero: no bound but ctx

	// first: ctx is the handle's callBound's (see start), for the first
	// attempt only; cancel ends ctx otherwise.
	first  bool
	cancel context.CancelFunc

	reported bool
}

// start sets the acquisition's ctx for its first attempt. With a caller's
// context that can end, or a wait bound, it is the handle's callBound's
// (m.first): it carries the caller's values, ends at the wait bound, and
// watches the caller's context and the session's only from
// callWatchDelay into the call, so an uncontended grant (decided by the
// first Txn) makes no context and registers nothing. Anything after the
// first attempt (a wait, a retry) runs on the full bound (bindAll).
func (w *waiter) start() {
	if w.m.capacity > 0 || w.deadline.IsZero() && (w.user == context.Background() || w.user == context.TODO()) {
		w.ctx, w.cancel = bound(w.user, w.deadline, w.sess)
		return
	}
	w.ctx, w.first = w.m.first.begin(w.user, w.sess.ctx, w.deadline), true
}

// bindAll moves the acquisition from its first attempt's context to the
// full bound (see ctx): before a wait or a retry.
func (w *waiter) bindAll() {
	if !w.first {
		return
	}
	w.m.first.endCall()
	w.first = false
	w.ctx, w.cancel = bound(w.user, w.deadline, w.sess)
}

// finish ends the acquisition's use of its ctx.
func (w *waiter) finish() {
	if w.first {
		w.m.first.endCall()
		w.first = false
		return
	}
	w.cancel()
}

// stopErr is the error of an acquisition whose caller's ctx ended, whose
// client closed or whose session ended; nil otherwise (also when only the
// wait bound passed).
func (w *waiter) stopErr() error {
	if err := w.callerStop(); err != nil {
		return err
	}
	if w.sess.ended() {
		return w.lostErr()
	}
	return nil
}

// callerStop is the error of an acquisition whose caller's ctx ended or
// whose client closed; nil otherwise.
func (w *waiter) callerStop() error {
	select {
	case <-w.m.c.closed:
		return errClosed
	default:
	}
	if w.user.Err() != nil {
		return canceled(w.user)
	}
	return nil
}

// enqueueLost: the session ended while the key was being written (its
// call was cut short): whatever was written goes with the lease, so start
// again on a new one, as when etcd says the lease is gone.
func (w *waiter) enqueueLost() bool { return w.sess.ended() && w.callerStop() == nil }

// bound returns the context of an acquisition's calls (see waiter.ctx):
// user's, ended also at deadline (unless zero) and when sess ends or the
// Client closes (sess.ctx ends with both). No goroutine: sess.ctx's end
// cancels it through context.AfterFunc.
func bound(user context.Context, deadline time.Time, sess *session) (context.Context, context.CancelFunc) {
	if deadline.IsZero() && (user == context.Background() || user == context.TODO()) {
		// Nothing of the caller's ends it and it carries no values: the
		// session's context is the whole bound (no context of its own, no
		// callback to register and remove: the common Lock(ctx) of an
		// uncontended cycle).
		return sess.ctx, func() {}
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if deadline.IsZero() {
		ctx, cancel = context.WithCancel(user)
	} else {
		ctx, cancel = context.WithDeadline(user, deadline)
	}
	stop := context.AfterFunc(sess.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// expired reports whether the wait bound has passed.
func (w *waiter) expired() bool { return !w.deadline.IsZero() && !time.Now().Before(w.deadline) }

// retry sleeps before another attempt after err. It returns the error to
// give up with, or nil to try again.
func (w *waiter) retry(err error) error {
	if e := w.stopErr(); e != nil {
		return e
	}
	if w.sess.ended() {
		return w.lostErr()
	}
	if w.o.Wait == 0 {
		return err
	}
	if w.expired() {
		return nil // the caller sees the bound passed
	}
	d := 100 * time.Millisecond
	if !w.deadline.IsZero() {
		d = min(d, time.Until(w.deadline))
	}
	t := time.NewTimer(max(d, time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.ctx.Done():
	case <-w.m.c.closed:
	case <-w.sess.done:
	}
	if e := w.stopErr(); e != nil {
		return e
	}
	return nil
}

func isLeaseGone(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

// errLeaseGone is run's error when etcd refused to attach the key to the
// session's lease (it expired or was revoked before the client noticed):
// nothing was written, so the acquisition may start again on a new lease.
var errLeaseGone = errors.New("etcd: the lease is gone")

func (w *waiter) leaseGone() error {
	w.sess.end(fmt.Errorf("%w: etcd: lease %x expired or was revoked", fairlock.ErrLost, int64(w.sess.id)))
	return errLeaseGone
}

func (w *waiter) lostErr() error {
	if r := w.sess.reason(); r != nil {
		return fmt.Errorf("etcd: %q: the waiter's lease ended while it waited: %w", w.m.name, r)
	}
	return fmt.Errorf("%w: etcd: %q: the waiter's key was deleted while it waited (its lease expired or was revoked)", fairlock.ErrLost, w.m.name)
}

// run takes the lock or gives up. It returns the key's create revision
// (0 when unknown) and the revision of the read that granted the hold.
// ok false with a nil error: the wait ran out (or TryLock found the lock
// taken).
func (w *waiter) run() (ok bool, rev, hdr int64, err error) {
	m, cli := w.m, w.m.c.cli
	if m.capacity > 0 {
		w.bindAll()
		return w.runSem()
	}
	if w.o.Wait == 0 {
		// TryLock: take it only if the queue is empty (every key in the
		// prefix has create revision 0, i.e. there is none).
		for {
			resp, err := cli.Txn(w.ctx).
				If(clientv3.Compare(clientv3.CreateRevision(m.block), "=", 0).WithPrefix()).
				Then(clientv3.OpPut(w.key, m.owner, clientv3.WithLease(w.sess.id))).Commit()
			if err == nil {
				if !resp.Succeeded {
					return false, 0, 0, nil
				}
				return true, resp.Header.Revision, resp.Header.Revision, nil
			}
			if isLeaseGone(err) {
				return false, 0, 0, w.leaseGone()
			}
			if e := w.stopErr(); e != nil {
				return false, 0, 0, e
			}
			return false, 0, 0, err
		}
	}

	// Join the queue: create the key unless a lost reply already did (then
	// its create revision is our place), and read the head in the same Txn.
	if m.enq.key != w.key {
		// Built once per key (the key names the lease): the ops of a
		// handle's acquisitions on one lease are the same each time.
		m.enq = newEnqueueTxn(w.key, clientv3.OpPut(w.key, m.owner, clientv3.WithLease(w.sess.id)), m.headOp)
	}
	resp, rev, err := w.enqueue(&m.enq)
	if resp == nil {
		return false, 0, 0, err // err nil: the wait ran out
	}
	// Held when nothing that blocks us is older: for a lock or a write the
	// head is our own key; for a read no write is older.
	if head := resp.Responses[1].GetResponseRange().Kvs; len(head) == 0 || head[0].CreateRevision >= rev {
		return true, rev, resp.Header.Revision, nil
	}
	w.bindAll()

	// Wait: read our key and our predecessor (the newest key older than
	// ours) in one read-only Txn at one revision R; watch the predecessor
	// for its deletion from R+1, so no event between the read and the
	// watch is lost. The watch starts at a revision the server has not
	// reached yet when nothing was written since the read, so it is
	// served at once (a watch from an already-current revision is not:
	// etcd syncs such watchers every 100 ms, which is concurrency.Mutex's
	// 98 ms hand-off).
	var ownW clientv3.WatchChan
	octx, ownCancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
	defer ownCancel()
	pred := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))
	var timer <-chan time.Time
	if !w.deadline.IsZero() {
		t := time.NewTimer(time.Until(w.deadline))
		defer t.Stop()
		timer = t.C
	}
	for {
		ops := []clientv3.Op{clientv3.OpGet(w.key), clientv3.OpGet(m.block, pred...), m.headOp}
		if w.o.Position != nil {
			// The keys ahead, keys only. (Not WithCountOnly: etcd applies
			// the create-revision bounds after counting, so a count-only
			// read counts the whole queue.)
			ops = append(ops, clientv3.OpGet(m.block, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(rev-1)))
		}
		resp, err := cli.Txn(w.ctx).Then(ops...).Commit()
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
		if own := resp.Responses[0].GetResponseRange().Kvs; len(own) != 1 || own[0].CreateRevision != rev {
			return false, 0, 0, w.lostErr()
		}
		p := resp.Responses[1].GetResponseRange().Kvs
		if len(p) == 0 {
			return true, rev, R, nil
		}
		if w.o.Position != nil {
			n := len(resp.Responses[3].GetResponseRange().Kvs)
			w.o.Position(fairlock.Position{Ahead: int(n), Joined: !w.reported, At: time.Now()})
			w.reported = true
		}
		if w.expired() {
			return false, rev, 0, nil
		}
		// The predecessor is the head: once it is deleted nothing is ahead
		// of us (keys created later have larger revisions), so its DELETE
		// event is the grant, with no read after it.
		head := resp.Responses[2].GetResponseRange().Kvs
		predIsHead := len(head) == 1 && string(head[0].Key) == string(p[0].Key)
		if ownW == nil {
			ownW = cli.Watch(octx, w.key, clientv3.WithRev(R+1), clientv3.WithFilterPut())
		}
		pctx, pcancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
		pw, res := w.watchPred(pctx, p[0], R)
		if res == evWatching {
			res = w.waitEvent(pw, &ownW, timer)
		}
		pcancel()
		switch res {
		case evPredGone:
			if predIsHead {
				// Unless our own key's deletion is already here, the lock
				// is ours. The hold's monitor watches our key from R+1, so
				// a deletion after R that this check did not see ends the
				// hold at once.
				select {
				case wr, ok := <-ownW:
					if ok && wr.Err() == nil {
						for _, ev := range wr.Events {
							if ev.Type == mvccpb.DELETE {
								return false, 0, 0, w.lostErr()
							}
						}
					}
				default:
				}
				return true, rev, R, nil
			}
			continue
		case evMoved:
			continue
		case evTimeout:
			return false, rev, 0, nil
		case evLost:
			return false, 0, 0, w.lostErr()
		default:
			return false, rev, 0, w.stopErr()
		}
	}
}

type event int

const (
	evMoved    event = iota // a watch broke: read again
	evPredGone              // the predecessor was deleted
	evTimeout               // the wait bound passed
	evLost                  // our key or lease is gone
	evStop                  // ctx ended or the client closed
	evWatching              // watchPred: the watch is set
)

// watchPred watches the predecessor p (read at revision R) for its
// deletion, so that the watch is among etcd's synced watchers and its
// event comes at once. A watch from R+1 would miss nothing, but if anything
// was written after R it starts at a revision etcd has passed, and such a
// watcher is served by etcd's unsynced-watcher loop, every 100 ms
// (concurrency.Mutex always watches that way: its 98 ms hand-off). So watch
// from the current revision and wait for etcd's confirmation, whose
// revision X says where the watch starts; if X > R, p could have gone in
// between: read p again (at a revision >= X) before waiting.
func (w *waiter) watchPred(ctx context.Context, p *mvccpb.KeyValue, R int64) (clientv3.WatchChan, event) {
	cli := w.m.c.cli
	pw := cli.Watch(ctx, string(p.Key), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	var X int64
	select {
	case wr, ok := <-pw:
		if !ok || wr.Err() != nil {
			return nil, w.stopOr(evMoved)
		}
		if !wr.Created {
			return pw, evPredGone // an event before the confirmation: a DELETE
		}
		X = wr.Header.Revision
	case <-w.ctx.Done():
		return nil, evStop
	case <-w.m.c.closed:
		return nil, evStop
	case <-w.sess.done:
		return nil, evLost
	}
	if X <= R {
		return pw, evWatching
	}
	g, err := cli.Get(w.ctx, string(p.Key))
	if err != nil {
		return nil, w.stopOr(evMoved)
	}
	if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != p.CreateRevision {
		return nil, evPredGone
	}
	return pw, evWatching
}

// stopOr is evStop when the acquisition must stop, else ev.
func (w *waiter) stopOr(ev event) event {
	if w.stopErr() != nil {
		return evStop
	}
	return ev
}

func (w *waiter) waitEvent(pw clientv3.WatchChan, ownW *clientv3.WatchChan, timer <-chan time.Time) event {
	for {
		select {
		case <-w.ctx.Done():
			return evStop
		case <-w.m.c.closed:
			return evStop
		case <-w.sess.done:
			return evLost
		case <-timer:
			return evTimeout
		case wr, ok := <-pw:
			if !ok || wr.Err() != nil {
				return evMoved
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return evPredGone
				}
			}
		case wr, ok := <-*ownW:
			if !ok || wr.Err() != nil {
				// Watch again after the next read.
				*ownW = nil
				return evMoved
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return evLost
				}
			}
		}
	}
}

// enqueueTxn is the Txn of enqueue: it writes key with put unless a lost
// reply already did (then its create revision is our place), running also
// in the same Txn, whichever way it goes. Built once and reused (read-only).
type enqueueTxn struct {
	key       string
	cmp       clientv3.Cmp
	then, els []clientv3.Op
}

func newEnqueueTxn(key string, put clientv3.Op, also ...clientv3.Op) enqueueTxn {
	return enqueueTxn{key: key, cmp: clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		then: append([]clientv3.Op{put}, also...),
		els:  append([]clientv3.Op{clientv3.OpGet(key)}, also...)}
}

// enqueue runs t for the waiter's key. It retries what is transient; a
// nil response with a nil error means the wait ran out. rev is the key's
// create revision; the Txn's responses after the first are also's.
func (w *waiter) enqueue(t *enqueueTxn) (*clientv3.TxnResponse, int64, error) {
	for {
		resp, err := w.m.c.cli.Txn(w.ctx).If(t.cmp).Then(t.then...).Else(t.els...).Commit()
		if err != nil {
			w.bindAll()
			if isLeaseGone(err) {
				return nil, 0, w.leaseGone()
			}
			if w.enqueueLost() {
				return nil, 0, errLeaseGone
			}
			if e := w.retry(err); e != nil {
				return nil, 0, e
			}
			if w.expired() {
				return nil, 0, nil
			}
			continue
		}
		if resp.Succeeded {
			return resp, resp.Header.Revision, nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			return resp, kvs[0].CreateRevision, nil
		}
		return nil, 0, w.lostErr()
	}
}

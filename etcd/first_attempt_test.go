package etcd

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/faultproxy"
)

// The first attempt of an acquisition (its joining Txn) and an Unlock's
// release run on the handle's callBound: the caller's context and the
// session's are watched only from callWatchDelay into the call (see
// callBound). These tests stall etcd's replies through a proxy (the
// requests still reach etcd and run), so the call cannot end by itself,
// and check that what must end it still does, promptly, and that nothing
// is left in etcd.

// stalledEnv is a handle on a Client whose connection goes through a
// proxy, with its session granted (a first cycle), and the proxy.
// holdReplies holds back the proxy's replies until the returned undo (or
// the test's end) lets them through; undo may be called more than once.
func holdReplies(t *testing.T, p *faultproxy.Proxy) (undo func()) {
	var once sync.Once
	stall := p.StallReplies()
	undo = func() { once.Do(stall) }
	t.Cleanup(undo)
	return undo
}

func stalledEnv(t *testing.T, name string, opts ...Option) (*env, *faultproxy.Proxy, *Client, *Mutex) {
	t.Helper()
	e := newEnv(t)
	p := faultproxy.Start(t, e.srv.Endpoint)
	c := e.client(p.Addr, append([]Option{WithTTL(30 * time.Second)}, opts...)...)
	m := mustMutex(t, c, name)
	if err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e, p, c, m
}

func setCallWatchDelay(t *testing.T, d time.Duration) {
	old := callWatchDelay
	callWatchDelay = d
	t.Cleanup(func() { callWatchDelay = old })
}

// TestCancelDuringStalledFirstAttempt: a Lock whose joining Txn committed
// but whose reply does not come returns ErrCanceled soon after its ctx is
// cancelled, whether the cancel comes after the caller's context is
// watched (callWatchDelay into the call) or before (then at the watch),
// and its key is deleted while the replies are still stalled; the handle
// locks again afterwards.
func TestCancelDuringStalledFirstAttempt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration // callWatchDelay
		wait  time.Duration // before the cancel, once the key is there
	}{
		{"cancel after the watch began", 20 * time.Millisecond, 200 * time.Millisecond},
		{"cancel before the watch began", 1500 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setCallWatchDelay(t, tc.delay)
			e, p, _, m := stalledEnv(t, "first-cancel")
			undo := holdReplies(t, p)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- m.Lock(ctx) }()
			e.waitKeys(m, 1) // the Txn ran; its reply is held
			time.Sleep(tc.wait)
			st := time.Now()
			cancel()
			select {
			case err := <-errc:
				if !errors.Is(err, fairlock.ErrCanceled) || !errors.Is(err, context.Canceled) {
					t.Fatalf("Lock cancelled during its stalled first Txn: %v", err)
				}
				if took := time.Since(st); took > tc.delay+3*time.Second {
					t.Fatalf("Lock returned %v after the cancel; want within callWatchDelay %v (+3 s)", took, tc.delay)
				}
			case <-time.After(tc.delay + 10*time.Second):
				t.Fatal("Lock did not return after its ctx was cancelled")
			}
			e.waitKeys(m, 0) // the cleanup's delete ran, replies still stalled
			undo()
			lctx, lcancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer lcancel()
			if err := m.Lock(lctx); err != nil {
				t.Fatalf("Lock after the cancelled one: %v", err)
			}
			if err := m.Unlock(lctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCloseDuringStalledFirstAttempt: Client.Close ends a Lock (on a
// context that never ends) stalled in its first Txn, through the session's
// context, which the first attempt watches from callWatchDelay.
func TestCloseDuringStalledFirstAttempt(t *testing.T) {
	e, p, c, m := stalledEnv(t, "first-close")
	defer p.StallReplies()()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- m.Lock(ctx) }()
	e.waitKeys(m, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		defer ccancel()
		_ = c.Close(cctx) // its revoke's reply is stalled too
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, fairlock.ErrClosed) {
			t.Fatalf("Lock stalled in its first Txn, after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock still waits after Client.Close")
	}
}

// TestCancelDuringStalledUnlock: an Unlock whose delete got no reply
// returns soon after its ctx is cancelled (long before the cleanup
// timeout), the hold ends as not confirmed, and the handle locks and
// unlocks again afterwards (the release's spent context is not reused).
func TestCancelDuringStalledUnlock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		wait  time.Duration
	}{
		{"cancel after the watch began", 20 * time.Millisecond, 200 * time.Millisecond},
		{"cancel before the watch began", 1500 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setCallWatchDelay(t, tc.delay)
			_, p, _, m := stalledEnv(t, "unlock-cancel", WithCleanupTimeout(time.Minute))
			if err := m.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			undo := holdReplies(t, p)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- m.Unlock(ctx) }()
			time.Sleep(tc.wait)
			st := time.Now()
			cancel()
			select {
			case err := <-errc:
				if err == nil {
					t.Fatal("Unlock with its reply stalled and its ctx cancelled: nil error")
				}
				if took := time.Since(st); took > tc.delay+3*time.Second {
					t.Fatalf("Unlock returned %v after the cancel; want within callWatchDelay %v (+3 s)", took, tc.delay)
				}
			case <-time.After(tc.delay + 10*time.Second):
				t.Fatal("Unlock did not return after its ctx was cancelled (cleanup timeout 1 min)")
			}
			if !errors.Is(m.Err(), fairlock.ErrLost) {
				t.Fatalf("Err after an unconfirmed release: %v", m.Err())
			}
			undo()
			lctx, lcancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer lcancel()
			for range 2 {
				if err := m.Lock(lctx); err != nil {
					t.Fatalf("Lock after the cancelled Unlock: %v", err)
				}
				if err := m.Unlock(lctx); err != nil {
					t.Fatalf("Unlock after the cancelled one: %v", err)
				}
			}
		})
	}
}

// TestWaitBoundDuringStalledFirstAttempt: a TryLockFor whose first Txn
// gets no reply gives up at its wait bound (false, nil), the callBound's
// end, on a context that never ends; its key goes, and the handle locks
// again afterwards.
func TestWaitBoundDuringStalledFirstAttempt(t *testing.T) {
	e, p, _, m := stalledEnv(t, "first-bound")
	undo := holdReplies(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type res struct {
		ok  bool
		err error
	}
	resc := make(chan res, 1)
	st := time.Now()
	go func() {
		ok, err := m.TryLockFor(ctx, time.Second, 0)
		resc <- res{ok, err}
	}()
	select {
	case r := <-resc:
		if r.ok || r.err != nil {
			t.Fatalf("TryLockFor(1s) stalled in its first Txn: %v, %v; want false, nil", r.ok, r.err)
		}
		if took := time.Since(st); took < time.Second || took > 4*time.Second {
			t.Fatalf("TryLockFor(1s) returned after %v; want the 1 s bound (+3 s)", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("TryLockFor(1s) did not return at its wait bound")
	}
	e.waitKeys(m, 0)
	undo()
	if ok, err := m.TryLockFor(ctx, 20*time.Second, 0); !ok || err != nil {
		t.Fatalf("TryLockFor after the bounded one: %v, %v", ok, err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A call's bound is a bound (issue 30). Three rules, all measured from the
// call's start on the local monotonic clock:
//
//   - A timed acquisition (a wait of 0 or more: TryLock, TryLockFor, the
//     semaphores' and Seats' waits) ends within wait + the attempt timeout
//     (Session.attempt). Its Redis calls run bounded by that end, whatever
//     the ctx (context.Background included) and the client's retries; a
//     call cut there returns an error matching ErrUnavailable. Waiting for
//     an earlier give-back of the handle, and for its own give-back after
//     the wait, fit in the same bound.
//   - A wait with no end of its own (Lock, until ctx ends) ends with an
//     error matching ErrUnavailable once Redis has not answered it for the
//     outage budget (Config.OutageBudget): counted from the send of the
//     first attempt of the current run of failed attempts; an attempt that
//     gets a definite answer ends the run.
//     It ends at the first failed attempt past the budget; an attempt made
//     during an outage is bounded by the budget's end, so the call ends
//     within the longer of the budget and the first failed call (a call on
//     a stopped server with a Background ctx runs inline, bounded by the
//     client's own timeouts and retries). It does not wait for its
//     give-back then (leave).
//   - Its wait for an earlier give-back of the handle (settle) is bounded
//     the same way: by the call's end, or by the budget.

// maxAttempt caps the attempt timeout: one Redis call of a lock script
// takes well under a millisecond on a healthy server, and a timed call
// should not wait go-redis's default read timeout (5 s in v9.23) for a
// server that stopped answering.
const maxAttempt = 3 * time.Second

// attemptTimeout is the attempt timeout of rdb's calls: the longer of its
// read and write timeouts, at most maxAttempt (3 s); maxAttempt when rdb is
// not a client whose options we can read, or has no timeouts at all.
func attemptTimeout(rdb redis.UniversalClient) time.Duration {
	var rd, wr time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		rd, wr = c.Options().ReadTimeout, c.Options().WriteTimeout
	case *redis.ClusterClient:
		rd, wr = c.Options().ReadTimeout, c.Options().WriteTimeout
	default:
		return maxAttempt
	}
	// Options() are normalized: 0 or less means no timeout.
	norm := func(d time.Duration) time.Duration {
		if d <= 0 {
			return maxAttempt
		}
		return min(d, maxAttempt)
	}
	return max(norm(rd), norm(wr))
}

// AttemptTimeout is the session's attempt timeout (for tests and for the
// packages whose calls share the bound).
func (s *Session) AttemptTimeout() time.Duration { return s.attempt }

// addrOf names the server(s) rdb talks to, for errors.
func addrOf(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		var addrs []string
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		return strings.Join(addrs, ",")
	}
	return fmt.Sprintf("%T", rdb)
}

// unavailable is the error of a call that ended because Redis did not
// answer within its bound: it matches ErrUnavailable, names the address
// and wraps cause (the last Redis error; nil: none).
func (s *Session) unavailable(what string, cause error) error {
	if cause == nil {
		return fmt.Errorf("%w at %s: %s", ErrUnavailable, s.addr, what)
	}
	return fmt.Errorf("%w at %s: %s: %w", ErrUnavailable, s.addr, what, cause)
}

// errSettleBound is settle's error when the call's bound came first.
var errSettleBound = errors.New("bound")

// settleBy is settle bounded also by until (zero: no bound): errSettleBound
// when until passes with a give-back still running.
func (m *Mutex) settleBy(ctx context.Context, until time.Time) error {
	if until.IsZero() {
		return m.settle(ctx)
	}
	bctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	err := m.settle(bctx)
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrClosed) {
		return errSettleBound
	}
	return err
}

package multi_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/multi"
	"github.com/fairlock-go/fairlock/reentrant"
)

// cluster is three independent deployments and, for each, a probe client
// (its own fairlock.Client) to look at the lock.
type cluster struct {
	ds     []*redistest.Backend
	srv    []*redistest.Server // real servers (nil for miniredis)
	probes []*fairlock.Client
}

// newCluster starts n deployments. Paused servers are resumed before the
// clients of the test close (cleanups run last-registered first: call it
// before making the test's clients, and pause only after).
func newCluster(t *testing.T, n int, real bool) *cluster {
	cl := &cluster{}
	for range n {
		if real {
			s := redistest.StartT(t)
			cl.srv = append(cl.srv, s)
			cl.ds = append(cl.ds, s.Backend())
		} else {
			cl.ds = append(cl.ds, redistest.Mini(t))
		}
	}
	for _, d := range cl.ds {
		cl.probes = append(cl.probes, newClient(t, d.Client(t)))
	}
	return cl
}

// pause stops server i with SIGSTOP until the end of t.
func (cl *cluster) pause(t *testing.T, i int) {
	require.NoError(t, cl.srv[i].Pause())
	t.Cleanup(func() { _ = cl.srv[i].Resume() })
}

// user makes a RedLock of fenced locks on name, one Client per deployment.
func (cl *cluster) user(t *testing.T, name string, opts ...multi.RedLockOption) (*multi.RedLock, []multi.Member) {
	ms := make([]multi.Member, len(cl.ds))
	for i, d := range cl.ds {
		m, err := fenced.New(newClient(t, d.Client(t), fairlock.WithLease(3*time.Second)), name)
		require.NoError(t, err)
		ms[i] = m
	}
	r, err := multi.NewRedLock(ms, opts...)
	require.NoError(t, err)
	return r, ms
}

// lockedOn reports, per deployment, whether name is locked (skipping those
// in skip: paused).
func (cl *cluster) lockedOn(t *testing.T, ctx context.Context, name string, skip ...int) []bool {
	out := make([]bool, len(cl.ds))
	for i, c := range cl.probes {
		if contains(skip, i) {
			continue
		}
		m, err := reentrant.New(c, name)
		require.NoError(t, err)
		out[i], err = m.IsLocked(ctx)
		require.NoError(t, err)
	}
	return out
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestNewRedLockRefusesBadInput(t *testing.T) {
	cl := newCluster(t, 3, false)
	p := redistest.Prefix(t)
	a, err := reentrant.New(cl.probes[0], p+"x")
	require.NoError(t, err)
	a2, err := reentrant.New(cl.probes[0], p+"x")
	require.NoError(t, err)
	b, err := reentrant.New(cl.probes[1], p+"x")
	require.NoError(t, err)
	other, err := reentrant.New(cl.probes[2], p+"y")
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		members []multi.Member
		opts    []multi.RedLockOption
	}{
		{"no members", nil, nil},
		{"nil member", []multi.Member{a, nil}, nil},
		{"zero handle", []multi.Member{a, &reentrant.Mutex{}}, nil},
		{"two names", []multi.Member{a, b, other}, nil},
		{"one client twice", []multi.Member{a, a2, b}, nil},
		{"nil option", []multi.Member{a, b}, []multi.RedLockOption{nil}},
		{"bad pause", []multi.Member{a, b}, []multi.RedLockOption{multi.WithRetryPause(time.Second, time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := multi.NewRedLock(tc.members, tc.opts...)
			require.ErrorIs(t, err, fairlock.ErrInvalidValue)
			require.Nil(t, r)
			t.Log(err)
		})
	}
	r, err := multi.NewRedLock([]multi.Member{a, b})
	require.NoError(t, err)
	require.Equal(t, 2, r.Quorum())
	ctx := testCtx(t)
	require.ErrorIs(t, r.Unlock(ctx), fairlock.ErrNotHeld)
	_, err = r.TryLockFor(ctx, -1, 0)
	require.ErrorIs(t, err, fairlock.ErrInvalidValue)
	require.NoError(t, r.Lock(ctx))
	_, err = r.TryLock(ctx)
	require.ErrorIs(t, err, fairlock.ErrInvalidValue, "not reentrant")
	require.NoError(t, r.Unlock(ctx))
}

// With one of three deployments stopped (SIGSTOP) or gone (killed:
// connections refused), the RedLock is granted by the other two, with
// validity = lease - elapsed - drift and a token from each granting member.
func TestRedLockGrantsWithTwoOfThree(t *testing.T) {
	redistest.Long(t)
	for _, how := range []string{"paused", "killed"} {
		t.Run(how, func(t *testing.T) {
			ctx := testCtx(t)
			cl := newCluster(t, 3, true)
			name := redistest.Prefix(t) + "lock"
			r, ms := cl.user(t, name, multi.WithAttemptTimeout(time.Second))
			if how == "paused" {
				cl.pause(t, 2)
			} else {
				cl.srv[2].Stop()
			}
			const lease = 10 * time.Second
			before := time.Now()
			ok, err := r.TryLockFor(ctx, 20*time.Second, lease)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, []bool{true, true, false}, r.Granted())
			tok := r.Tokens()
			require.Positive(t, tok[0])
			require.Positive(t, tok[1])
			require.Zero(t, tok[2])
			after := time.Now()
			v := r.ValidUntil()
			require.True(t, v.After(after))
			// lease - elapsed - drift, elapsed counted from before the
			// round's first request: between the call's start and return.
			require.False(t, v.Before(before.Add(lease-multi.Drift(lease))))
			require.False(t, v.After(after.Add(lease-multi.Drift(lease))))
			for i := range 2 {
				require.False(t, v.After(ms[i].ValidUntil()), "no later than a granting member's own validity")
			}
			require.Equal(t, []bool{true, true, false}, cl.lockedOn(t, ctx, name, 2))

			// Another user cannot get it meanwhile.
			r2, _ := cl.user(t, name, multi.WithAttemptTimeout(time.Second))
			ok, err = r2.TryLock(ctx)
			require.NoError(t, err)
			require.False(t, ok)

			require.NoError(t, r.Unlock(ctx))
			<-r.Done()
			require.NoError(t, r.Err())
			require.Equal(t, []bool{false, false, false}, cl.lockedOn(t, ctx, name, 2))

			// Lock (the watchdog keeps the members) works the same way.
			require.NoError(t, r.Lock(ctx))
			require.Equal(t, []bool{true, true, false}, r.Granted())
			require.NoError(t, r.Unlock(ctx))
			_ = ms
		})
	}
}

// refusesWithOneOfThree: with two of three deployments stopped, no round
// wins: TryLockFor reports false once its wait is over and leaves nothing
// held on the live deployment; Lock ends with its ctx.
func refusesWithOneOfThree(t *testing.T, broken bool) error {
	ctx := testCtx(t)
	cl := newCluster(t, 3, true)
	name := redistest.Prefix(t) + "lock"
	r, _ := cl.user(t, name, multi.WithAttemptTimeout(300*time.Millisecond))
	if broken {
		multi.BreakQuorum(r)
	}
	cl.pause(t, 1)
	cl.pause(t, 2)
	ok, err := r.TryLockFor(ctx, 1500*time.Millisecond, 10*time.Second)
	if ok {
		_ = r.Unlock(ctx)
		return errors.New("TryLockFor granted with one of three deployments")
	}
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false}, cl.lockedOn(t, ctx, name, 1, 2), "nothing left held on the live deployment")
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = r.Lock(lctx)
	require.ErrorIs(t, err, fairlock.ErrCanceled)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, []bool{false, false, false}, cl.lockedOn(t, ctx, name, 1, 2))
	return nil
}

func TestRedLockRefusesWithOneOfThree(t *testing.T) {
	redistest.Long(t)
	require.NoError(t, refusesWithOneOfThree(t, false))
}

// The same check catches a RedLock that counts one grant as a majority.
func TestRedLockRefusalCatchesNoQuorum(t *testing.T) {
	err := refusesWithOneOfThree(t, true)
	require.Error(t, err)
	t.Log(err)
}

// validityRule: with one deployment stopped, each round lasts the attempt
// timeout (1.5 s); a 1 s lease is then used up before the majority's
// replies are counted: lease - elapsed - drift < 0, so the round does not
// win, though two of three granted. A 20 s lease wins.
func validityRule(t *testing.T, broken bool) error {
	ctx := testCtx(t)
	cl := newCluster(t, 3, true)
	name := redistest.Prefix(t) + "lock"
	r, _ := cl.user(t, name, multi.WithAttemptTimeout(1500*time.Millisecond))
	if broken {
		multi.BreakValidity(r)
	}
	cl.pause(t, 2)
	ok, err := r.TryLockFor(ctx, 0, time.Second)
	require.NoError(t, err)
	if ok {
		_ = r.Unlock(ctx)
		return errors.New("a round that took longer than the lease won")
	}
	require.Equal(t, []bool{false, false, false}, cl.lockedOn(t, ctx, name, 2))
	ok, err = r.TryLockFor(ctx, 0, 20*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, r.Unlock(ctx))
	return nil
}

func TestRedLockValidityRule(t *testing.T) { require.NoError(t, validityRule(t, false)) }

func TestRedLockValidityRuleCatchesNoValidity(t *testing.T) {
	err := validityRule(t, true)
	require.Error(t, err)
	t.Log(err)
}

// exclusion: two RedLock users (each with its own Client per deployment)
// take the lock in turns; never both at once (Redisson's
// testTryLockLeasetime: tryLock(wait, lease) in a loop, a counter
// incremented under the lock).
func exclusion(t *testing.T, real bool, rounds int, pauseOne, broken bool) error {
	cl := newCluster(t, 3, real)
	name := redistest.Prefix(t) + "lock"
	var users []*multi.RedLock
	for range 2 {
		r, _ := cl.user(t, name, multi.WithAttemptTimeout(500*time.Millisecond), multi.WithRetryPause(time.Millisecond, 20*time.Millisecond))
		if broken {
			multi.BreakQuorum(r)
		}
		users = append(users, r)
	}
	if pauseOne {
		cl.pause(t, 0)
	}
	var inside, counter, overlaps atomic.Int32
	errs := make(chan error, 2*rounds)
	var wg sync.WaitGroup
	for u, r := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				ok, err := r.TryLockFor(ctx, 20*time.Second, 5*time.Second)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("user %d: %w", u, err)
					return
				}
				if !ok {
					continue
				}
				i++
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				n := counter.Load()
				time.Sleep(5 * time.Millisecond)
				counter.Store(n + 1)
				inside.Add(-1)
				if err := r.Unlock(context.Background()); err != nil {
					errs <- fmt.Errorf("user %d: Unlock: %w", u, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	if o := overlaps.Load(); o > 0 || counter.Load() != int32(2*rounds) {
		return fmt.Errorf("two users held the RedLock at once %d times; counter %d of %d", o, counter.Load(), 2*rounds)
	}
	return nil
}

func TestRedLockExclusion(t *testing.T) {
	redistest.Long(t)
	t.Run("miniredis", func(t *testing.T) { require.NoError(t, exclusion(t, false, 30, false, false)) })
	t.Run("redis-server", func(t *testing.T) { require.NoError(t, exclusion(t, true, 30, false, false)) })
	t.Run("redis-server-one-paused", func(t *testing.T) { require.NoError(t, exclusion(t, true, 4, true, false)) })
}

// The same check catches a RedLock that counts one grant as a majority:
// two users each win a different deployment and both hold.
func TestRedLockExclusionCatchesNoQuorum(t *testing.T) {
	err := exclusion(t, false, 60, false, true)
	require.Error(t, err)
	t.Log(err)
}

// Done stays open while a quorum of members is held and closes when the
// loss of a second of three members leaves less than one; Err names them.
func TestRedLockDoneOnQuorumLoss(t *testing.T) {
	redistest.Long(t)
	for _, real := range []bool{false, true} {
		t.Run(map[bool]string{false: "miniredis", true: "redis-server"}[real], func(t *testing.T) {
			ctx := testCtx(t)
			cl := newCluster(t, 3, real)
			name := redistest.Prefix(t) + "lock"
			r, ms := cl.user(t, name) // watchdog lease 3 s: renewed every second
			require.NoError(t, r.Lock(ctx))
			require.Equal(t, []bool{true, true, true}, r.Granted())
			force := func(i int) {
				m, err := reentrant.New(cl.probes[i], name)
				require.NoError(t, err)
				ok, err := m.ForceUnlock(ctx)
				require.NoError(t, err)
				require.True(t, ok)
			}
			force(0)
			select {
			case <-ms[0].Done(): // the member learnt of its loss
			case <-time.After(20 * time.Second):
				t.Fatal("member 0 not told of its loss")
			}
			select {
			case <-r.Done():
				t.Fatalf("Done closed with two of three members held: %v", r.Err())
			case <-time.After(100 * time.Millisecond):
			}
			require.NoError(t, r.Err())
			require.False(t, r.ValidUntil().IsZero())
			force(1)
			select {
			case <-r.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("Done open with one of three members held")
			}
			err := r.Err()
			require.ErrorIs(t, err, fairlock.ErrLost)
			var me *multi.MemberError
			require.ErrorAs(t, err, &me)
			t.Log(err)
			require.True(t, r.ValidUntil().IsZero())
			require.NoError(t, r.Unlock(ctx), "members lost are not a release error")
			require.Equal(t, []bool{false, false, false}, cl.lockedOn(t, ctx, name))
		})
	}
}

// Redisson's RedissonRedLockTest scenarios, with one deployment per member
// (Redisson's put two members on one server).
func TestRedissonRedLockScenarios(t *testing.T) {
	redistest.Long(t)
	for _, real := range []bool{false, true} {
		t.Run(map[bool]string{false: "miniredis", true: "redis-server"}[real], func(t *testing.T) {
			ctx := testCtx(t)
			cl := newCluster(t, 3, real)
			name := redistest.Prefix(t) + "lock"
			blockerOn := func(i int) multi.Member {
				m, err := fenced.New(cl.probes[i], name)
				require.NoError(t, err)
				require.NoError(t, m.Lock(ctx))
				return m
			}
			// testLockFailed: another owner holds two members: tryLock() fails.
			b1, b2 := blockerOn(1), blockerOn(2)
			r, _ := cl.user(t, name)
			ok, err := r.TryLock(ctx)
			require.NoError(t, err)
			require.False(t, ok)
			require.Equal(t, []bool{false, true, true}, cl.lockedOn(t, ctx, name), "the member it got was given back")
			require.NoError(t, b2.Unlock(ctx))

			// testLockSuccess2: another owner holds one member:
			// tryLock(500 ms, 5 s) succeeds.
			ok, err = r.TryLockFor(ctx, 500*time.Millisecond, 5*time.Second)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, []bool{true, false, true}, r.Granted())
			require.NoError(t, r.Unlock(ctx))
			require.NoError(t, b1.Unlock(ctx))

			// testLockSuccess: for each member, another owner holds it; a
			// first RedLock user locks (two of three) and holds a while; a
			// second user's lock() gets it after the first unlocks.
			for i := range 3 {
				blocker := blockerOn(i)
				first, _ := cl.user(t, name)
				require.NoError(t, first.Lock(ctx))
				var released atomic.Bool
				go func() {
					time.Sleep(300 * time.Millisecond)
					released.Store(true)
					_ = first.Unlock(ctx)
				}()
				_, err := blocker.(*fenced.Mutex).ForceUnlock(ctx)
				require.NoError(t, err)
				second, _ := cl.user(t, name)
				require.NoError(t, second.Lock(ctx))
				require.True(t, released.Load())
				require.NoError(t, second.Unlock(ctx))
			}
		})
	}
}

package faulttests

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
)

// Issue 19: a fault the suite lacked. Redis refuses writes (CLIENT PAUSE
// WRITE), or every client's connection stalls, for longer than the clients'
// read timeout, while several fair waiters are queued and the holder's
// explicit lease runs out under the fault. Neither fault breaks the order
// (FPauseWrite and FStallAll are not breaksOrder): the waiters are alive and
// only cut off from Redis, so CheckOrder must see them granted in the order
// they joined, CheckCalls that no call outlived its ctx, and so on.
//
// Run with go-redis's resends (the suite's defaults: MaxRetries 3,
// ReadTimeout 3 s) and without (MaxRetries -1, ReadTimeout 1 s).
//
// The waiters' outage budget (fairlock.WithOutageBudget, issue 30) is set
// longer than the fault: with the suite's default (two head graces, 4 s) a
// 13 s stall rightly ends their waits with ErrUnavailable, which is not
// what this test is about (reentrant/bound30_test.go and
// TestLockWaitsThroughABlipShorterThanTheOutageBudget test the budget).
func TestFaultPauseWhileQueued(t *testing.T) {
	redistest.Long(t)
	type variant struct {
		fault   string
		noRetry bool
	}
	var vs []variant
	for _, f := range []string{"pause-write", "stall-all"} {
		for _, nr := range []bool{false, true} {
			vs = append(vs, variant{f, nr})
		}
	}
	for _, v := range vs {
		name := v.fault + "/retries"
		if v.noRetry {
			name = v.fault + "/noretry"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachKind(t, fairKinds, func(t *testing.T, k LockKind) {
				e := NewSingle(t)
				readTimeout := ReadTimeout
				if v.noRetry {
					readTimeout = time.Second
					e.newRDB = func(dial Dialer) redis.UniversalClient {
						o := &redis.Options{Addr: e.Server.Addr}
						clientOptions(o, dial)
						o.ReadTimeout, o.WriteTimeout, o.MaxRetries = readTimeout, readTimeout, -1
						return redis.NewClient(o)
					}
				}
				s := e.Script()
				holder := e.NewClient().Handle("L", k)
				var ws []*Handle
				for range 3 {
					ws = append(ws, e.NewClient(fairlock.WithOutageBudget(time.Minute)).Handle("L", k))
				}
				warm(t, e.Clients()[1].Handle("warm", k))
				if err := s.LockWithLease(holder, ExplicitLeaseMin, 5*time.Second); err != nil {
					t.Fatal(err)
				}
				for i, w := range ws {
					s.Go(func() {
						var err error
						if i%2 == 0 {
							err = s.LockWithLease(w, ExplicitLeaseMin, 2*time.Minute)
						} else {
							var ok bool
							ok, err = s.TryLockFor(w, time.Minute, ExplicitLeaseMin, 2*time.Minute)
							if err == nil && !ok {
								err = fmt.Errorf("TryLockFor ran out")
							}
						}
						if err != nil {
							// alive, its ctx and wait with time left: it must keep waiting
							t.Errorf("waiter %d (%s) returned: %v", i, w.L.Owner(), err)
							return
						}
						time.Sleep(100 * time.Millisecond)
						_ = s.Unlock(w, 5*time.Second)
					})
					time.Sleep(300 * time.Millisecond) // joins one after another
				}
				// Longer than the read timeout (and than go-redis's four
				// tries with the defaults: the calls see errors), and over
				// the holder's lease end.
				d := 2*readTimeout + ExplicitLeaseMin
				if !v.noRetry {
					d = 4*readTimeout + time.Second
				}
				switch v.fault {
				case "pause-write":
					e.PauseWrite(d)
				case "stall-all":
					e.StallAll(d)
				}
				s.Check(t)
			})
		})
	}
}

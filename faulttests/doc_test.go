// Package faulttests runs real clients of the locks under real faults and
// checks the histories they record. It has only test files: nothing in it
// can be imported, and go doc does not show it; read the files.
//
// Every test starts its own redis-server (or a Redis Cluster, or a primary
// with a replica and Sentinels) on loopback and puts each fairlock.Client
// behind its own TCP proxies (internal/faultproxy, in the test process),
// so a fault hits one client at a time. The faults: latency, stalls longer
// than go-redis's read timeout, connection resets, a clock skewed with
// SetClockSkew, a client dying (its network cut for ever, its handles
// abandoned), Client.Close while it holds and waits, CLIENT KILL TYPE
// pubsub, CLIENT PAUSE, the server stopped and continued (SIGSTOP/SIGCONT),
// a restart without persistence, and a primary killed (cluster, Sentinel).
//
// Everything is recorded on one monotonic clock (history_test.go): each call's
// start, end, context end and result; each hold's believed-valid window,
// from its acquisition returning to the earliest of its final Unlock call,
// the moment Done() was seen closed and the last ValidUntil sampled while
// held (when the lock types have ValidUntil); the fair-queue joins; the
// faults; each Client.Close; and each critical section's use of a counter
// the lock protects. The checkers (checkers_test.go) then verify:
//
//  1. exclusion: no two owners' windows on one lock overlap, except across
//     a data-losing event (a restart without persistence, a failover, a
//     ForceUnlock), and then the old window ends within its lease of it;
//  2. order: on a fair lock, waiters whose queue joins did not overlap in
//     time, neither faulty nor giving up, are granted in join order;
//  3. liveness: a live waiter that sees the lock free with no earlier live
//     waiter is granted within liveBound of the faults that fired;
//  4. every call returns within its ctx end + CleanupTime + CallSlack;
//  5. Close: when it returns every hold has ended with ErrClosed and every
//     wait has returned ErrClosed;
//  6. afterwards no key or subscription is left beyond its documented TTL
//     (Env.CheckLeftovers);
//  7. the protected counter's history is linearizable (porcupine);
//  8. on the semaphores (sem_test.go, checkers_sem_test.go: each acquisition
//     of n permits is a window of n): (a) the windows open at any instant
//     hold at most the pool; (b) on the fair one, waiters granted in their
//     calls are granted in join order (fencing tokens, not compared across
//     a data-losing event); (c) on the fair one, a live waiter whose ask
//     fits, with nobody joined before it still waiting, is granted within
//     semLiveBound; (d) a client that dies holding permits has them back
//     within their lease on the server's clock (read by a probe a lease
//     after the death);
//  9. on the fair multi-seat hold (seats_test.go, checkers_seats_test.go: a
//     granted set is a window on each of its seats): exclusion per seat
//     (check 1), per-seat order by fencing token, liveness within
//     seatsLiveBound, a dead holder's seats back within its lease;
//  10. on RedLock over three servers (redlock_test.go): exclusion with one
//     server stopped or restarted, and a user partitioned to one server
//     never granted.
//
// Joins are seen by a go-redis hook on each client (Env.joinHook) that
// records every fair try-lock-wait script call that replied "queued", with
// the moment it was sent and answered: scripts are atomic, so a join
// answered before another was sent was first in the queue. Reading the
// queue instead would need a poller racing the scripts and could miss a
// waiter that joined and left between two reads; the hook sees every call,
// on the client's own connection, at no cost to the others.
//
// Every bound is in bounds_test.go. A failing test prints its seed, the first
// violation and the history of its lock around it; the whole history is
// written to $FAULT_HISTORY when set. TestRandomFaults replays from
// FAULT_SEED and runs longer with FAULT_DURATION, FAULT_CLIENTS,
// FAULT_WORKERS and FAULT_GAP:
//
//	FAULT_DURATION=30m go test ./faulttests/ -run TestRandomFaults -timeout 40m -v
package faulttests

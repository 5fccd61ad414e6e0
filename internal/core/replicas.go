package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoReplicaAck: the lock was taken on the primary, but none of its
// replicas acknowledged the write within the replica-ack timeout (Redisson's
// NoSyncedSlavesException). The acquisition was undone before this error was
// returned (unless Redis became unreachable in between, in which case the
// lease runs out).
var ErrNoReplicaAck = errors.New("fairlock: no replica acknowledged the acquisition")

// replicaCacheTTL is how long a primary's replica count (from INFO
// replication) is trusted before it is read again.
const replicaCacheTTL = 5 * time.Second

// confirmSource is sent to the lock's primary after an acquisition, in one
// pipeline with WAIT, on one connection.
//
// WAIT counts the replicas that have acknowledged every write made on the
// connection it is sent on; the acquisition script ran on another pooled
// connection. So this script makes a write of its own on WAIT's connection,
// after the acquisition: HINCRBY by 0 of the owner's field, which changes
// nothing but is replicated like any write. Redis's replication stream is
// ordered, so a replica that acknowledged it has the acquisition too. When
// the owner's field is gone (the lock was lost or taken over in between)
// nothing is written and the script replies 0.
//
// KEYS[1] lock hash; ARGV[1] owner id. Reply: 1 held (and touched), 0 not.
const confirmSource = `if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], 0)
  return 1
end
return 0`

var confirmScript = redis.NewScript(confirmSource)

// errLostDuringAck: the hold an acquisition took was gone (its lease ran
// out, or a ForceUnlock deleted it) when its replica acknowledgement was
// asked for, or by the time a replica gave it. Nothing is left to give
// back; the acquisition tries again.
var errLostDuringAck = errors.New("lost during the replica acknowledgement")

// replicaAck keeps the per-primary replica counts.
type replicaAck struct {
	mu    sync.Mutex
	count map[string]replicaCount // by primary address
}

type replicaCount struct {
	n  int
	at time.Time
}

// primaryFor returns the client that talks to the primary serving key, or
// nil when the deployment has no single such node (a Ring, or an unknown
// UniversalClient): no acknowledgement is asked for then.
func (s *Session) primaryFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.RDB.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, nil
}

// replicas is the number of replicas connected to node's primary, from
// INFO replication, cached for replicaCacheTTL. A server that refuses INFO
// (an ACL, a managed service) counts as having none.
func (s *Session) replicas(ctx context.Context, node *redis.Client) (int, error) {
	addr := node.Options().Addr
	if n, ok := s.cachedReplicas(addr); ok {
		return n, nil
	}
	info, err := node.Info(ctx, "replication").Result()
	n := 0
	var re redis.Error
	switch {
	case errors.As(err, &re):
		// Not available here: treat as no replicas.
	case err != nil:
		return 0, err
	default:
		n = parseConnectedReplicas(info)
	}
	s.acks.mu.Lock()
	if s.acks.count == nil {
		s.acks.count = map[string]replicaCount{}
	}
	s.acks.count[addr] = replicaCount{n: n, at: time.Now()}
	s.acks.mu.Unlock()
	return n, nil
}

// ackCanWait reports whether confirming an acquisition may send anything:
// false when acknowledgements are off, when the client is not one whose
// primary confirm can find, or when the plain client's server was seen with
// no replica within replicaCacheTTL. Then the acquisition skips confirm and
// its goroutine (issue 23: the goroutine was started before the cached
// answer was read).
func (s *Session) ackCanWait() bool {
	if s.Config.ReplicaAck < 0 {
		return false
	}
	switch c := s.RDB.(type) {
	case *redis.Client:
		n, ok := s.cachedReplicas(c.Options().Addr)
		return !ok || n != 0
	case *redis.ClusterClient:
		return true
	}
	return false
}

// cachedReplicas is the replica count of the server at addr as replicas
// last read it, when that was within replicaCacheTTL (ok false: not known).
func (s *Session) cachedReplicas(addr string) (n int, ok bool) {
	s.acks.mu.Lock()
	rc, ok := s.acks.count[addr]
	s.acks.mu.Unlock()
	if !ok || time.Since(rc.at) >= replicaCacheTTL {
		return 0, false
	}
	return rc.n, true
}

func (s *Session) forgetReplicas(node *redis.Client) {
	s.acks.mu.Lock()
	delete(s.acks.count, node.Options().Addr)
	s.acks.mu.Unlock()
}

// parseConnectedReplicas reads connected_slaves from INFO replication. On a
// replica (role:slave) it is 0: the lock scripts do not run there.
func parseConnectedReplicas(info string) int {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "connected_slaves:"); ok {
			n, err := strconv.Atoi(v)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// ConfirmAcquire is run after a script reported that owner acquired the
// lock hash name. When replica acknowledgement is on and the lock's primary
// has replicas, it waits (WAIT, at most the replica-ack timeout) until at
// least one replica has the acquisition. It returns nil when acknowledged
// or when there is nothing to wait for; an error matching ErrNoReplicaAck
// when no replica acknowledged; an error matching ErrLost when the owner no
// longer holds the lock on the primary; or the Redis error. On any error
// the caller must undo the acquisition (Mutex.Acquire does, through its
// cleanup of an ambiguous attempt).
func (s *Session) ConfirmAcquire(ctx context.Context, name, owner string) error {
	return s.confirm(ctx, name, heldCheck{confirmScript, []string{name}, []any{owner}})
}

// heldCheck is the script the replica acknowledgement runs before and after
// WAIT (see confirmSource and HeldChecker).
type heldCheck struct {
	sc   *redis.Script
	keys []string
	args []any
}

// confirm is ConfirmAcquire with the hold checked by c, on the primary that
// serves key.
func (s *Session) confirm(ctx context.Context, name string, c heldCheck) error {
	if s.Config.ReplicaAck < 0 {
		return nil
	}
	node, err := s.primaryFor(ctx, name)
	if err != nil || node == nil {
		return err
	}
	asking := false
	for try := 0; ; try++ {
		err = s.confirmOn(ctx, node, asking, name, c)
		if err == nil {
			return nil
		}
		redirect, addr := redirected(err)
		if redirect == "" || try == 3 || ctx.Err() != nil {
			return err
		}
		// The slot is moving or moved between the acquisition and the
		// confirmation: confirm where the key is now.
		cc, _ := s.RDB.(*redis.ClusterClient)
		if cc == nil {
			return err
		}
		if redirect == "MOVED" {
			cc.ReloadState(ctx)
		}
		if next := masterAt(ctx, cc, addr); next != nil {
			node, asking = next, redirect == "ASK"
			continue
		}
		time.Sleep(time.Duration(try+1) * 50 * time.Millisecond)
		if node, err = s.primaryFor(ctx, name); err != nil {
			return err
		}
		asking = false
	}
}

// masterAt finds the cluster client's connection to the primary at addr.
func masterAt(ctx context.Context, cc *redis.ClusterClient, addr string) *redis.Client {
	var mu sync.Mutex
	var found *redis.Client
	_ = cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	return found
}

func (s *Session) confirmOn(ctx context.Context, node *redis.Client, asking bool, name string, c heldCheck) error {
	n, err := s.replicas(ctx, node)
	if err != nil || n == 0 {
		return err
	}
	var held, wait, still *redis.Cmd
	_, err = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		if asking {
			p.Do(ctx, "asking")
		}
		held = c.sc.Eval(ctx, p, c.keys, c.args...)
		// Keep the ack timeout under the client's read timeout (3 s by
		// default): the pipeline's reply is read with that timeout.
		wait = p.Do(ctx, "wait", n, s.Config.ReplicaAck.Milliseconds())
		// The hold again, after the wait: a ForceUnlock (or a loss) while
		// WAIT blocked would otherwise go unseen until the first renewal,
		// and the caller would return holding a lock that another owner
		// may already have taken. Same connection, no extra round trip.
		if asking {
			p.Do(ctx, "asking")
		}
		still = c.sc.Eval(ctx, p, c.keys, c.args...)
		return nil
	})
	if err == nil {
		err = held.Err()
	}
	if err != nil {
		return err
	}
	if v, _ := held.Int64(); v != 1 {
		return fmt.Errorf("%w: %w: %q: gone from the primary right after it was acquired", errLostDuringAck, ErrLost, name)
	}
	acked, err := wait.Int64()
	if err != nil {
		return err
	}
	if v, err := still.Int64(); err != nil {
		return err
	} else if v != 1 {
		return fmt.Errorf("%w: %w: %q: gone from the primary while waiting for a replica", errLostDuringAck, ErrLost, name)
	}
	if acked < int64(n) {
		s.forgetReplicas(node) // a replica may have left: count again next time
	}
	if acked == 0 {
		// The count may be stale: after a failover the new primary may
		// have no replica yet. With none now, there is nothing to wait for.
		if now, err := s.replicas(ctx, node); err == nil && now == 0 {
			return nil
		}
		return fmt.Errorf("%w: %q: 0 of %d replicas within %v", ErrNoReplicaAck, name, n, s.Config.ReplicaAck)
	}
	return nil
}

// redirected parses a "MOVED <slot> <addr>" or "ASK <slot> <addr>" reply.
func redirected(err error) (kind, addr string) {
	var re redis.Error
	if !errors.As(err, &re) {
		return "", ""
	}
	f := strings.Fields(re.Error())
	if len(f) == 3 && (f[0] == "MOVED" || f[0] == "ASK") {
		return f[0], f[2]
	}
	return "", ""
}

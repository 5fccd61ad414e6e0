package demo

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// The semaphore kinds of the --permits mode: N booking windows, each
// booking takes one permit (a window) for its hold.
const (
	FairSemaphore = "fair-semaphore" // semaphore.Fair: FIFO admission
	Semaphore     = "semaphore"      // semaphore.Expirable (Redisson's): whoever retries first
)

// isSemaphore reports a kind of the --permits mode.
func isSemaphore(kind string) bool { return kind == FairSemaphore || kind == Semaphore }

// permitLocker makes a semaphore look like the demo's locker: Lock takes
// one permit, Unlock gives it back. One per contender, used by one
// goroutine at a time.
type permitLocker struct {
	acquire func(ctx context.Context) (*semaphore.Permit, error)
	who     string

	mu  sync.Mutex
	cur *semaphore.Permit
}

func (p *permitLocker) Lock(ctx context.Context) error {
	pm, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.cur = pm
	p.mu.Unlock()
	return nil
}

func (p *permitLocker) Unlock(ctx context.Context) error {
	p.mu.Lock()
	pm := p.cur
	p.cur = nil
	p.mu.Unlock()
	if pm == nil {
		return errors.New("no permit held")
	}
	return pm.Release(ctx)
}

// Token is the fencing token of the permit held: the semaphores draw them
// in grant order, so they order the grants exactly.
func (p *permitLocker) Token() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.Token()
}

// Owner is what the arrival hook knows the contender by (through its
// context: a semaphore's owner id is made per acquisition).
func (p *permitLocker) Owner() string { return p.who }

func newPermitLocker(kind string, c *fairlock.Client, name, who string) (locker, error) {
	pl := &permitLocker{who: who}
	switch kind {
	case FairSemaphore:
		f, err := semaphore.NewFair(c, name)
		if err != nil {
			return nil, err
		}
		pl.acquire = func(ctx context.Context) (*semaphore.Permit, error) { return f.Acquire(ctx, 1, 0) }
	case Semaphore:
		e, err := semaphore.NewExpirable(c, name)
		if err != nil {
			return nil, err
		}
		pl.acquire = func(ctx context.Context) (*semaphore.Permit, error) { return e.Acquire(ctx, 1, 0) }
	default:
		return nil, fmt.Errorf("not a semaphore kind: %q", kind)
	}
	return pl, nil
}

// setPermits gives the run's semaphore its pool.
func setPermits(ctx context.Context, kind string, c *fairlock.Client, name string, n int) error {
	if kind == FairSemaphore {
		f, err := semaphore.NewFair(c, name)
		if err != nil {
			return err
		}
		return f.SetPermits(ctx, n)
	}
	e, err := semaphore.NewExpirable(c, name)
	if err != nil {
		return err
	}
	return e.SetPermits(ctx, n)
}

// semaphoreKeys are the keys of a semaphore run that must be gone at its
// end (all but the pool and the token counter, which the demo deletes), and
// those it deletes.
func semaphoreKeys(kind, name string) (mustGo, demoOwned []string) {
	if kind == FairSemaphore {
		k := wire.SemFairKeysFor(name)
		return []string{k.Holders, k.Leases, k.Queue, k.Wants, k.Grace}, []string{k.Permits, k.Token}
	}
	k := wire.SemKeysFor(name)
	return []string{k.Timeouts}, []string{k.Pool, k.Token}
}

// Package watchdog renews the leases of every lock a client holds with no
// explicit lease, from one goroutine, in batches.
//
// Every period (the lease / 3) it runs the renewal script over the held
// locks, at most Batch keys per call and, on a Redis Cluster, one hash slot
// per call. A lock that is no longer held by its owner (expired, deleted,
// taken by another) is reported lost at once through its entry's callback.
// When renewals fail (Redis unreachable), a lock is reported lost as soon as
// the next attempt would come too late to save its lease.
package watchdog

import (
	"context"
	"sync"
	"time"
)

// RenewFunc renews names[i] for owners[i] and reports which were still held.
// All names of one call share a hash slot.
type RenewFunc func(ctx context.Context, names, owners []string) ([]bool, error)

// SlotFunc maps a key to its cluster hash slot, or nil for one slot.
type SlotFunc func(key string) int

// Watchdog keeps leases alive. Make one with New; Close stops it.
type Watchdog struct {
	renew  RenewFunc
	slot   SlotFunc
	lease  time.Duration
	period time.Duration
	batch  int

	mu      sync.Mutex
	entries map[*Entry]struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// Holder is told when its lock is found lost.
type Holder interface {
	// Lost runs once, on the watchdog's goroutine, and must not block.
	Lost(reason error)
}

// Entry is one registered (lock, owner).
type Entry struct {
	name, owner string
	holder      Holder
	lastRenew   time.Time
}

// New starts a watchdog renewing to lease every lease/3.
func New(renew RenewFunc, slot SlotFunc, lease time.Duration, batch int) *Watchdog {
	if batch <= 0 {
		batch = 100
	}
	w := &Watchdog{
		renew: renew, slot: slot, lease: lease, period: lease / 3, batch: batch,
		entries: map[*Entry]struct{}{},
		stop:    make(chan struct{}), done: make(chan struct{}),
	}
	go w.run()
	return w
}

// Add registers a lock whose lease was just set by its owner. The holder is
// told when the lock is found lost; the entry is then removed.
func (w *Watchdog) Add(name, owner string, holder Holder) *Entry {
	e := &Entry{name: name, owner: owner, holder: holder, lastRenew: time.Now()}
	w.mu.Lock()
	w.entries[e] = struct{}{}
	w.mu.Unlock()
	return e
}

// Remove unregisters e. It is safe to call more than once.
func (w *Watchdog) Remove(e *Entry) {
	w.mu.Lock()
	delete(w.entries, e)
	w.mu.Unlock()
}

// Len reports how many locks are being renewed.
func (w *Watchdog) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

// Close stops the watchdog and waits for its goroutine. Leases are no
// longer renewed.
func (w *Watchdog) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Watchdog) run() {
	defer close(w.done)
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.tick()
		}
	}
}

// Lost reasons passed to onLost.
type lostError string

func (e lostError) Error() string { return string(e) }

const (
	// ErrGone: the renewal found the lock not held by its owner.
	ErrGone = lostError("lock no longer held by its owner (expired, deleted or taken)")
	// ErrUnrenewable: renewals kept failing until the lease could run out.
	ErrUnrenewable = lostError("lease could not be renewed before it ran out")
)

func (w *Watchdog) tick() {
	w.mu.Lock()
	groups := map[int][]*Entry{}
	for e := range w.entries {
		s := 0
		if w.slot != nil {
			s = w.slot(e.name)
		}
		groups[s] = append(groups[s], e)
	}
	w.mu.Unlock()

	// Each call gets its own deadline: one shared by every call of the
	// tick would make the last slots' calls time out when there are many
	// slots, and their live locks would be reported lost.
	for _, g := range groups {
		for len(g) > 0 {
			n := min(len(g), w.batch)
			ctx, cancel := context.WithTimeout(context.Background(), w.period)
			w.renewBatch(ctx, g[:n])
			cancel()
			g = g[n:]
		}
	}
}

func (w *Watchdog) renewBatch(ctx context.Context, batch []*Entry) {
	names := make([]string, len(batch))
	owners := make([]string, len(batch))
	for i, e := range batch {
		names[i], owners[i] = e.name, e.owner
	}
	start := time.Now()
	renewed, err := w.renew(ctx, names, owners)
	for i, e := range batch {
		var reason error
		switch {
		case err == nil && renewed[i]:
			w.mu.Lock()
			e.lastRenew = start
			w.mu.Unlock()
		case err == nil:
			reason = ErrGone
		default:
			// The next try comes one period from now; if the lease will
			// have run out by then, the holder must know now.
			w.mu.Lock()
			late := time.Since(e.lastRenew)+w.period >= w.lease
			w.mu.Unlock()
			if late {
				reason = ErrUnrenewable
			}
		}
		if reason == nil {
			continue
		}
		w.mu.Lock()
		_, still := w.entries[e]
		delete(w.entries, e)
		w.mu.Unlock()
		if still {
			e.holder.Lost(reason)
		}
	}
}

// Package watchdog renews the leases of every lock a client holds with no
// explicit lease, from one ticker, in batches.
//
// Every period (the lease / 3) it runs the renewal script over the held
// locks, at most Batch keys per call and, on a Redis Cluster, one hash slot
// per call. The calls of one tick run concurrently (at most MaxInFlight at
// once), so one slow or unreachable node delays only the locks it serves,
// and each call is bounded by the earliest validity among its locks: a
// renewal that would come too late is not waited for.
//
// The watchdog does not decide when a hold stops being valid: each holder
// keeps its own validity on the local monotonic clock and is told of every
// confirmed renewal (Renewed, with the time the renewal was sent). A lock
// that the renewal finds not held by its owner (expired, deleted, taken, or
// its key overwritten with another type) is reported lost at once. A renewal
// that fails (Redis unreachable, a timeout) reports nothing: the holder's
// validity runs out on its own clock, whatever the network does.
package watchdog

import (
	"context"
	"sync"
	"time"
)

// Status is the outcome of a renewal for one lock.
type Status int8

const (
	// Renewed: still held by its owner; its lease was reset.
	Renewed Status = iota
	// Gone: not held by its owner (expired, deleted or taken).
	Gone
	// Broken: the key could not be read as a lock (another type).
	Broken
)

// RenewFunc renews names[i] for owners[i] and reports each one's status.
// All names of one call share a hash slot.
type RenewFunc func(ctx context.Context, names, owners []string) ([]Status, error)

// Kind says which renewal function renews an entry: KindLock (the one
// given to New) or another registered with SetRenew, such as the read-write
// lock's, whose renewal also extends each read hold's own key.
type Kind uint8

// KindLock is the kind of entries added with Add: renewed by New's function.
const KindLock Kind = 0

// SlotFunc maps a key to its cluster hash slot, or nil for one slot.
type SlotFunc func(key string) int

// MaxInFlight bounds the renewal calls one tick runs at once.
const MaxInFlight = 16

// Watchdog keeps leases alive. Make one with New; Close stops it.
type Watchdog struct {
	renew  RenewFunc
	kinds  map[Kind]RenewFunc // other kinds' renewal (SetRenew)
	slot   SlotFunc
	lease  time.Duration
	period time.Duration
	batch  int

	mu      sync.Mutex
	entries map[*Entry]struct{}
	stop    chan struct{}
	done    chan struct{}
	now     chan struct{} // capacity 1: renew at once (RenewNow)
	calls   sync.WaitGroup
	once    sync.Once
}

// RenewNow makes the watchdog renew every lock now, without waiting for the
// next period (a connection came back after a failure: a restart without
// persistence or a failover may have lost the locks, and the holders are
// told at once instead of within a period). Locks whose renewal is still in
// flight are skipped, as at every tick.
func (w *Watchdog) RenewNow() {
	select {
	case w.now <- struct{}{}:
	default:
	}
}

// Holder is the hold an entry renews.
type Holder interface {
	// Renewed says a renewal sent at sent was confirmed: the lease runs
	// from then. It must not block.
	Renewed(sent time.Time)
	// Lost runs once, when the renewal found the lock not held by its
	// owner; the entry is then removed. It must not block.
	Lost(reason error)
	// ValidUntil is the local instant until which the hold is valid; a
	// renewal call is not waited for past it.
	ValidUntil() time.Time
}

// RenewFailer is a Holder told of each renewal that got no answer (an
// error, or a reply of the wrong length). It must not block.
type RenewFailer interface {
	RenewFailed(err error)
}

// errShortReply: a renewal reply without one status per entry.
var errShortReply = lostError("renewal reply of the wrong length")

// Entry is one registered (lock, owner).
type Entry struct {
	name, owner string
	kind        Kind
	holder      Holder
	inFlight    bool // a renewal call for it has not returned yet
}

// New starts a watchdog renewing to lease every lease/3.
func New(renew RenewFunc, slot SlotFunc, lease time.Duration, batch int) *Watchdog {
	if batch <= 0 {
		batch = 100
	}
	w := &Watchdog{
		renew: renew, slot: slot, lease: lease, period: lease / 3, batch: batch,
		entries: map[*Entry]struct{}{},
		stop:    make(chan struct{}), done: make(chan struct{}), now: make(chan struct{}, 1),
	}
	go w.run()
	return w
}

// Period is the time between two renewals of a lock.
func (w *Watchdog) Period() time.Duration { return w.period }

// SetRenew registers the renewal function of entries of kind k (not
// KindLock). Call it before adding entries of that kind.
func (w *Watchdog) SetRenew(k Kind, f RenewFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kinds == nil {
		w.kinds = map[Kind]RenewFunc{}
	}
	w.kinds[k] = f
}

// Add registers a lock whose lease was just set by its owner.
func (w *Watchdog) Add(name, owner string, holder Holder) *Entry {
	return w.AddKind(name, owner, KindLock, holder)
}

// AddKind is Add for an entry renewed by kind k's function (SetRenew).
func (w *Watchdog) AddKind(name, owner string, k Kind, holder Holder) *Entry {
	e := &Entry{name: name, owner: owner, kind: k, holder: holder}
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

// Close stops the watchdog. Leases are no longer renewed. It waits for the
// ticker goroutine and for renewal calls in flight, each of which is bounded
// by its locks' validity.
func (w *Watchdog) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	w.calls.Wait()
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
		case <-w.now:
			w.tick()
		}
	}
}

// Lost reasons passed to Holder.Lost.
type lostError string

func (e lostError) Error() string { return string(e) }

// errNoRenew: no renewal function for an entry's kind (a programming
// error): nothing is confirmed, so its holders' validity runs out.
var errNoRenew = lostError("no renewal function for this kind")

const (
	// ErrGone: the renewal found the lock not held by its owner.
	ErrGone = lostError("lock no longer held by its owner (expired, deleted or taken)")
	// ErrBroken: the lock's key holds another type.
	ErrBroken = lostError("lock key overwritten (it holds another type)")
)

// tick starts the renewal calls of one period. Entries whose previous call
// has not returned are skipped: one stuck call per lock at most.
func (w *Watchdog) tick() {
	w.mu.Lock()
	// One call renews entries of one slot and one kind.
	type group struct {
		slot int
		kind Kind
	}
	groups := map[group][]*Entry{}
	for e := range w.entries {
		if e.inFlight {
			continue
		}
		e.inFlight = true
		s := 0
		if w.slot != nil {
			s = w.slot(e.name)
		}
		groups[group{s, e.kind}] = append(groups[group{s, e.kind}], e)
	}
	kinds := w.kinds
	w.mu.Unlock()

	sem := make(chan struct{}, MaxInFlight)
	for key, g := range groups {
		renew := w.renew
		if key.kind != KindLock {
			renew = kinds[key.kind]
		}
		for len(g) > 0 {
			n := min(len(g), w.batch)
			batch := g[:n]
			g = g[n:]
			w.calls.Add(1)
			sem <- struct{}{}
			go func() {
				defer w.calls.Done()
				defer func() { <-sem }()
				w.renewBatch(renew, batch)
			}()
		}
	}
}

func (w *Watchdog) renewBatch(renew RenewFunc, batch []*Entry) {
	names := make([]string, len(batch))
	owners := make([]string, len(batch))
	deadline := time.Now().Add(w.period)
	for i, e := range batch {
		names[i], owners[i] = e.name, e.owner
		if v := e.holder.ValidUntil(); v.Before(deadline) {
			deadline = v
		}
	}
	sent := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	var st []Status
	var err error = errNoRenew
	if renew != nil {
		st, err = renew(ctx, names, owners)
	}
	cancel()

	w.mu.Lock()
	for _, e := range batch {
		e.inFlight = false
	}
	w.mu.Unlock()
	if err != nil || len(st) != len(batch) {
		if err == nil {
			err = errShortReply
		}
		for _, e := range batch {
			if f, ok := e.holder.(RenewFailer); ok {
				f.RenewFailed(err)
			}
		}
		return // nothing confirmed: each holder's validity runs out on its own
	}
	for i, e := range batch {
		switch st[i] {
		case Renewed:
			e.holder.Renewed(sent)
			continue
		case Gone:
			w.lost(e, ErrGone)
		default:
			w.lost(e, ErrBroken)
		}
	}
}

func (w *Watchdog) lost(e *Entry, reason error) {
	w.mu.Lock()
	_, still := w.entries[e]
	delete(w.entries, e)
	w.mu.Unlock()
	if still {
		e.holder.Lost(reason)
	}
}

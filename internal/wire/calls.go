package wire

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Args are the values a script call may need. Durations and instants are
// milliseconds, as on the wire; Now is the caller's (client) clock in Unix
// milliseconds. Each wrapper documents which fields it reads.
type Args struct {
	Owner     string // "<client-uuid>:<thread-id>"
	LeaseMs   int64  // lease to set
	WaitMs    int64  // fair lock: the waiter's wait slot
	NowMs     int64  // fair lock: client clock
	GraceMs   int64  // fair lock: head grace (0: off, Redisson's behaviour)
	RequestID string // unlock: latch id, one per unlock call, reused on retry
	LatchMs   int64  // unlock and acquisition latch lifetime
	AcquireID string // acquisition: latch id, one per acquisition call, reused on retry; "" for no latch
	PubCmd    string // "publish" (default when empty) or "spublish"
}

// acquireLatch is the acquisition latch key (a placeholder when there is no
// request id: the scripts then skip the latch, see acquireLatchMs).
func (a Args) acquireLatch(k Keys) string { return k.AcquireLatch(a.AcquireID) }

// acquireLatchMs is the latch lifetime sent with an acquisition: 0 (no
// latch) without a request id.
func (a Args) acquireLatchMs() int64 {
	if a.AcquireID == "" {
		return 0
	}
	return max(a.LatchMs, 1)
}

// ErrAbandoned is the reply to a copy of an acquisition request that its
// caller had already given up on (abandon.lua): the copy changed nothing.
var ErrAbandoned = errors.New("fairlock: acquisition request abandoned")

// ErrGrantOver is the reply to a copy of an acquisition request that an
// earlier copy had granted, when that hold is over (released or lost): the
// copy changed nothing. A caller that sees it must use a new request id.
var ErrGrantOver = errors.New("fairlock: acquisition request already granted and its hold is over")

// acquireErr maps the acquisition scripts' error replies to their errors.
func acquireErr(err error) error {
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "acquisition request abandoned"):
		return marked(ErrAbandoned, err)
	case strings.Contains(err.Error(), "already granted and its hold is over"):
		return marked(ErrGrantOver, err)
	}
	return mixed(err)
}

func (a Args) pubCmd() string { return pub(a.PubCmd) }

// errMarker maps an error reply whose text contains marker to err.
type errMarker struct {
	marker string
	err    error
}

// latchMarkers are the latch replies every latched acquisition shares.
var latchMarkers = []errMarker{
	{"acquisition request abandoned", ErrAbandoned},
	{"already granted and its hold is over", ErrGrantOver},
}

// markErr joins err with the error of the first of own's markers, or of
// latchMarkers', that its text contains; err as it is otherwise.
func markErr(err error, own []errMarker) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, ms := range [2][]errMarker{own, latchMarkers} {
		for _, m := range ms {
			if strings.Contains(msg, m.marker) {
				return marked(m.err, err)
			}
		}
	}
	return err
}

// markedErr is a script's error reply recognised as one of our errors: it
// matches both (errors.Is, errors.As) and reads as one line without the
// "fairlock: " prefix (the caller's wrapping gives it once): the reply's
// text when one of our scripts wrote it (it says more than the error:
// "asked for 3 permits, the pool has 1"), the error's with Redis's reply
// otherwise (WRONGTYPE ...).
type markedErr struct{ known, reply error }

func marked(known, reply error) error { return &markedErr{known, reply} }

func (e *markedErr) Error() string {
	k := strings.TrimPrefix(e.known.Error(), "fairlock: ")
	r := strings.TrimPrefix(e.reply.Error(), "ERR ")
	if ours, ok := strings.CutPrefix(r, "fairlock: "); ok {
		return ours
	}
	return k + " (" + r + ")"
}

func (e *markedErr) Unwrap() []error { return []error{e.known, e.reply} }

// UnlockResult is the outcome of an unlock script.
type UnlockResult int

const (
	// NotHeld: the caller did not hold the lock; nothing changed.
	NotHeld UnlockResult = iota
	// StillHeld: one hold was released and the caller still holds the lock.
	StillHeld
	// Released: the lock is free and a waiter was woken.
	Released
)

func (r UnlockResult) String() string {
	switch r {
	case NotHeld:
		return "not-held"
	case StillHeld:
		return "still-held"
	case Released:
		return "released"
	}
	return "UnlockResult(" + strconv.Itoa(int(r)) + ")"
}

// nilOrInt reads a reply that is nil or "OK" (true) or an integer.
func nilOrInt(cmd *redis.Cmd) (isNil bool, n int64, err error) {
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return true, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	switch v := v.(type) {
	case int64:
		return false, v, nil
	case string:
		if v == "OK" {
			return true, 0, nil
		}
	}
	return false, 0, fmt.Errorf("lua: unexpected reply %T %v", v, v)
}

func unlockResult(cmd *redis.Cmd) (UnlockResult, error) {
	isNil, n, err := nilOrInt(cmd)
	switch {
	case err != nil:
		return NotHeld, err
	case isNil:
		return NotHeld, nil
	case n == 0:
		return StillHeld, nil
	case n == 1:
		return Released, nil
	}
	return NotHeld, fmt.Errorf("lua: unexpected unlock reply %d", n)
}

// Acquire runs acquire.lua (reads Owner, LeaseMs, AcquireID, LatchMs). It
// reports whether the owner holds the lock now, and otherwise the holder's
// remaining lease in ms.
func (s *Scripts) Acquire(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, ttlMs int64, err error) {
	c := s.cmd(FileAcquire, 2, 3)
	c.key(k.Name).str(a.acquireLatch(k)).num(a.LeaseMs).key(a.Owner).num(a.acquireLatchMs())
	acquired, ttlMs, err = nilOrInt(c.run(ctx, rdb))
	return acquired, ttlMs, acquireErr(err)
}

// Abandon runs abandon.lua (reads Owner, AcquireID, LatchMs): the request
// AcquireID is given up, so late copies of it do nothing. It reports whether
// a copy had taken the lock and the owner still holds it; that hold is then
// the caller's to give back.
func (s *Scripts) Abandon(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (held bool, err error) {
	// EVAL, not EVALSHA first: abandon is rare, runs when the network is
	// slow or failing, and is often the first use of its script on a server,
	// where EVALSHA would cost a NOSCRIPT round trip.
	n, err := s.Script(FileAbandon).Eval(ctx, rdb, []string{k.Name, a.acquireLatch(k)}, a.Owner, max(a.LatchMs, 1)).Int64()
	return n == 1, err
}

// Unlock runs unlock.lua (reads Owner, LeaseMs, RequestID, LatchMs, PubCmd).
func (s *Scripts) Unlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (UnlockResult, error) {
	c := s.cmd(FileUnlock, 5, 5)
	c.key(k.Name).key(k.Channel).str(k.Latch(a.RequestID)).key(k.Queue).key(k.ScalableQueue())
	c.key(UnlockMessage).num(a.LeaseMs).key(a.Owner).key(a.pubCmd()).num(a.LatchMs)
	return unlockResult(c.run(ctx, rdb))
}

// ForceUnlock runs force_unlock.lua (reads PubCmd). It reports whether a
// lock was deleted.
func (s *Scripts) ForceUnlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (bool, error) {
	_, n, err := nilOrInt(s.call(ctx, rdb, FileForceUnlock, []string{k.Name, k.Channel, k.Queue, k.ScalableQueue()}, UnlockMessage, a.pubCmd()))
	return n == 1, err
}

// RenewStatus is the outcome of renew.lua for one lock.
type RenewStatus int8

const (
	// RenewOK: still held by its owner; the lease was reset.
	RenewOK RenewStatus = 1
	// RenewGone: not held by its owner (gone, or held by another).
	RenewGone RenewStatus = 0
	// RenewWrongType: the key holds another type.
	RenewWrongType RenewStatus = -1
)

// RenewEach runs renew.lua over names (all in one cluster slot) with their
// owners, resetting each still-held lease to leaseMs, and reports each
// lock's status.
func (s *Scripts) RenewEach(ctx context.Context, rdb redis.Scripter, names, owners []string, leaseMs int64) ([]RenewStatus, error) {
	if len(names) != len(owners) {
		panic("lua: Renew needs one owner per name")
	}
	args := make([]any, 0, len(owners)+1)
	args = append(args, leaseMs)
	for _, o := range owners {
		args = append(args, o)
	}
	v, err := s.call(ctx, rdb, FileRenew, names, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != len(names) {
		return nil, fmt.Errorf("lua: renew replied %d results for %d keys", len(v), len(names))
	}
	st := make([]RenewStatus, len(v))
	for i, r := range v {
		st[i] = RenewStatus(r)
	}
	return st, nil
}

// Renew is RenewEach reporting only whether each lock was still held (and
// renewed).
func (s *Scripts) Renew(ctx context.Context, rdb redis.Scripter, names, owners []string, leaseMs int64) (renewed []bool, err error) {
	st, err := s.RenewEach(ctx, rdb, names, owners, leaseMs)
	if err != nil {
		return nil, err
	}
	renewed = make([]bool, len(st))
	for i, r := range st {
		renewed[i] = r == RenewOK
	}
	return renewed, nil
}

// The fair lock. Both engines (Redisson-compatible and scalable) run the
// same script bodies (fair_*.lua) with the same KEYS and ARGV, each over its
// own queue operations (queue_redisson.lua, queue_scalable.lua), so one set
// of wrappers, FairSet, serves both.

// gracePrefix names the fair lock's head grace key (fair_common.lua): not in
// Redisson, whose scripts never read it.
const gracePrefix = "fairlock_grace"

// Grace is the fair lock's head grace key, "fairlock_grace:{name}": the
// owner id of the queue head and, in its PTTL, the time it has left to take
// the free lock (see fair_common.lua).
func (k Keys) Grace() string {
	if k.grace == "" {
		return prefixName(gracePrefix, k.Name)
	}
	return k.grace
}

// Notes is the Redisson engine's hash of handoff notes, owner -> note
// (queue_redisson.lua; not in Redisson): named after the queue key as the
// script names it, "fairlock_notes" and what follows "redisson_lock_queue"
// ("fairlock_notes:{name}"); "" for a queue key of another shape.
func (k Keys) Notes() string {
	rest, ok := strings.CutPrefix(k.Queue, "redisson_lock_queue")
	if !ok {
		return ""
	}
	return "fairlock_notes" + rest
}

// FairSet is one fair-lock engine's scripts. Scripts.Fair is the
// Redisson-compatible engine, ScalableScripts.Fair the scalable one.
type FairSet struct {
	set *Scripts
}

// Handoff reports whether a release of this engine may grant the lock to
// the live head directly, publishing a Grant on its channel (fair_common.lua,
// handoff; Unlock passes the token key and the acquisition latch prefix for
// it): always, on both engines (on the Redisson engine only to a head of
// this library's clients, queue_redisson.lua; issue 33).
func (f FairSet) Handoff() bool { return true }

// Fair returns the Redisson-compatible fair engine's scripts of s.
func (s *Scripts) Fair() FairSet { return FairSet{set: s} }

// TryLock runs fair_try_lock.lua (reads Owner, LeaseMs, NowMs, WaitMs,
// GraceMs, PubCmd, AcquireID, LatchMs). It never queues. TryLockToken also
// reports the fencing token.
func (f FairSet) TryLock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, err error) {
	acquired, _, err = f.TryLockToken(ctx, rdb, k, a)
	return acquired, err
}

// TryLockWait runs fair_try_lock_wait.lua (reads Owner, LeaseMs, WaitMs,
// NowMs, GraceMs, PubCmd, AcquireID, LatchMs): take the lock, or join or
// stay in the queue. When not acquired, ttlMs is how long to wait before
// trying again (see the script; -1: the lock has no expiry).
// TryLockWaitToken also reports the fencing token.
func (f FairSet) TryLockWait(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, ttlMs int64, err error) {
	acquired, ttlMs, _, err = f.TryLockWaitToken(ctx, rdb, k, a)
	return acquired, ttlMs, err
}

// AcquireFailed runs fair_acquire_failed.lua (reads Owner, WaitMs, GraceMs,
// PubCmd): the owner leaves the queue. Never refused.
func (f FairSet) AcquireFailed(ctx context.Context, rdb redis.Scripter, k Keys, a Args) error {
	err := f.set.call(ctx, rdb, FileFairAcquireFailed,
		[]string{k.Queue, k.Timeouts, k.Name, k.Channel, k.ScalableQueue(), k.Grace()},
		a.Owner, a.WaitMs, a.pubCmd(), UnlockMessage, a.GraceMs).Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// Unlock runs fair_unlock.lua (reads Owner, LeaseMs, NowMs, RequestID,
// LatchMs, GraceMs, PubCmd). Never refused.
func (f FairSet) Unlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (UnlockResult, error) {
	c := f.set.cmd(FileFairUnlock, 9, 7)
	c.key(k.Name).key(k.Queue).key(k.Timeouts).key(k.Channel).str(k.Latch(a.RequestID)).key(k.ScalableQueue()).key(k.Grace())
	c.key(k.Token()).key(k.AcquireLatchPrefix())
	c.key(UnlockMessage).num(a.LeaseMs).key(a.Owner).now(a.NowMs).key(a.pubCmd()).num(a.LatchMs).num(a.GraceMs)
	return unlockResult(c.run(ctx, rdb))
}

// ForceUnlock runs fair_force_unlock.lua (reads NowMs, GraceMs, PubCmd). It
// reports whether a lock was deleted. Never refused.
func (f FairSet) ForceUnlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (bool, error) {
	_, n, err := nilOrInt(f.set.call(ctx, rdb, FileFairForceUnlock,
		[]string{k.Name, k.Queue, k.Timeouts, k.Channel, k.ScalableQueue(), k.Grace()},
		UnlockMessage, a.NowMs, a.pubCmd(), a.GraceMs))
	return n == 1, err
}

// FairTryLock is s.Fair().TryLock.
func (s *Scripts) FairTryLock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (bool, error) {
	return s.Fair().TryLock(ctx, rdb, k, a)
}

// FairTryLockWait is s.Fair().TryLockWait.
func (s *Scripts) FairTryLockWait(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (bool, int64, error) {
	return s.Fair().TryLockWait(ctx, rdb, k, a)
}

// FairAcquireFailed is s.Fair().AcquireFailed.
func (s *Scripts) FairAcquireFailed(ctx context.Context, rdb redis.Scripter, k Keys, a Args) error {
	return s.Fair().AcquireFailed(ctx, rdb, k, a)
}

// FairUnlock is s.Fair().Unlock.
func (s *Scripts) FairUnlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (UnlockResult, error) {
	return s.Fair().Unlock(ctx, rdb, k, a)
}

// FairForceUnlock is s.Fair().ForceUnlock.
func (s *Scripts) FairForceUnlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (bool, error) {
	return s.Fair().ForceUnlock(ctx, rdb, k, a)
}

// Grant is a direct handoff's message (the scalable fair engine's release,
// fair_common.lua's handoff), published on the head's channel as
// "g:<token>:<granted ms>:<request id>": the lock was granted to the owner
// of the channel for its acquisition request RequestID, with fencing token
// Token, the lock's TTL set to TTLMs when the release ran.
type Grant struct {
	Token     int64
	TTLMs     int64
	RequestID string
}

// ParseGrant reads a grant message; ok false for any other payload (a
// wake-up, "0").
func ParseGrant(payload string) (g Grant, ok bool) {
	rest, ok := strings.CutPrefix(payload, "g:")
	if !ok {
		return Grant{}, false
	}
	tok, rest, ok1 := strings.Cut(rest, ":")
	ttl, id, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return Grant{}, false
	}
	t, err1 := strconv.ParseInt(tok, 10, 64)
	d, err2 := strconv.ParseInt(ttl, 10, 64)
	if err1 != nil || err2 != nil || d <= 0 {
		return Grant{}, false
	}
	return Grant{Token: t, TTLMs: d, RequestID: id}, true
}

// Note is a wake-up that carries its reply (issue 23; the scalable engine,
// fair_common.lua's wake_front): published instead of a plain wake-up to
// the head of the queue or the waiter behind it while the lock is held, as
// "s:<sleep ms>:<ahead>": the sleep and the place an attempt would have
// replied (SleepMs -1: a lock with no expiry; Ahead -1: unknown).
type Note struct {
	SleepMs int64
	Ahead   int64
}

// ParseNote reads a Note payload.
func ParseNote(payload string) (n Note, ok bool) {
	rest, ok := strings.CutPrefix(payload, "s:")
	if !ok {
		return Note{}, false
	}
	sleep, ahead, ok := strings.Cut(rest, ":")
	if !ok {
		return Note{}, false
	}
	s, err1 := strconv.ParseInt(sleep, 10, 64)
	a, err2 := strconv.ParseInt(ahead, 10, 64)
	if err1 != nil || err2 != nil || s < -1 || a < -1 {
		return Note{}, false
	}
	return Note{SleepMs: s, Ahead: a}, true
}

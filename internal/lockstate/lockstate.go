// Package lockstate reads the state of one lock from Redis, read-only, in
// one snapshot: who holds it and how many times, the lease (PTTL), who
// waits in which order with which deadline (either fair engine), the fair
// lock's head grace, the fencing token, and anything in that state that the
// scripts should never leave behind.
//
// It is the one reader of a lock's keys that the inspector (cmd/fairlock)
// and the tests share. Read sends one MULTI/EXEC of read commands (TYPE,
// HGETALL, PTTL, LRANGE, ZRANGE WITHSCORES, GET, TIME), so the State
// describes one instant of the server, and it never writes.
//
// ReadAll reads every kind of state the library keeps under a name (the
// lock, a read-write lock, the fair and the permit-expirable semaphores,
// the name's seat venue: see Found) in one such transaction, and says
// which kinds it found, none for a name with no key ("no such lock").
//
// Unlock and acquisition latches are not read: their keys carry a request
// id, so finding them would take a SCAN.
package lockstate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// Severity of a problem.
const (
	// Error: a state the scripts never leave behind (a bug, a crash in the
	// middle of a hand-written change, or someone editing the keys).
	Error = "error"
	// Warning: a state that is normal for a moment (a free lock whose head
	// has not taken it yet) but that is wrong if it lasts.
	Warning = "warning"
)

// Engines, as State.Engine names them.
const (
	Redisson = "redisson" // the queue list and the timeout zset
	Scalable = "scalable" // fair.Scalable's linked list
	Both     = "both"     // both engines' queue keys exist: an error
)

// Problem is one inconsistency found in a lock's state.
type Problem struct {
	Code     string `json:"code"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

// Holder is one owner in the lock hash.
type Holder struct {
	Owner     string
	HoldCount int64
	// Raw is the stored value when it is not a positive integer (then
	// HoldCount is 0).
	Raw string
}

// Waiter is one queued owner.
type Waiter struct {
	Position    int // 1 is the head; 0 for a deadline of an owner not queued
	Owner       string
	HasDeadline bool
	// DeadlineMs is the waiter's deadline, Unix milliseconds on the clock
	// of the client that queued it (the zset score, or the scalable
	// queue's head deadline plus the deltas).
	DeadlineMs int64
	// LeftMs is DeadlineMs minus the reader's clock (State.NowMs);
	// negative when the deadline has passed; 0 when there is no deadline.
	LeftMs int64
	// Handoff: the waiter joined with a handoff note (this library's
	// client, with an acquisition request), so a release grants it the
	// lock directly when it is the head (fair_common.lua's handoff): the
	// notes hash on the Redisson engine, its s:<owner> field on the
	// scalable one.
	Handoff bool
}

// Grace is the fair lock's head grace key (fair_common.lua): the head's
// owner id ("+" in front for its second grace), and in the key's PTTL, less
// GraceMarginMs, the grace it has left.
type Grace struct {
	Owner  string // the head that may take the free lock; "" when no key
	Second bool   // the owner's second grace
	PTTLMs int64  // the key's PTTL; 0 when no key
	// LeftMs is the grace left, PTTLMs - GraceMarginMs: 0 or less when it
	// ran out. 0 when no key.
	LeftMs int64
}

// GraceMarginMs is how long the grace key outlives the grace
// (fair_common.lua's GRACE_MARGIN, model.GraceMargin).
const GraceMarginMs = 60_000

// Keys are the names of the keys Read reads.
type Keys struct {
	Lock, Queue, Timeouts, ScalableQueue, Grace, Token string
	Notes                                              string // the Redisson engine's handoff notes
}

// State is the state of one lock at one instant.
type State struct {
	Name string
	Keys Keys
	// Engine is Redisson, Scalable, Both (an error), or "" when no queue
	// key exists.
	Engine string
	// NowMs is the reader's clock, Unix ms; RedisTimeMs the server's
	// (TIME), 0 if it could not be read.
	NowMs       int64
	RedisTimeMs int64
	Locked      bool
	// Holders, sorted by owner, is normally one owner; more is a problem.
	Holders []Holder
	// LeaseMs is the lock's PTTL: -1 for a lock with no expiry; 0 when
	// the lock is free.
	LeaseMs int64
	// Queue is the waiters, head first.
	Queue []Waiter
	// Unqueued are owners with a deadline in the timeout zset but not in
	// the queue list.
	Unqueued []Waiter
	Grace    Grace
	// Token is the fencing token counter; HasToken is false when the key
	// does not exist (or is not a number).
	Token    int64
	HasToken bool
	Problems []Problem
	// OK is false when a problem of severity Error was found.
	OK bool
}

// Read reads the lock called name from rdb, with the caller's clock now.
func Read(ctx context.Context, rdb redis.Cmdable, name string) (*State, error) {
	return ReadAt(ctx, rdb, name, time.Now())
}

// ReadAt reads the lock called name from rdb and analyses it. now is the
// reader's clock (deadlines are client-clock instants). It sends only read
// commands, in one MULTI/EXEC.
func ReadAt(ctx context.Context, rdb redis.Cmdable, name string, now time.Time) (*State, error) {
	if err := wire.ValidateName(name); err != nil {
		return nil, err
	}
	s := newState(name, now)
	snap, err := read(ctx, rdb, s.Keys)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	s.decode(snap)
	s.OK = ok(s.Problems)
	return s, nil
}

// newState is the State of the lock called name before it is read.
func newState(name string, now time.Time) *State {
	k := wire.KeysFor(name)
	return &State{Name: name, NowMs: now.UnixMilli(), Holders: []Holder{}, Queue: []Waiter{},
		Unqueued: []Waiter{}, Problems: []Problem{},
		Keys: Keys{Lock: k.Name, Queue: k.Queue, Timeouts: k.Timeouts, ScalableQueue: k.ScalableQueue(),
			Grace: k.Grace(), Token: k.Token(), Notes: k.Notes()}}
}

// ok is false when a problem of severity Error is among ps.
func ok(ps []Problem) bool {
	for _, p := range ps {
		if p.Severity == Error {
			return false
		}
	}
	return true
}

// The keys checked by TYPE, in the order of their wrong-type problems. The
// grace and token keys are not: a GET of a key of another type fails, and
// then they are reported absent.
const (
	kLock = iota
	kQueue
	kTimeouts
	kScalable
	nKeys
)

// wantType is each key's type as the scripts write it.
var wantType = [nKeys]string{"hash", "list", "zset", "hash"}

// snapshot is the replies of one read transaction.
type snapshot struct {
	keys      [nKeys]string
	types     [nKeys]*redis.StatusCmd
	hash      *redis.MapStringStringCmd
	pttl      *redis.Cmd
	list      *redis.StringSliceCmd
	zset      *redis.ZSliceCmd
	squeue    *redis.MapStringStringCmd
	notes     *redis.MapStringStringCmd // nil when not read
	grace     *redis.StringCmd
	gracePTTL *redis.Cmd
	token     *redis.StringCmd
	redisNow  *redis.TimeCmd
	// hashIsRW: the hash is a read-write lock's (ReadAll shows it as
	// such), not read as the lock's holders.
	hashIsRW bool
}

// read sends the read transaction. A command on a key of the wrong type
// fails on its own inside EXEC; the TYPE replies say which keys those are,
// and their errors are ignored.
func read(ctx context.Context, rdb redis.Cmdable, k Keys) (*snapshot, error) {
	var s *snapshot
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		s = queueReads(ctx, p, k)
		return nil
	})
	if err := s.err(err); err != nil {
		return nil, err
	}
	return s, nil
}

// queueReads adds the lock's read commands to p.
func queueReads(ctx context.Context, p redis.Pipeliner, k Keys) *snapshot {
	s := &snapshot{keys: [nKeys]string{k.Lock, k.Queue, k.Timeouts, k.ScalableQueue}}
	for i, key := range s.keys {
		s.types[i] = p.Type(ctx, key)
	}
	s.hash = p.HGetAll(ctx, k.Lock)
	s.pttl = p.Do(ctx, "pttl", k.Lock)
	s.list = p.LRange(ctx, k.Queue, 0, -1)
	s.zset = p.ZRangeWithScores(ctx, k.Timeouts, 0, -1)
	s.squeue = p.HGetAll(ctx, k.ScalableQueue)
	if k.Notes != "" {
		s.notes = p.HGetAll(ctx, k.Notes)
	}
	s.grace = p.Get(ctx, k.Grace)
	s.gracePTTL = p.Do(ctx, "pttl", k.Grace)
	s.token = p.Get(ctx, k.Token)
	s.redisNow = p.Time(ctx)
	return s
}

// err is the error of the transaction that read s (err its EXEC's): a
// command on a key of the wrong type fails on its own and is not one.
func (s *snapshot) err(err error) error {
	for _, t := range s.types {
		if t.Err() != nil {
			return t.Err()
		}
	}
	if err != nil && err != redis.Nil && !isWrongType(err) {
		return err
	}
	return nil
}

func isWrongType(err error) bool { return strings.HasPrefix(err.Error(), "WRONGTYPE") }

func (s *State) problem(sev, code, format string, args ...any) {
	s.Problems = append(s.Problems, Problem{Code: code, Severity: sev, Message: fmt.Sprintf(format, args...)})
}

// Holder returns the owner holding the lock and its hold count, or "" and
// 0 when the lock is free. With several holders (a problem) it returns the
// first by owner.
func (s *State) Holder() (owner string, count int64) {
	if len(s.Holders) == 0 {
		return "", 0
	}
	return s.Holders[0].Owner, s.Holders[0].HoldCount
}

// Holds returns the lock hash as owner -> hold count (0 for a value that is
// not a positive integer).
func (s *State) Holds() map[string]int64 {
	m := make(map[string]int64, len(s.Holders))
	for _, h := range s.Holders {
		m[h.Owner] = h.HoldCount
	}
	return m
}

// Owners returns the queued owners, head first.
func (s *State) Owners() []string {
	out := make([]string, 0, len(s.Queue))
	for _, w := range s.Queue {
		out = append(out, w.Owner)
	}
	return out
}

// Deadlines returns every deadline as owner -> Unix ms: those of the queued
// waiters that have one and those of the owners not queued (Unqueued).
func (s *State) Deadlines() map[string]int64 {
	m := make(map[string]int64, len(s.Queue)+len(s.Unqueued))
	for _, w := range append(s.Queue[:len(s.Queue):len(s.Queue)], s.Unqueued...) {
		if w.HasDeadline {
			m[w.Owner] = w.DeadlineMs
		}
	}
	return m
}

// Queued reports whether owner is in the queue.
func (s *State) Queued(owner string) bool {
	for _, w := range s.Queue {
		if w.Owner == owner {
			return true
		}
	}
	return false
}

// Has reports whether a problem with this code was found.
func (s *State) Has(code string) bool {
	for _, p := range s.Problems {
		if p.Code == code {
			return true
		}
	}
	return false
}

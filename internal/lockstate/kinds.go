package lockstate

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// Kinds of state a name can have, as Found.Kinds names them: every kind
// of key set the library writes.
const (
	// KindLock: the lock hash "name" (owner -> hold count) and the fair
	// lock's queue, grace and token keys: the reentrant, fenced and fair
	// locks (they share the hash; the queue keys say which engine).
	KindLock = "lock"
	// KindRWLock: the read-write lock's hash "name" with its "mode" field.
	KindRWLock = "rwlock"
	// KindFairSemaphore: semaphore.NewFair's fairlock_sem*:{name} keys.
	KindFairSemaphore = "fair-semaphore"
	// KindExpirableSemaphore: Redisson's RPermitExpirableSemaphore
	// (semaphore.NewExpirable): the pool "name" (a string) and
	// "{name}:timeout".
	KindExpirableSemaphore = "expirable-semaphore"
	// KindSeats: the multi-seat hold's venue (multi.NewSeats), the keys
	// fairlock_seats*:{venue} of the name's venue.
	KindSeats = "seats"
)

// Found is everything the library keeps under one name, at one instant:
// each kind of state whose keys exist (normally one).
type Found struct {
	Name string
	// Kinds are the kinds found, in the order of the constants; empty
	// when the name has no key of any kind ("no such lock").
	Kinds []string
	// NowMs is the reader's clock, RedisTimeMs the server's (TIME).
	NowMs, RedisTimeMs int64
	// One per kind found, nil for the others.
	Lock    *State
	RW      *RWState
	FairSem *FairSemState
	ExpSem  *ExpSemState
	Seats   *SeatsState
	// OK is false when a kind found has a problem of severity Error.
	OK bool
	// OtherVenue is the venue of name (a seat name with a hash tag) when
	// the venue has state but name is none of its seats: a hint for a
	// misspelled seat.
	OtherVenue string
}

// RWState is a read-write lock (Redisson's RReadWriteLock, package rwlock).
type RWState struct {
	Keys struct {
		Hash    string `json:"hash"`
		Timeout string `json:"read_timeouts"` // the prefix of each read hold's key
	} `json:"keys"`
	// Mode is "read" or "write" (the hash's mode field).
	Mode string `json:"mode"`
	// LeaseMs is the hash's PTTL: the lock's lease; -1: no expiry.
	LeaseMs int64      `json:"lease_ms"`
	Holders []RWHolder `json:"holders"`
	// Problems found; OK is false when one has severity Error.
	Problems []Problem `json:"problems"`
	OK       bool      `json:"ok"`
}

// RWHolder is one field of a read-write lock's hash.
type RWHolder struct {
	Owner     string `json:"owner"`
	Write     bool   `json:"write"` // the writer's field ("<owner>:write")
	HoldCount int64  `json:"hold_count"`
	Raw       string `json:"raw,omitempty"`
	// ReadLeasesMs are a reader's holds' leases left (the PTTL of each
	// hold's timeout key, hold 1 first; -2: the key is missing).
	ReadLeasesMs []int64 `json:"read_leases_ms,omitempty"`
}

// SemHolder is one holder of a fair semaphore or of a seat venue.
type SemHolder struct {
	Owner string `json:"owner"`
	// Permits held (fair semaphore), or seats (venue).
	Count int64  `json:"count"`
	Raw   string `json:"raw,omitempty"`
	// LeaseEndMs is the lease end on the server's clock, LeaseMs what is
	// left of it (0 or less: ended, reclaimed by the next script);
	// HasLease false when the holder has no lease entry (a problem).
	HasLease   bool  `json:"has_lease"`
	LeaseEndMs int64 `json:"lease_end_ms,omitempty"`
	LeaseMs    int64 `json:"lease_ms"`
	// Seats are a venue holder's seats.
	Seats []string `json:"seats,omitempty"`
}

// SemWaiter is one queued owner of a fair semaphore.
type SemWaiter struct {
	Position int    `json:"position"`
	Owner    string `json:"owner"`
	Asks     int64  `json:"asks"` // permits asked; 0 when unknown (a problem)
	// DeadlineMs is its deadline on the server's clock, LeftMs what is
	// left of it.
	DeadlineMs int64 `json:"deadline_ms"`
	LeftMs     int64 `json:"left_ms"`
}

// GraceState is a head grace: the owner that may take what is free, the
// grace left on the server's clock (0 or less: ran out), its second grace.
type GraceState struct {
	Owner  string `json:"owner"`
	Second bool   `json:"second"`
	LeftMs int64  `json:"left_ms"`
}

// FairSemState is a fair semaphore (semaphore.NewFair).
type FairSemState struct {
	Keys wire.SemFairKeys `json:"-"`
	// PoolSet is false when the pool key is absent (acquisitions are
	// refused); Pool is its value, PoolRaw when it is not an integer.
	PoolSet bool   `json:"pool_set"`
	Pool    int64  `json:"pool"`
	PoolRaw string `json:"pool_raw,omitempty"`
	// Held are the permits of holders whose lease has not ended;
	// Available the pool less them (negative after a shrink).
	Held      int64       `json:"held"`
	Available int64       `json:"available"`
	Holders   []SemHolder `json:"holders"`
	Queue     []SemWaiter `json:"queue"`
	Grace     *GraceState `json:"grace,omitempty"`
	Token     int64       `json:"token"`
	HasToken  bool        `json:"has_token"`
	Problems  []Problem   `json:"problems"`
	OK        bool        `json:"ok"`
}

// ExpPermit is one permit of a permit-expirable semaphore.
type ExpPermit struct {
	ID string `json:"id"` // 32 hex characters, as Redisson shows it
	// ExpiryMs is the score (Unix ms; Go clients write the server's
	// clock); NoExpiry for a permit without a lease; LeaseMs what is left
	// (0 or less: expired, reclaimed by the next call).
	ExpiryMs int64 `json:"expiry_ms"`
	NoExpiry bool  `json:"no_expiry"`
	LeaseMs  int64 `json:"lease_ms"`
}

// ExpSemState is a permit-expirable semaphore (Redisson's
// RPermitExpirableSemaphore, semaphore.NewExpirable).
type ExpSemState struct {
	Keys wire.SemKeys `json:"-"`
	// PoolSet is false when the pool key is absent; Available is its
	// value (permits free now, before expired ones are reclaimed).
	PoolSet   bool   `json:"pool_set"`
	Available int64  `json:"available"`
	PoolRaw   string `json:"pool_raw,omitempty"`
	// Acquired are the permits whose expiry has not passed; Expired
	// those still in the set whose expiry passed (the next call gives
	// them back to the pool).
	Acquired int64       `json:"acquired"`
	Expired  int64       `json:"expired"`
	Permits  []ExpPermit `json:"permits"`
	Token    int64       `json:"token"`
	HasToken bool        `json:"has_token"`
	// TokenOnly: of the semaphore only the token counter (shared by both
	// semaphores) is left.
	TokenOnly bool      `json:"token_only,omitempty"`
	Problems  []Problem `json:"problems"`
	OK        bool      `json:"ok"`
}

// SeatState is one seat of a venue.
type SeatState struct {
	Seat   string   `json:"seat"`
	Holder string   `json:"holder,omitempty"`
	Queue  []string `json:"queue"` // owners, head first
}

// SeatWaiter is one request of a venue that waits.
type SeatWaiter struct {
	Owner string   `json:"owner"`
	Seats []string `json:"seats"`
	// Grace is its grace as a ready request, nil when it has none.
	Grace *GraceState `json:"grace,omitempty"`
}

// SeatsState is a venue of the multi-seat hold (multi.NewSeats).
type SeatsState struct {
	Keys  wire.SeatsKeys `json:"-"`
	Venue string         `json:"venue"`
	// Seat is the name inspected when it is a seat of the venue (named
	// by a holder or a queue), else "".
	Seat     string       `json:"seat,omitempty"`
	Holders  []SemHolder  `json:"holders"`
	Seats    []SeatState  `json:"seats"`
	Waiting  []SeatWaiter `json:"waiting"`
	Token    int64        `json:"token"`
	HasToken bool         `json:"has_token"`
	Problems []Problem    `json:"problems"`
	OK       bool         `json:"ok"`
}

// NoExpiry is the expirable semaphore's score of a permit without a lease.
const NoExpiry = wire.SemNever

// allSnap is the replies of ReadAll's one transaction.
type allSnap struct {
	lock *snapshot
	// fair semaphore
	fsTypes                     [6]*redis.StatusCmd
	fsHolders, fsQueue, fsWants *redis.MapStringStringCmd
	fsLeases                    *redis.ZSliceCmd
	fsPool, fsGrace, semToken   *redis.StringCmd
	fsGracePTTL                 *redis.Cmd
	// expirable semaphore
	esPool    *redis.StringCmd
	esType    *redis.StatusCmd
	esPermits *redis.ZSliceCmd
	// seats
	stTypes                         [7]*redis.StatusCmd
	stHolds, stSeat, stReq, stQueue *redis.MapStringStringCmd
	stGrace                         *redis.MapStringStringCmd
	stLeases                        *redis.ZSliceCmd
	stToken                         *redis.StringCmd
}

// ReadAll reads every kind of state the library keeps under name, in one
// MULTI/EXEC of read commands (and, for a read-write lock, one more with
// the PTTL of each read hold's key). It never writes.
func ReadAll(ctx context.Context, rdb redis.Cmdable, name string, now time.Time) (*Found, error) {
	if err := wire.ValidateName(name); err != nil {
		return nil, err
	}
	lk := newState(name, now)
	fk, ek, sk := wire.SemFairKeysFor(name), wire.SemKeysFor(name), wire.SeatsKeysFor(wire.Venue(name))
	a := &allSnap{}
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		a.lock = queueReads(ctx, p, lk.Keys)
		for i, key := range []string{fk.Holders, fk.Leases, fk.Permits, fk.Queue, fk.Wants, fk.Grace} {
			a.fsTypes[i] = p.Type(ctx, key)
		}
		a.fsHolders = p.HGetAll(ctx, fk.Holders)
		a.fsLeases = p.ZRangeWithScores(ctx, fk.Leases, 0, -1)
		a.fsPool = p.Get(ctx, fk.Permits)
		a.fsQueue = p.HGetAll(ctx, fk.Queue)
		a.fsWants = p.HGetAll(ctx, fk.Wants)
		a.fsGrace = p.Get(ctx, fk.Grace)
		a.fsGracePTTL = p.Do(ctx, "pttl", fk.Grace)
		a.semToken = p.Get(ctx, fk.Token)
		a.esPool = p.Get(ctx, ek.Pool)
		a.esType = p.Type(ctx, ek.Timeouts)
		a.esPermits = p.ZRangeWithScores(ctx, ek.Timeouts, 0, -1)
		for i, key := range []string{sk.Holds, sk.Leases, sk.Seat, sk.Req, sk.Queue, sk.Grace, sk.Token} {
			a.stTypes[i] = p.Type(ctx, key)
		}
		a.stHolds = p.HGetAll(ctx, sk.Holds)
		a.stLeases = p.ZRangeWithScores(ctx, sk.Leases, 0, -1)
		a.stSeat = p.HGetAll(ctx, sk.Seat)
		a.stReq = p.HGetAll(ctx, sk.Req)
		a.stQueue = p.HGetAll(ctx, sk.Queue)
		a.stGrace = p.HGetAll(ctx, sk.Grace)
		a.stToken = p.Get(ctx, sk.Token)
		return nil
	})
	if err := a.lock.err(err); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	for _, t := range append(append(a.fsTypes[:], a.stTypes[:]...), a.esType) {
		if t.Err() != nil {
			return nil, fmt.Errorf("read %s: %w", name, t.Err())
		}
	}
	f := &Found{Name: name, Kinds: []string{}, NowMs: lk.NowMs}
	if tm, err := a.lock.redisNow.Result(); err == nil {
		f.RedisTimeMs = tm.UnixMilli()
	}
	serverNow := f.RedisTimeMs
	if serverNow == 0 {
		serverNow = f.NowMs
	}

	nameType := a.lock.types[kLock].Val()
	_, isRW := a.lock.hash.Val()["mode"]
	isRW = isRW && nameType == "hash"
	lockKeys := (nameType != "none" && nameType != "string" && !isRW) ||
		a.lock.types[kQueue].Val() != "none" || a.lock.types[kTimeouts].Val() != "none" ||
		a.lock.types[kScalable].Val() != "none" || a.lock.grace.Err() == nil || a.lock.token.Err() == nil
	if lockKeys {
		a.lock.hashIsRW = isRW
		lk.decode(a.lock)
		lk.OK = ok(lk.Problems)
		f.Lock = lk
		f.Kinds = append(f.Kinds, KindLock)
	}
	if isRW {
		rw, err := readRW(ctx, rdb, name, a.lock.hash.Val(), a.lock.pttl)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		f.RW = rw
		f.Kinds = append(f.Kinds, KindRWLock)
	}
	fairKeys := false
	for _, t := range a.fsTypes {
		fairKeys = fairKeys || t.Val() != "none"
	}
	if fairKeys {
		f.FairSem = decodeFairSem(fk, a, serverNow)
		f.Kinds = append(f.Kinds, KindFairSemaphore)
	}
	if nameType == "string" || a.esType.Val() != "none" || (!fairKeys && a.semToken.Err() == nil) {
		f.ExpSem = decodeExpSem(ek, a, nameType == "string", serverNow)
		f.Kinds = append(f.Kinds, KindExpirableSemaphore)
	}
	seatKeys := false
	for _, t := range a.stTypes {
		seatKeys = seatKeys || t.Val() != "none"
	}
	if seatKeys {
		st := decodeSeats(sk, a, serverNow)
		st.markSeat(name)
		st.OK = ok(st.Problems)
		if name == sk.Venue || st.Seat != "" {
			f.Seats = st
			f.Kinds = append(f.Kinds, KindSeats)
		} else {
			f.OtherVenue = sk.Venue
		}
	}
	f.OK = true
	for _, o := range []bool{f.Lock == nil || f.Lock.OK, f.RW == nil || f.RW.OK, f.FairSem == nil || f.FairSem.OK,
		f.ExpSem == nil || f.ExpSem.OK, f.Seats == nil || f.Seats.OK} {
		f.OK = f.OK && o
	}
	return f, nil
}

// Found reports whether any kind of state was found.
func (f *Found) Found() bool { return len(f.Kinds) > 0 }

func addProblem(ps *[]Problem, sev, code, format string, args ...any) {
	*ps = append(*ps, Problem{Code: code, Severity: sev, Message: fmt.Sprintf(format, args...)})
}

// count reads a positive integer count, or reports raw.
func count(v string) (int64, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n > 0
}

// maxRWTimeouts bounds the read holds whose timeout keys are read.
const maxRWTimeouts = 1000

// readRW decodes a read-write lock's hash and reads each read hold's
// timeout key's PTTL.
func readRW(ctx context.Context, rdb redis.Cmdable, name string, hash map[string]string, pttl *redis.Cmd) (*RWState, error) {
	k := wire.KeysFor(name)
	rw := &RWState{Mode: hash["mode"], Holders: []RWHolder{}, Problems: []Problem{}}
	rw.Keys.Hash, rw.Keys.Timeout = name, wire.RWKeyPrefix(name)+":<reader>:rwlock_timeout:<k>"
	rw.LeaseMs, _ = pttl.Int64()
	fields := make([]string, 0, len(hash))
	for f := range hash {
		if f != "mode" {
			fields = append(fields, f)
		}
	}
	sort.Strings(fields)
	writers := 0
	type ask struct {
		holder int
		cmds   []*redis.DurationCmd
	}
	var asks []ask
	budget := maxRWTimeouts
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, f := range fields {
			h := RWHolder{Owner: f, Write: strings.HasSuffix(f, ":write")}
			n, good := count(hash[f])
			if good {
				h.HoldCount = n
			} else {
				h.Raw = hash[f]
				addProblem(&rw.Problems, Error, "bad-hold-count", "field %s has hold count %q (not a positive integer)", f, hash[f])
			}
			if h.Write {
				writers++
			} else if good {
				x := ask{holder: len(rw.Holders)}
				for i := int64(1); i <= n && budget > 0; i, budget = i+1, budget-1 {
					x.cmds = append(x.cmds, p.PTTL(ctx, k.RWTimeoutKey(f, i)))
				}
				asks = append(asks, x)
			}
			rw.Holders = append(rw.Holders, h)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, err
	}
	for _, x := range asks {
		h := &rw.Holders[x.holder]
		for i, c := range x.cmds {
			d := c.Val()
			left := int64(-2)
			if d >= 0 {
				left = d.Milliseconds()
			} else if d == -1 {
				left = -1
			}
			h.ReadLeasesMs = append(h.ReadLeasesMs, left)
			if left == -2 {
				addProblem(&rw.Problems, Warning, "read-hold-no-timeout",
					"%s's read hold %d has no timeout key (it expired or was deleted)", h.Owner, i+1)
			}
		}
	}
	switch {
	case rw.Mode != "read" && rw.Mode != "write":
		addProblem(&rw.Problems, Error, "bad-mode", "the mode field is %q, not read or write", rw.Mode)
	case len(fields) == 0:
		addProblem(&rw.Problems, Error, "no-holders", "the lock is in %s mode but nobody holds it", rw.Mode)
	case rw.Mode == "write" && writers == 0:
		addProblem(&rw.Problems, Error, "write-no-writer", "the lock is in write mode but has no writer field")
	case rw.Mode == "read" && writers > 0:
		addProblem(&rw.Problems, Error, "read-with-writer", "the lock is in read mode but has a writer field")
	}
	if writers > 1 {
		addProblem(&rw.Problems, Error, "many-writers", "%d writers hold the lock at once", writers)
	}
	if rw.LeaseMs == -1 {
		addProblem(&rw.Problems, Warning, "no-lease", "the lock has no expiry: only an unlock or a force-unlock frees it")
	}
	rw.OK = ok(rw.Problems)
	return rw, nil
}

// leases reads a zset of owner -> lease end.
func leases(zs []redis.Z) map[string]int64 {
	m := make(map[string]int64, len(zs))
	for _, z := range zs {
		m[z.Member.(string)] = int64(z.Score)
	}
	return m
}

// wrongTypes reports keys of another type than want.
func wrongTypes(ps *[]Problem, keys []string, types []*redis.StatusCmd, want []string) {
	for i, t := range types {
		if v := t.Val(); v != "none" && v != want[i] {
			addProblem(ps, Error, "wrong-type", "key %s is a %s, not a %s", keys[i], v, want[i])
		}
	}
}

// holdersOf reads a holders hash (owner -> count) and its leases zset.
func holdersOf(ps *[]Problem, hash map[string]string, zs []redis.Z, now int64, what string) (hs []SemHolder, live int64) {
	end := leases(zs)
	owners := make([]string, 0, len(hash))
	for o := range hash {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	hs = []SemHolder{}
	for _, o := range owners {
		h := SemHolder{Owner: o}
		if n, good := count(hash[o]); good {
			h.Count = n
		} else {
			h.Raw = hash[o]
			addProblem(ps, Error, "bad-count", "holder %s has %s %q (not a positive integer)", o, what, hash[o])
		}
		if e, has := end[o]; has {
			h.HasLease, h.LeaseEndMs, h.LeaseMs = true, e, e-now
			if h.LeaseMs <= 0 {
				addProblem(ps, Warning, "lease-ended",
					"holder %s's lease ended %v ago: the next script reclaims its %s", o, ms(-h.LeaseMs), what)
			} else {
				live += h.Count
			}
		} else {
			addProblem(ps, Error, "holder-no-lease", "holder %s has no lease", o)
		}
		hs = append(hs, h)
	}
	for _, z := range zs {
		if _, has := hash[z.Member.(string)]; !has {
			addProblem(ps, Error, "lease-no-holder", "%s has a lease but holds nothing", z.Member)
		}
	}
	return hs, live
}

// grace reads a fair lock-style grace key (owner, "+owner" for the second).
func graceOf(v *redis.StringCmd, pttl *redis.Cmd) *GraceState {
	owner, err := v.Result()
	if err != nil {
		return nil
	}
	left, _ := pttl.Int64()
	return &GraceState{Owner: strings.TrimPrefix(owner, "+"), Second: strings.HasPrefix(owner, "+"), LeftMs: left - GraceMarginMs}
}

func decodeFairSem(k wire.SemFairKeys, a *allSnap, now int64) *FairSemState {
	s := &FairSemState{Keys: k, Holders: []SemHolder{}, Queue: []SemWaiter{}, Problems: []Problem{}}
	wrongTypes(&s.Problems, []string{k.Holders, k.Leases, k.Permits, k.Queue, k.Wants, k.Grace}, a.fsTypes[:],
		[]string{"hash", "zset", "string", "hash", "hash", "string"})
	if v, err := a.fsPool.Result(); err == nil {
		s.PoolSet = true
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			s.Pool = n
		} else {
			s.PoolRaw = v
			addProblem(&s.Problems, Error, "bad-pool", "the pool is %q, not an integer >= 0", v)
		}
	}
	s.Holders, s.Held = holdersOf(&s.Problems, a.fsHolders.Val(), a.fsLeases.Val(), now, "permits")
	s.Available = s.Pool - s.Held
	if s.PoolSet && s.Available < 0 {
		addProblem(&s.Problems, Warning, "over-pool",
			"%d permits are held, more than the pool of %d (it was shrunk: nothing is granted until enough come back)", s.Held, s.Pool)
	}
	if !s.PoolSet && len(s.Holders) > 0 {
		addProblem(&s.Problems, Error, "held-no-pool", "permits are held but the pool is not set")
	}
	s.Grace = graceOf(a.fsGrace, a.fsGracePTTL)
	if n, err := a.semToken.Int64(); err == nil {
		s.Token, s.HasToken = n, true
	}
	// The queue: the scalable engine's list, deadlines on the server's
	// clock; the asks in the wants hash.
	q := &State{NowMs: now}
	if h := a.fsQueue.Val(); len(h) > 0 {
		q.scalableQueue(h)
	}
	wants := a.fsWants.Val()
	for _, w := range q.Queue {
		x := SemWaiter{Position: w.Position, Owner: w.Owner, DeadlineMs: w.DeadlineMs, LeftMs: w.LeftMs}
		if n, good := count(wants[w.Owner]); good {
			x.Asks = n
		} else {
			addProblem(&q.Problems, Error, "no-ask", "waiter %d, %s, has no ask (%q) in %s", w.Position, w.Owner, wants[w.Owner], k.Wants)
		}
		if s.PoolSet && x.Asks > s.Pool && w.Position == 1 {
			addProblem(&q.Problems, Warning, "head-too-big",
				"the head asks for %d permits, more than the pool of %d: the next script prunes it", x.Asks, s.Pool)
		}
		s.Queue = append(s.Queue, x)
	}
	for o := range wants {
		if !q.Queued(o) {
			addProblem(&q.Problems, Error, "ask-not-queued", "%s has an ask but is not queued", o)
		}
	}
	holders := make([]string, 0, len(s.Holders))
	for _, h := range s.Holders {
		holders = append(holders, h.Owner)
	}
	free := len(s.Queue) > 0 && s.Queue[0].Asks > 0 && s.Queue[0].Asks <= s.Available
	q.Problems = append(q.Problems, queueProblems(q.Queue, free, "the head's ask fits", holders)...)
	s.Problems = append(s.Problems, q.Problems...)
	s.OK = ok(s.Problems)
	return s
}

func decodeExpSem(k wire.SemKeys, a *allSnap, poolIsString bool, now int64) *ExpSemState {
	s := &ExpSemState{Keys: k, Permits: []ExpPermit{}, Problems: []Problem{}}
	if v := a.esType.Val(); v != "none" && v != "zset" {
		addProblem(&s.Problems, Error, "wrong-type", "key %s is a %s, not a zset", k.Timeouts, v)
	}
	if n, err := a.semToken.Int64(); err == nil {
		s.Token, s.HasToken = n, true
	}
	if poolIsString {
		s.PoolSet = true
		v := a.esPool.Val()
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			s.Available = n
		} else {
			s.PoolRaw = v
			addProblem(&s.Problems, Error, "bad-pool", "the pool %s is %q, not an integer", k.Pool, v)
		}
	}
	for _, z := range a.esPermits.Val() {
		id, _ := z.Member.(string)
		p := ExpPermit{ID: hex.EncodeToString([]byte(id)), ExpiryMs: int64(z.Score)}
		if p.ExpiryMs >= NoExpiry {
			p.NoExpiry = true
			s.Acquired++
		} else {
			p.LeaseMs = p.ExpiryMs - now
			if p.LeaseMs > 0 {
				s.Acquired++
			} else {
				s.Expired++
			}
		}
		s.Permits = append(s.Permits, p)
	}
	if s.Expired > 0 {
		addProblem(&s.Problems, Warning, "expired-permits",
			"%d permits expired but are still in %s: the next call on the semaphore gives them back", s.Expired, k.Timeouts)
	}
	s.TokenOnly = !s.PoolSet && len(s.Permits) == 0 && a.esType.Val() == "none"
	s.OK = ok(s.Problems)
	return s
}

// seatField splits a seat-queue field "<n|p>|<owner>|<seat>" (owners never
// contain '|').
func seatField(f string) (kind, owner, seat string, good bool) {
	parts := strings.SplitN(f, "|", 3)
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

func decodeSeats(k wire.SeatsKeys, a *allSnap, now int64) *SeatsState {
	s := &SeatsState{Keys: k, Venue: k.Venue, Holders: []SemHolder{}, Seats: []SeatState{}, Waiting: []SeatWaiter{},
		Problems: []Problem{}}
	wrongTypes(&s.Problems, []string{k.Holds, k.Leases, k.Seat, k.Req, k.Queue, k.Grace, k.Token}, a.stTypes[:],
		[]string{"hash", "zset", "hash", "hash", "hash", "hash", "string"})
	if n, err := a.stToken.Int64(); err == nil {
		s.Token, s.HasToken = n, true
	}
	reqs := map[string][]string{}
	for o, v := range a.stReq.Val() {
		var seats []string
		if err := json.Unmarshal([]byte(v), &seats); err != nil {
			addProblem(&s.Problems, Error, "bad-request", "%s's request %q is not a JSON array of seats", o, v)
		}
		reqs[o] = seats
	}
	holds := a.stHolds.Val()
	s.Holders, _ = holdersOf(&s.Problems, holds, a.stLeases.Val(), now, "seats")
	seatHolder := a.stSeat.Val()
	held := map[string][]string{}
	for seat, o := range seatHolder {
		held[o] = append(held[o], seat)
		if _, has := holds[o]; !has {
			addProblem(&s.Problems, Error, "seat-holder-unknown", "seat %s is held by %s, which holds nothing", seat, o)
		}
	}
	for i := range s.Holders {
		h := &s.Holders[i]
		h.Seats = reqs[h.Owner]
		if h.Seats == nil {
			h.Seats = held[h.Owner]
			sort.Strings(h.Seats)
		}
		if h.Count != int64(len(held[h.Owner])) {
			addProblem(&s.Problems, Error, "seat-count", "%s holds %d seats by its count but %d by the seats' holders",
				h.Owner, h.Count, len(held[h.Owner]))
		}
	}
	// The per-seat queues.
	q := a.stQueue.Val()
	seatSet := map[string]bool{}
	for seat := range seatHolder {
		seatSet[seat] = true
	}
	perSeat := map[string]int{} // n| fields per seat
	for f := range q {
		kind, _, seat, good := seatField(f)
		switch {
		case strings.HasPrefix(f, "h|"):
			seatSet[f[2:]] = true
		case good && kind == "n":
			perSeat[seat]++
		}
	}
	queued := map[string]map[string]bool{} // owner -> seats it is queued for
	for seat := range seatSet {
		st := SeatState{Seat: seat, Holder: seatHolder[seat], Queue: []string{}}
		prev := ""
		for o := q["h|"+seat]; o != ""; {
			if len(st.Queue) > perSeat[seat] {
				addProblem(&s.Problems, Error, "seat-queue-cycle", "seat %s's queue links form a cycle", seat)
				break
			}
			if p := q["p|"+o+"|"+seat]; p != prev {
				addProblem(&s.Problems, Error, "seat-queue-link", "%s's predecessor in seat %s's queue is %q, expected %q", o, seat, p, prev)
			}
			st.Queue = append(st.Queue, o)
			if queued[o] == nil {
				queued[o] = map[string]bool{}
			}
			queued[o][seat] = true
			next, has := q["n|"+o+"|"+seat]
			if !has {
				addProblem(&s.Problems, Error, "seat-queue-link", "%s has no successor link in seat %s's queue", o, seat)
				break
			}
			prev, o = o, next
		}
		if q["t|"+seat] != prev {
			addProblem(&s.Problems, Error, "seat-queue-link", "seat %s's queue ends at %q, but its tail is %q", seat, prev, q["t|"+seat])
		}
		if len(st.Queue) != perSeat[seat] {
			addProblem(&s.Problems, Error, "seat-queue-link", "%d owners are linked in seat %s's queue, %d reachable from its head",
				perSeat[seat], seat, len(st.Queue))
		}
		s.Seats = append(s.Seats, st)
	}
	sort.Slice(s.Seats, func(i, j int) bool { return s.Seats[i].Seat < s.Seats[j].Seat })
	// The waiting requests: queued owners, in the order they appear walking
	// the seats' queues (per seat, arrival order).
	graces := a.stGrace.Val()
	seen := map[string]bool{}
	for _, st := range s.Seats {
		for _, o := range st.Queue {
			if seen[o] {
				continue
			}
			seen[o] = true
			w := SeatWaiter{Owner: o, Seats: reqs[o]}
			if w.Seats == nil {
				addProblem(&s.Problems, Error, "no-request", "%s is queued but has no request in %s", o, k.Req)
			}
			for _, seat := range w.Seats {
				if !queued[o][seat] {
					addProblem(&s.Problems, Warning, "not-queued",
						"%s asks for seat %s but is not in its queue (its next call joins all its queues again)", o, seat)
				}
			}
			if v, has := graces[o]; has {
				end, err := strconv.ParseInt(strings.TrimPrefix(v, "+"), 10, 64)
				if err != nil {
					addProblem(&s.Problems, Error, "bad-grace", "%s's grace is %q", o, v)
				}
				w.Grace = &GraceState{Owner: o, Second: strings.HasPrefix(v, "+"), LeftMs: end - now}
			}
			s.Waiting = append(s.Waiting, w)
		}
	}
	for o := range graces {
		if !seen[o] {
			addProblem(&s.Problems, Warning, "grace-not-queued", "%s has a grace but is not queued", o)
		}
	}
	for o := range reqs {
		if _, has := holds[o]; !has && !seen[o] {
			addProblem(&s.Problems, Error, "request-orphan", "%s has a request but neither holds nor waits", o)
		}
	}
	sort.Slice(s.Problems, func(i, j int) bool { return s.Problems[i].Message < s.Problems[j].Message })
	return s
}

// markSeat sets s.Seat when name is one of the venue's seats.
func (s *SeatsState) markSeat(name string) {
	for _, st := range s.Seats {
		if st.Seat == name {
			s.Seat = name
		}
	}
	for _, h := range s.Holders {
		for _, seat := range h.Seats {
			if seat == name {
				s.Seat = name
			}
		}
	}
}

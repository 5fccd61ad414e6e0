package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The fair semaphore (not in Redisson; our own wire format): a pool of
// permits granted in queue order on the scalable queue engine, with the
// fair lock's rules (fair_common.lua) over its own resource (res_sem.lua).
// Each sem_fair_*.lua header states its KEYS, ARGV and replies; the
// wrappers below are the only Go code that knows their order.

// Script files of the fair semaphore.
const (
	FileSemFairAcquire        = "sem_fair_acquire.lua"
	FileSemFairRelease        = "sem_fair_release.lua"
	FileSemFairLeave          = "sem_fair_leave.lua"
	FileSemFairAbandon        = "sem_fair_abandon.lua"
	FileSemFairRenew          = "sem_fair_renew.lua"
	FileSemFairSetPermits     = "sem_fair_set_permits.lua"
	FileSemFairAddPermits     = "sem_fair_add_permits.lua"
	FileSemFairState          = "sem_fair_state.lua"
	FileSemFairQueued         = "sem_fair_queued.lua"
	fileResSem                = "res_sem.lua"
	semHolderPrefix           = "fairlock_sem"
	semLeasePrefix            = "fairlock_sem_lease"
	semPermitsPrefix          = "fairlock_sem_permits"
	semQueuePrefix            = "fairlock_sem_queue"
	semWantsPrefix            = "fairlock_sem_wants"
	semGracePrefix            = "fairlock_sem_grace"
	semFairChannelPrefix      = "fairlock_sem__channel"
	semFairAcquireLatchPrefix = "fairlock_sem_acquire_latch"
	semReleaseLatchPrefix     = "fairlock_sem_release_latch"
)

// SemFairFiles lists the fair semaphore's scripts, in a fixed order.
var SemFairFiles = []string{
	FileSemFairAcquire, FileSemFairRelease, FileSemFairLeave, FileSemFairAbandon,
	FileSemFairRenew, FileSemFairSetPermits, FileSemFairAddPermits, FileSemFairState, FileSemFairQueued,
}

// SemFairKeys are the Redis keys and channels of one fair semaphore, all with
// its hash tag (one cluster slot).
type SemFairKeys struct {
	Name    string // the semaphore's name
	Holders string // fairlock_sem:{name}: owner -> permits held
	Leases  string // fairlock_sem_lease:{name}: owner -> lease end, server clock, Unix ms
	Permits string // fairlock_sem_permits:{name}: the pool (absent: not set)
	Queue   string // fairlock_sem_queue:{name}: the scalable queue's hash
	Wants   string // fairlock_sem_wants:{name}: queued owner -> permits asked
	Grace   string // fairlock_sem_grace:{name}: the head grace
	Token   string // fairlock_sem_token:{name}: fencing token counter
	Channel string // fairlock_sem__channel:{name}; a waiter listens on Channel + ":" + owner
	alatch  string
	rlatch  string
}

// SemFairKeysFor returns the keys of the fair semaphore called name. It does
// not validate the name: call ValidateName first.
func SemFairKeysFor(name string) SemFairKeys {
	return SemFairKeys{
		Name:    name,
		Holders: prefixName(semHolderPrefix, name),
		Leases:  prefixName(semLeasePrefix, name),
		Permits: prefixName(semPermitsPrefix, name),
		Queue:   prefixName(semQueuePrefix, name),
		Wants:   prefixName(semWantsPrefix, name),
		Grace:   prefixName(semGracePrefix, name),
		Token:   prefixName(semTokenPrefix, name),
		Channel: prefixName(semFairChannelPrefix, name),
		alatch:  prefixName(semFairAcquireLatchPrefix, name),
		rlatch:  prefixName(semReleaseLatchPrefix, name),
	}
}

// AcquireLatch is the latch key of one acquisition request:
// "fairlock_sem_acquire_latch:{name}:<request-id>".
func (k SemFairKeys) AcquireLatch(requestID string) string { return k.alatch + ":" + requestID }

// ReleaseLatch is the latch key of one release call:
// "fairlock_sem_release_latch:{name}:<request-id>".
func (k SemFairKeys) ReleaseLatch(requestID string) string { return k.rlatch + ":" + requestID }

// WaiterChannel is the channel owner's wake-ups are published on.
func (k SemFairKeys) WaiterChannel(owner string) string { return k.Channel + ":" + owner }

// common are KEYS[1..8] of every script but the renewal.
func (k SemFairKeys) common(extra ...string) []string {
	return append([]string{k.Holders, k.Leases, k.Permits, k.Queue, k.Wants, k.Grace, k.Token, k.Channel}, extra...)
}

// SemFairSource returns the text of a fair-semaphore script as it is sent
// to Redis: the body with latch_common.lua, queue_scalable.lua,
// res_sem.lua and fair_common.lua in front of it (the renewal and the queued check, which use
// none of them, as it is).
func SemFairSource(file string) string { return semFairSource(file, compose) }

func semFairSource(file string, compose composer) string {
	body, err := readFile(file)
	if err != nil || !strings.HasPrefix(file, "sem_fair_") {
		panic("lua: no fair-semaphore script " + file)
	}
	if file == FileSemFairRenew || file == FileSemFairQueued {
		return string(body)
	}
	return compose(string(body), mustRead(fileLatchCommon), mustRead(fileFairToken), mustRead(fileQueueScalable), mustRead(fileResSem), mustRead(fileFairCommon))
}

// SemFairScripts is one loaded set of the fair semaphore's scripts.
// SemFairDefault is the real set; tests build broken sets with EditSemFair.
type SemFairScripts struct {
	set *Scripts // the sources, digests and go-redis scripts (exec.go's calls)
}

// SemFairDefault is the set every fair semaphore uses.
var SemFairDefault = sync.OnceValue(func() *SemFairScripts { return EditSemFair(nil) })

// EditSemFair builds a set whose sources are edit(file, source); nil
// leaves them as they are.
func EditSemFair(edit func(file, src string) string) *SemFairScripts {
	s := &SemFairScripts{set: newScripts(len(SemFairFiles))}
	for _, f := range SemFairFiles {
		src := editSource(f, edit, semFairSource)
		s.set.add(f, src)
	}
	return s
}

// Script returns the loaded script of file.
func (s *SemFairScripts) Script(file string) *redis.Script {
	sc, ok := s.set.byFile[file]
	if !ok {
		panic("lua: no fair-semaphore script " + file)
	}
	return sc
}

// call starts a call of file with KEYS[1..8] (common) and extra more keys
// and nargs arguments, sent as the locks' hot scripts are (exec.go: one
// prebuilt EVALSHA argument list, repeating values boxed once).
func (s *SemFairScripts) call(file string, k SemFairKeys, extra string, nargs int) cmdBuf {
	nkeys := 8
	if extra != "" {
		nkeys = 9
	}
	c := s.set.cmd(file, nkeys, nargs)
	c.key(k.Holders).key(k.Leases).key(k.Permits).key(k.Queue).key(k.Wants).key(k.Grace).key(k.Token).key(k.Channel)
	if extra != "" {
		c.str(extra)
	}
	return c
}

// SemArgs are the values a fair-semaphore script call may need. Durations
// are milliseconds; no client clock is sent (the scripts read the server's).
type SemArgs struct {
	Owner     string // "<client-uuid>:<thread-id>"
	Permits   int64  // acquire: permits asked, >= 1
	LeaseMs   int64  // acquire: lease, >= 1
	WaitMs    int64  // acquire, leave: the waiter's wait slot
	GraceMs   int64  // head grace (<= 0: off)
	Queue     bool   // acquire: join or stay in the queue when not granted
	AcquireID string // acquire, abandon: request id, reused on retry; "" for no latch (acquire only)
	ReleaseID string // release: request id, reused on retry; "" for no latch
	LatchMs   int64  // latch lifetime
	PubCmd    string // "publish" (default when empty) or "spublish"
	Position  bool   // acquire: reply the caller's queue position when not granted
}

func (a SemArgs) pubCmd() string { return pub(a.PubCmd) }

// Errors of the fair semaphore's scripts (besides ErrAbandoned and
// ErrGrantOver, shared with the locks). Each reports a call that changed
// nothing.
var (
	// ErrSemNotSet: the semaphore's pool was never set.
	ErrSemNotSet = errors.New("fairlock: semaphore permits not set")
	// ErrSemTooMany: the acquisition asked for more permits than the pool has.
	ErrSemTooMany = errors.New("fairlock: semaphore asked for more permits than the pool has")
	// ErrSemAlreadyHolds: the owner holds permits of this semaphore already.
	ErrSemAlreadyHolds = errors.New("fairlock: semaphore owner already holds permits")
	// ErrSemNegative: AddPermits would make the pool negative.
	ErrSemNegative = errors.New("fairlock: semaphore pool would be negative")
	// ErrSemWrongType: a key of the semaphore holds another type.
	ErrSemWrongType = errors.New("fairlock: semaphore key holds the wrong type")
)

func semErr(err error) error { return markErr(err, semMarkers) }

var semMarkers = []errMarker{
	{"semaphore permits not set", ErrSemNotSet},
	{"permits, the pool has", ErrSemTooMany},
	{"semaphore owner already holds permits", ErrSemAlreadyHolds},
	{"semaphore pool would be negative", ErrSemNegative},
	{"fairlock: semaphore key ", ErrSemWrongType},
	// A command of the scripts that met a key of another type (the
	// token key in token_check, a latch): Redis's own error.
	{"WRONGTYPE", ErrSemWrongType},
}

// SemAcquireResult is the outcome of an acquisition.
type SemAcquireResult struct {
	Granted bool  // the owner holds the permits it asked for
	Token   int64 // when granted: the grant's fencing token
	SleepMs int64 // when not: how long to sleep at most before trying again (-1: until woken or a watchdog period)
	// Ahead, when not granted and SemArgs.Position and Queue were set: the
	// caller's place (see sem_fair_acquire.lua); Ahead.Ahead -1 otherwise.
	Ahead Ahead
}

func (s *SemFairScripts) run(ctx context.Context, rdb redis.Scripter, file string, keys []string, args ...any) *redis.Cmd {
	return s.set.call(ctx, rdb, file, keys, args...)
}

// Acquire runs sem_fair_acquire.lua (reads Owner, Permits, LeaseMs,
// WaitMs, GraceMs, Queue, AcquireID, LatchMs, PubCmd).
func (s *SemFairScripts) Acquire(ctx context.Context, rdb redis.Scripter, k SemFairKeys, a SemArgs) (SemAcquireResult, error) {
	latchMs := int64(0)
	if a.AcquireID != "" {
		latchMs = max(a.LatchMs, 1)
	}
	q := 0
	if a.Queue {
		q = 1
	}
	c := s.call(FileSemFairAcquire, k, k.AcquireLatch(a.AcquireID), 9)
	c.num(a.LeaseMs).str(a.Owner).num(a.Permits).num(a.WaitMs).num(latchMs).num(a.GraceMs).key(a.pubCmd()).num(int64(q))
	if a.Position {
		c.key("1")
	}
	v, err := c.run(ctx, rdb).Int64Slice()
	if err != nil {
		return SemAcquireResult{}, semErr(err)
	}
	if len(v) == 4 && v[0] == 0 {
		return SemAcquireResult{SleepMs: v[1], Ahead: Ahead{Ahead: v[2], Joined: v[3] == 1}}, nil
	}
	if len(v) != 2 || (v[0] != 0 && v[0] != 1) {
		return SemAcquireResult{}, fmt.Errorf("lua: unexpected semaphore acquisition reply %v", v)
	}
	if v[0] == 1 {
		return SemAcquireResult{Granted: true, Token: v[1]}, nil
	}
	return SemAcquireResult{SleepMs: v[1], Ahead: Ahead{Ahead: -1}}, nil
}

// Release runs sem_fair_release.lua (reads Owner, ReleaseID, LatchMs,
// GraceMs, PubCmd), with the acquisition latches' prefix: a release hands
// the permits off to the heads that fit (issue 33). It reports whether the owner held permits and gave
// them back (a retry with the same ReleaseID reports the first answer).
func (s *SemFairScripts) Release(ctx context.Context, rdb redis.Scripter, k SemFairKeys, a SemArgs) (released bool, err error) {
	latchMs := int64(0)
	if a.ReleaseID != "" {
		latchMs = max(a.LatchMs, 1)
	}
	c := s.call(FileSemFairRelease, k, k.ReleaseLatch(a.ReleaseID), 5)
	c.str(a.Owner).num(latchMs).num(a.GraceMs).key(a.pubCmd()).str(k.alatch)
	n, err := c.run(ctx, rdb).Int64()
	return n == 1, semErr(err)
}

// Leave runs sem_fair_leave.lua (reads Owner, WaitMs, GraceMs, PubCmd):
// the owner leaves the queue. It reports whether it was queued.
func (s *SemFairScripts) Leave(ctx context.Context, rdb redis.Scripter, k SemFairKeys, a SemArgs) (wasQueued bool, err error) {
	n, err := s.run(ctx, rdb, FileSemFairLeave, k.common(), a.Owner, a.WaitMs, a.GraceMs, a.pubCmd()).Int64()
	return n == 1, semErr(err)
}

// Abandon runs sem_fair_abandon.lua (reads Owner, AcquireID, LatchMs,
// GraceMs, PubCmd): later copies of the request do nothing, and permits a
// copy was granted are given back. It reports whether a copy had been
// granted.
func (s *SemFairScripts) Abandon(ctx context.Context, rdb redis.Scripter, k SemFairKeys, a SemArgs) (granted bool, err error) {
	if a.AcquireID == "" {
		panic("wire: Abandon needs the request's AcquireID")
	}
	n, err := s.run(ctx, rdb, FileSemFairAbandon, k.common(k.AcquireLatch(a.AcquireID)),
		a.Owner, max(a.LatchMs, 1), a.GraceMs, a.pubCmd()).Int64()
	return n == 1, semErr(err)
}

// RenewEach runs sem_fair_renew.lua over semaphores (all in one cluster
// slot) with one owner each, setting each live grant's lease to end at the
// server's now + leaseMs (never earlier than it did), and reports each
// pair's status: RenewOK, RenewGone, RenewWrongType.
func (s *SemFairScripts) RenewEach(ctx context.Context, rdb redis.Scripter, sems []SemFairKeys, owners []string, leaseMs int64) ([]RenewStatus, error) {
	if len(sems) != len(owners) {
		panic("wire: RenewEach needs one owner per semaphore")
	}
	keys := make([]string, 0, 2*len(sems))
	args := make([]any, 0, len(owners)+1)
	args = append(args, leaseMs)
	for i, k := range sems {
		keys = append(keys, k.Holders, k.Leases)
		args = append(args, owners[i])
	}
	v, err := s.run(ctx, rdb, FileSemFairRenew, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != len(sems) {
		return nil, fmt.Errorf("lua: semaphore renew replied %d results for %d pairs", len(v), len(sems))
	}
	st := make([]RenewStatus, len(v))
	for i, r := range v {
		st[i] = RenewStatus(r)
	}
	return st, nil
}

// SetPermits runs sem_fair_set_permits.lua (reads GraceMs, PubCmd): the
// pool becomes permits (>= 0). It reports the pool before (wasSet false:
// there was none).
func (s *SemFairScripts) SetPermits(ctx context.Context, rdb redis.Scripter, k SemFairKeys, permits int64, a SemArgs) (old int64, wasSet bool, err error) {
	n, err := s.run(ctx, rdb, FileSemFairSetPermits, k.common(), permits, a.GraceMs, a.pubCmd()).Int64()
	if err != nil {
		return 0, false, semErr(err)
	}
	if n < 0 {
		return 0, false, nil
	}
	return n, true, nil
}

// AddPermits runs sem_fair_add_permits.lua (reads GraceMs, PubCmd): the
// pool grows by delta (shrinks when negative). It reports the new pool.
func (s *SemFairScripts) AddPermits(ctx context.Context, rdb redis.Scripter, k SemFairKeys, delta int64, a SemArgs) (pool int64, err error) {
	n, err := s.run(ctx, rdb, FileSemFairAddPermits, k.common(), delta, a.GraceMs, a.pubCmd()).Int64()
	return n, semErr(err)
}

// Queued runs sem_fair_queued.lua (reads Owner, AcquireID): whether the
// owner is queued behind the first two places and its request has no
// latch (issue 33: the cheap re-check after subscribing).
func (s *SemFairScripts) Queued(ctx context.Context, rdb redis.Scripter, k SemFairKeys, a SemArgs) (bool, error) {
	if a.AcquireID == "" {
		return false, nil
	}
	n, err := s.run(ctx, rdb, FileSemFairQueued, []string{k.Queue, k.AcquireLatch(a.AcquireID)}, a.Owner).Int64()
	return n == 1, err
}

// SemState is what sem_fair_state.lua reads.
type SemState struct {
	Pool      int64 // -1: not set
	Available int64 // pool less live holders' permits (may be negative; -1 when the pool is not set)
	Holders   int64 // owners whose lease has not ended
	Queued    int64 // waiters in the queue
}

// State runs sem_fair_state.lua (read-only).
func (s *SemFairScripts) State(ctx context.Context, rdb redis.Scripter, k SemFairKeys) (SemState, error) {
	v, err := s.run(ctx, rdb, FileSemFairState, k.common()).Int64Slice()
	if err != nil {
		return SemState{}, semErr(err)
	}
	if len(v) != 4 {
		return SemState{}, fmt.Errorf("lua: unexpected semaphore state reply %v", v)
	}
	return SemState{Pool: v[0], Available: v[1], Holders: v[2], Queued: v[3]}, nil
}

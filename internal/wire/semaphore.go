package wire

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The permit-expirable semaphore (Redisson's RPermitExpirableSemaphore):
// the pool (a string named after the semaphore: available permits), the
// timeouts set "{name}:timeout" (permit id -> expiry in Unix ms), and the
// channel "redisson_sc:{name}" carrying the pool's new count. Permit ids are
// 16 random bytes, stored raw; callers see them as 32 hex characters.

// Semaphore script files.
const (
	FileSemAcquire        = "sem_acquire.lua"
	FileSemAbandon        = "sem_abandon.lua"
	FileSemRelease        = "sem_release.lua"
	FileSemReleaseMany    = "sem_release_many.lua"
	FileSemTrySetPermits  = "sem_try_set_permits.lua"
	FileSemSetPermits     = "sem_set_permits.lua"
	FileSemAddPermits     = "sem_add_permits.lua"
	FileSemCounts         = "sem_counts.lua"
	FileSemUpdateLease    = "sem_update_lease.lua"
	FileSemLeaseTime      = "sem_lease_time.lua"
	FileSemReleaseHold    = "sem_release_hold.lua"
	FileSemRenew          = "sem_renew.lua"
	FileSemHeld           = "sem_held.lua"
	FileSemKept           = "sem_kept.lua"
	fileSemCommon         = "sem_common.lua"
	semChannelPrefix      = "redisson_sc"
	semTimeoutSuffix      = "timeout"
	semAcquireLatchPrefix = acquireLatchPrefix
	semTokenPrefix        = "fairlock_sem_token"
)

// SemFiles lists the semaphore's scripts; they are part of Files.
var SemFiles = []string{
	FileSemAcquire, FileSemAbandon, FileSemRelease, FileSemReleaseMany, FileSemTrySetPermits,
	FileSemSetPermits, FileSemAddPermits, FileSemCounts, FileSemUpdateLease, FileSemLeaseTime,
	FileSemReleaseHold, FileSemRenew, FileSemHeld, FileSemKept,
}

func init() { Files = append(Files, SemFiles...) }

// SemNever is the expiry score of a permit taken without a lease
// (Redisson's nonExpirableTimeout).
const SemNever int64 = 922337203685477

// ServerClock, sent as a script's "now", makes the script read the Redis
// server's clock (TIME) instead of the caller's.
const ServerClock int64 = -1

// NoLease, sent as a lease, takes a permit that never expires.
const NoLease int64 = -1

// suffixName is Redisson's suffixName: "name:suffix" when the name carries
// its own hash tag, else "{name}:suffix".
func suffixName(name, suffix string) string {
	if strings.IndexByte(name, '{') >= 0 {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

// SemKeys are the keys and channel of one permit-expirable semaphore, all
// in the slot of the name's hash tag (or of "{name}").
type SemKeys struct {
	Pool     string // the name: available permits
	Timeouts string // "{name}:timeout": permit id -> expiry
	Channel  string // "redisson_sc:{name}"
	// Token is ours, not Redisson's: "fairlock_sem_token:{name}", a counter
	// INCRed by every grant of sem_acquire.lua (the fencing tokens).
	Token  string
	latch  string // "fairlock_acquire_latch:{name}"
	ulatch string // "redisson_unlock_latch:{name}"
}

// SemKeysFor returns the keys of the semaphore called name. It does not
// validate the name: call ValidateName first.
func SemKeysFor(name string) SemKeys {
	return SemKeys{
		Pool:     name,
		Timeouts: suffixName(name, semTimeoutSuffix),
		Channel:  prefixName(semChannelPrefix, name),
		Token:    prefixName(semTokenPrefix, name),
		latch:    prefixName(semAcquireLatchPrefix, name),
		ulatch:   prefixName(latchPrefix, name),
	}
}

// Latch is the acquisition latch of the request whose first permit id is
// firstID (raw bytes): "fairlock_acquire_latch:{name}:<hex of the id>". A
// request with a request id uses RequestLatch instead.
func (k SemKeys) Latch(firstID string) string {
	return k.latch + ":" + hex.EncodeToString([]byte(firstID))
}

// RequestLatch is the acquisition latch of request id request:
// "fairlock_acquire_latch:{name}:<request>".
func (k SemKeys) RequestLatch(request string) string { return k.latch + ":" + request }

// UnlockLatch is the latch of one release of a hold (sem_release_hold.lua):
// "redisson_unlock_latch:{name}:<request>", the locks' unlock latch.
func (k SemKeys) UnlockLatch(request string) string { return k.ulatch + ":" + request }

// LatchPrefix is the prefix of every acquisition latch of the semaphore.
func (k SemKeys) LatchPrefix() string { return k.latch + ":" }

// pub is cmd, or "publish" when cmd is empty (the PubCmd default of every
// argument type).
func pub(cmd string) string {
	if cmd == "" {
		return Publish
	}
	return cmd
}

// SemAcquireArgs are one acquisition request: its permit ids (raw bytes,
// at least one), request id (names the latch; "": the first id's hex does),
// lease (NoLease or ms), now (ServerClock or Unix ms), latch lifetime (0:
// no latch) and publish command.
type SemAcquireArgs struct {
	IDs     []string
	Request string
	LeaseMs int64
	NowMs   int64
	LatchMs int64
	PubCmd  string
}

func (a SemAcquireArgs) latch(k SemKeys) string {
	if a.Request != "" {
		return k.RequestLatch(a.Request)
	}
	return k.Latch(a.IDs[0])
}

// SemAcquire runs sem_acquire.lua. It reports whether the permits are
// held, and then n is the grant's fencing token; otherwise n is how long
// until the earliest permit expires (ms, -1: none can). Errors:
// ErrAbandoned, ErrGrantOver (copies of a request).
func (s *Scripts) SemAcquire(ctx context.Context, rdb redis.Scripter, k SemKeys, a SemAcquireArgs) (acquired bool, n int64, err error) {
	acquired, n, _, err = s.SemAcquireKept(ctx, rdb, k, a)
	return acquired, n, err
}

// SemAcquireKept is SemAcquire that also reports, for a grant, how long
// Redis keeps its permits regardless of their lease (the timeouts set's
// TTL, inherited from the pool; ms, -1: no bound).
func (s *Scripts) SemAcquireKept(ctx context.Context, rdb redis.Scripter, k SemKeys, a SemAcquireArgs) (acquired bool, n, keptMs int64, err error) {
	if len(a.IDs) == 0 {
		return false, 0, -1, fmt.Errorf("lua: SemAcquire needs at least one id")
	}
	args := make([]any, 0, 6+len(a.IDs))
	args = append(args, len(a.IDs), a.LeaseMs, a.NowMs, SemNever, pub(a.PubCmd))
	for _, id := range a.IDs {
		args = append(args, id)
	}
	args = append(args, a.LatchMs)
	v, err := s.call(ctx, rdb, FileSemAcquire,
		[]string{k.Pool, k.Timeouts, k.Channel, a.latch(k), k.Token}, args...).Int64Slice()
	if err != nil {
		return false, 0, -1, acquireErr(err)
	}
	switch {
	case len(v) == 3 && v[0] == 1:
		return true, v[1], v[2], nil
	case len(v) == 2 && v[0] != 1:
		return false, v[1], -1, nil
	}
	return false, 0, -1, fmt.Errorf("lua: sem acquire replied %v", v)
}

// SemKept runs sem_kept.lua (read-only): how long Redis still keeps the
// permits ids (raw; one acquisition's): ms until the first of them ends
// (its expiry, or the timeouts set's TTL), 0 when one is not held, -1 when
// none expires.
func (s *Scripts) SemKept(ctx context.Context, rdb redis.Scripter, k SemKeys, ids []string) (int64, error) {
	args := make([]any, 0, 1+len(ids))
	args = append(args, SemNever)
	for _, id := range ids {
		args = append(args, id)
	}
	return s.call(ctx, rdb, FileSemKept, []string{k.Timeouts}, args...).Int64()
}

// SemAbandon runs sem_abandon.lua: request a (its ids and latch) is given
// up; it reports how many of its permits came back to the pool.
func (s *Scripts) SemAbandon(ctx context.Context, rdb redis.Scripter, k SemKeys, a SemAcquireArgs) (int64, error) {
	if len(a.IDs) == 0 {
		return 0, nil
	}
	args := make([]any, 0, 2+len(a.IDs))
	args = append(args, max(a.LatchMs, 1), pub(a.PubCmd))
	for _, id := range a.IDs {
		args = append(args, id)
	}
	return s.call(ctx, rdb, FileSemAbandon, []string{k.Pool, k.Timeouts, k.Channel, a.latch(k)}, args...).Int64()
}

// SemReleaseHold runs sem_release_hold.lua: the permits ids (one
// acquisition's) go back to the pool; it reports whether all of them were
// held. request names the unlock latch (a retry with it returns the first
// reply).
func (s *Scripts) SemReleaseHold(ctx context.Context, rdb redis.Scripter, k SemKeys, ids []string, request string, latchMs, nowMs int64, pubCmd string) (bool, error) {
	args := make([]any, 0, 3+len(ids))
	args = append(args, nowMs, pub(pubCmd), max(latchMs, 1))
	for _, id := range ids {
		args = append(args, id)
	}
	n, err := s.call(ctx, rdb, FileSemReleaseHold, []string{k.Pool, k.Timeouts, k.Channel, k.UnlockLatch(request)}, args...).Int64()
	return n == 1, err
}

// SemOwner is the owner id of a hold of permits ids (raw bytes): their hex,
// joined with ','. sem_renew.lua and sem_held.lua find the permits from it.
func SemOwner(ids []string) string {
	h := make([]string, len(ids))
	for i, id := range ids {
		h[i] = hex.EncodeToString([]byte(id))
	}
	return strings.Join(h, ",")
}

// SemRenewEach runs sem_renew.lua over holds (names[i], owners[i]; owners
// as SemOwner makes them; all names in one slot): every permit of a hold
// still held expires leaseMs from the server's now.
func (s *Scripts) SemRenewEach(ctx context.Context, rdb redis.Scripter, names, owners []string, leaseMs int64) ([]RenewStatus, error) {
	if len(names) != len(owners) {
		panic("lua: SemRenewEach needs one owner per name")
	}
	keys := make([]string, len(names))
	args := make([]any, 0, len(owners)+1)
	args = append(args, leaseMs)
	for i, name := range names {
		keys[i] = SemKeysFor(name).Timeouts
		args = append(args, owners[i])
	}
	v, err := s.call(ctx, rdb, FileSemRenew, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != len(names) {
		return nil, fmt.Errorf("lua: sem renew replied %d results for %d holds", len(v), len(names))
	}
	st := make([]RenewStatus, len(v))
	for i, r := range v {
		st[i] = RenewStatus(r)
	}
	return st, nil
}

// SemHeld is sem_held.lua's script, keys and args for the hold owner (as
// SemOwner makes it) of semaphore k: the replica acknowledgement's check.
func (s *Scripts) SemHeld(k SemKeys, owner string) (*redis.Script, []string, []any) {
	return s.Script(FileSemHeld), []string{k.Timeouts, k.Token}, []any{owner}
}

// SemRelease runs sem_release.lua: it reports whether the permit was held
// and had not expired (a held expired permit goes back to the pool too).
func (s *Scripts) SemRelease(ctx context.Context, rdb redis.Scripter, k SemKeys, id string, nowMs int64, pubCmd string) (bool, error) {
	n, err := s.call(ctx, rdb, FileSemRelease, []string{k.Pool, k.Channel, k.Timeouts}, id, 1, nowMs, pub(pubCmd)).Int64()
	return n == 1, err
}

// SemReleaseMany runs sem_release_many.lua: all the ids or none; it reports
// how many permits went back (0: one id was not held or had expired).
func (s *Scripts) SemReleaseMany(ctx context.Context, rdb redis.Scripter, k SemKeys, ids []string, nowMs int64, pubCmd string) (int64, error) {
	args := make([]any, 0, 3+len(ids))
	args = append(args, len(ids), nowMs, pub(pubCmd))
	for _, id := range ids {
		args = append(args, id)
	}
	return s.call(ctx, rdb, FileSemReleaseMany, []string{k.Pool, k.Channel, k.Timeouts}, args...).Int64()
}

// SemTrySetPermits runs sem_try_set_permits.lua: true when the pool was
// absent and now holds n.
func (s *Scripts) SemTrySetPermits(ctx context.Context, rdb redis.Scripter, k SemKeys, n int64, pubCmd string) (bool, error) {
	r, err := s.call(ctx, rdb, FileSemTrySetPermits, []string{k.Pool, k.Channel}, n, pub(pubCmd)).Int64()
	return r == 1, err
}

// nilReply reads a script reply that is nil on success.
func nilReply(cmd *redis.Cmd) error {
	if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}

// SemSetPermits runs sem_set_permits.lua: the total becomes n.
func (s *Scripts) SemSetPermits(ctx context.Context, rdb redis.Scripter, k SemKeys, n int64, pubCmd string) error {
	return nilReply(s.call(ctx, rdb, FileSemSetPermits, []string{k.Pool, k.Channel, k.Timeouts}, n, pub(pubCmd)))
}

// SemAddPermits runs sem_add_permits.lua: the pool moves by n.
func (s *Scripts) SemAddPermits(ctx context.Context, rdb redis.Scripter, k SemKeys, n int64, pubCmd string) error {
	return nilReply(s.call(ctx, rdb, FileSemAddPermits, []string{k.Pool, k.Channel}, n, pub(pubCmd)))
}

// SemCounts are a semaphore's counts (sem_counts.lua).
type SemCounts struct {
	Available int64 // the pool (0 when absent)
	Acquired  int64 // permits held
	Exists    bool  // the pool exists
}

// Permits is Redisson's getPermits: available + acquired, 0 without a pool.
func (c SemCounts) Permits() int64 {
	if !c.Exists {
		return 0
	}
	return c.Available + c.Acquired
}

// SemCounts runs sem_counts.lua (after reclaiming every expired permit).
func (s *Scripts) SemCounts(ctx context.Context, rdb redis.Scripter, k SemKeys, nowMs int64, pubCmd string) (SemCounts, error) {
	v, err := s.call(ctx, rdb, FileSemCounts, []string{k.Pool, k.Timeouts, k.Channel}, nowMs, pub(pubCmd)).Int64Slice()
	if err != nil {
		return SemCounts{}, err
	}
	if len(v) != 3 {
		return SemCounts{}, fmt.Errorf("lua: sem counts replied %v", v)
	}
	return SemCounts{Available: v[0], Acquired: v[1], Exists: v[2] == 1}, nil
}

// SemUpdateLease runs sem_update_lease.lua: true when the permit is held
// and now expires leaseMs from now (NoLease: never).
func (s *Scripts) SemUpdateLease(ctx context.Context, rdb redis.Scripter, k SemKeys, id string, leaseMs, nowMs int64, pubCmd string) (bool, error) {
	n, err := s.call(ctx, rdb, FileSemUpdateLease, []string{k.Pool, k.Timeouts, k.Channel}, id, leaseMs, nowMs, SemNever, pub(pubCmd)).Int64()
	return n == 1, err
}

// SemLeaseTime runs sem_lease_time.lua: -1 for a permit with no lease, its
// remaining ms, or 0 when it is not held.
func (s *Scripts) SemLeaseTime(ctx context.Context, rdb redis.Scripter, k SemKeys, id string, nowMs int64, pubCmd string) (int64, error) {
	return s.call(ctx, rdb, FileSemLeaseTime, []string{k.Pool, k.Timeouts, k.Channel}, id, SemNever, nowMs, pub(pubCmd)).Int64()
}

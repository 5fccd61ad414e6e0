package wire

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The read-write lock (Redisson's RedissonReadWriteLock): one hash per lock,
// "mode" -> "read"/"write", reader "<uuid>:<tid>" -> read holds, writer
// "<uuid>:<tid>:write" -> write holds; one timeout key per read hold; one
// channel shared by both halves.

// Read-write lock script files.
const (
	FileRWReadAcquire  = "rw_read_acquire.lua"
	FileRWReadUnlock   = "rw_read_unlock.lua"
	FileRWWriteAcquire = "rw_write_acquire.lua"
	FileRWWriteUnlock  = "rw_write_unlock.lua"
	FileRWForceUnlock  = "rw_force_unlock.lua"
	FileRWRenew        = "rw_renew.lua"
)

const rwChannelPrefix = "redisson_rwlock"

// RWChannel is the read-write lock's channel, "redisson_rwlock:{name}".
func (k Keys) RWChannel() string { return prefixName(rwChannelPrefix, k.Name) }

// RWKeyPrefix is the prefix of every read-hold timeout key of the lock:
// "{name}", or the name itself when it carries its own hash tag (Redisson's
// suffixName rule).
func RWKeyPrefix(name string) string {
	if strings.IndexByte(name, '{') >= 0 {
		return name
	}
	return "{" + name + "}"
}

// RWTimeoutPrefix is reader's timeout prefix: its hold k has the key
// RWTimeoutPrefix + ":" + k.
func (k Keys) RWTimeoutPrefix(reader string) string {
	return RWKeyPrefix(k.Name) + ":" + reader + ":rwlock_timeout"
}

// RWTimeoutKey is the timeout key of reader's read hold number n (from 1).
func (k Keys) RWTimeoutKey(reader string, n int64) string {
	return fmt.Sprintf("%s:%d", k.RWTimeoutPrefix(reader), n)
}

// WriterOwner is the write lock's owner id of reader: "<uuid>:<tid>:write".
func WriterOwner(reader string) string { return reader + ":write" }

// ReadAcquire runs rw_read_acquire.lua (reads Owner, the reader id, and
// LeaseMs, AcquireID, LatchMs).
func (s *Scripts) ReadAcquire(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, ttlMs int64, err error) {
	acquired, ttlMs, err = nilOrInt(s.call(ctx, rdb, FileRWReadAcquire,
		[]string{k.Name, k.RWTimeoutPrefix(a.Owner), a.acquireLatch(k)},
		a.LeaseMs, a.Owner, WriterOwner(a.Owner), a.acquireLatchMs()))
	return acquired, ttlMs, acquireErr(err)
}

// ReadUnlock runs rw_read_unlock.lua (reads Owner, the reader id, and
// RequestID, LatchMs, PubCmd).
func (s *Scripts) ReadUnlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (UnlockResult, error) {
	return unlockResult(s.call(ctx, rdb, FileRWReadUnlock,
		[]string{k.Name, k.RWChannel(), k.RWTimeoutPrefix(a.Owner), RWKeyPrefix(k.Name), k.Latch(a.RequestID)},
		UnlockMessage, a.Owner, a.pubCmd(), a.LatchMs))
}

// WriteAcquire runs rw_write_acquire.lua (reads Owner, the writer id
// "<uuid>:<tid>:write", and LeaseMs, AcquireID, LatchMs).
func (s *Scripts) WriteAcquire(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, ttlMs int64, err error) {
	acquired, ttlMs, err = nilOrInt(s.call(ctx, rdb, FileRWWriteAcquire,
		[]string{k.Name, a.acquireLatch(k)}, a.LeaseMs, a.Owner, a.acquireLatchMs()))
	return acquired, ttlMs, acquireErr(err)
}

// WriteUnlock runs rw_write_unlock.lua (reads Owner, the writer id, and
// LeaseMs, RequestID, LatchMs, PubCmd).
func (s *Scripts) WriteUnlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (UnlockResult, error) {
	return unlockResult(s.call(ctx, rdb, FileRWWriteUnlock,
		[]string{k.Name, k.RWChannel(), k.Latch(a.RequestID), RWKeyPrefix(k.Name)},
		ReadUnlockMessage, a.LeaseMs, a.Owner, a.pubCmd(), a.LatchMs))
}

// RWForceUnlock runs rw_force_unlock.lua (reads PubCmd): the read half
// (write false) deletes a lock in read mode and publishes "0", the write
// half a lock in write mode and publishes "1". It reports whether a lock
// was deleted.
func (s *Scripts) RWForceUnlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args, write bool) (bool, error) {
	msg, mode := UnlockMessage, "read"
	if write {
		msg, mode = ReadUnlockMessage, "write"
	}
	_, n, err := nilOrInt(s.call(ctx, rdb, FileRWForceUnlock, []string{k.Name, k.RWChannel()}, msg, a.pubCmd(), mode))
	return n == 1, err
}

// RWRenewEach runs rw_renew.lua over read-write lock names with their
// owners (readers or writers; all names in one cluster slot), and reports
// each hold's status.
func (s *Scripts) RWRenewEach(ctx context.Context, rdb redis.Scripter, names, owners []string, leaseMs int64) ([]RenewStatus, error) {
	if len(names) != len(owners) {
		panic("lua: RWRenewEach needs one owner per name")
	}
	keys := make([]string, 0, 2*len(names))
	args := make([]any, 0, 2*len(owners)+1)
	args = append(args, leaseMs)
	for i, n := range names {
		keys = append(keys, n, RWKeyPrefix(n))
		args = append(args, 1, owners[i])
	}
	v, err := s.call(ctx, rdb, FileRWRenew, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != len(names) {
		return nil, fmt.Errorf("lua: rw renew replied %d results for %d holds", len(v), len(names))
	}
	st := make([]RenewStatus, len(v))
	for i, r := range v {
		st[i] = RenewStatus(r)
	}
	return st, nil
}

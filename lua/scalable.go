package lua

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The scalable fair-lock engine: the same semantics as the fair_*.lua
// scripts (replies, grant order, pruning, deadlines), kept in a doubly linked
// list in one hash with relative deadlines, so that every script runs O(1)
// commands whatever the queue's length (see scalable_common.lua). Its queue
// key differs from Redisson's, so one lock name is served by one engine; its
// scripts refuse a lock whose Redisson-compatible queue keys exist.

// Script file names of the scalable engine.
const (
	FileScalableTryLock       = "scalable_try_lock.lua"
	FileScalableTryLockWait   = "scalable_try_lock_wait.lua"
	FileScalableAcquireFailed = "scalable_acquire_failed.lua"
	FileScalableUnlock        = "scalable_unlock.lua"
	FileScalableForceUnlock   = "scalable_force_unlock.lua"
	fileScalableCommon        = "scalable_common.lua"
)

// ScalableFiles lists the scalable engine's scripts, in a fixed order.
var ScalableFiles = []string{
	FileScalableTryLock, FileScalableTryLockWait, FileScalableAcquireFailed,
	FileScalableUnlock, FileScalableForceUnlock,
}

const squeuePrefix = "fairlock_squeue"

// ErrMixedEngines reports a fair lock whose name is already used by the
// other fair-lock engine: the scalable engine found Redisson's queue keys.
// The script changed nothing.
var ErrMixedEngines = errors.New("fairlock: lock is used by the other fair-lock engine")

// mixedMarkers are in the error replies of refuse_mixed
// (scalable_common.lua) and refuse_scalable (fair_common.lua).
var mixedMarkers = []string{"is used by the Redisson-compatible fair engine", "is used by the scalable fair engine"}

// ScalableQueue is the scalable engine's queue key of the lock k:
// "fairlock_squeue:{name}", in the lock's hash slot (the same braces rule as
// Redisson's keys).
func (k Keys) ScalableQueue() string {
	if k.squeue == "" {
		return prefixName(squeuePrefix, k.Name)
	}
	return k.squeue
}

// ScalableSource returns the text of a scalable script as it is sent to
// Redis: the file with scalable_common.lua in front of it.
func ScalableSource(file string) string {
	body, err := files.ReadFile(file)
	if err != nil || !strings.HasPrefix(file, "scalable_") {
		panic("lua: no scalable script " + file)
	}
	return mustRead(fileLatchCommon) + mustRead(fileScalableCommon) + string(body)
}

// ScalableScripts is one loaded set of the scalable engine's scripts.
// ScalableDefault is the real set; tests build broken sets with EditScalable.
type ScalableScripts struct {
	byFile map[string]*redis.Script
}

// ScalableDefault is the set every scalable fair lock uses.
var ScalableDefault = EditScalable(nil)

// EditScalable builds a set of the scalable scripts whose source is
// edit(file, source); nil leaves them as they are.
func EditScalable(edit func(file, src string) string) *ScalableScripts {
	s := &ScalableScripts{byFile: make(map[string]*redis.Script, len(ScalableFiles))}
	for _, f := range ScalableFiles {
		src := ScalableSource(f)
		if edit != nil {
			src = edit(f, src)
		}
		s.byFile[f] = redis.NewScript(src)
	}
	return s
}

// Script returns the loaded script of file.
func (s *ScalableScripts) Script(file string) *redis.Script {
	sc, ok := s.byFile[file]
	if !ok {
		panic("lua: no scalable script " + file)
	}
	return sc
}

// mixed turns the scripts' refusal into ErrMixedEngines.
func mixed(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range mixedMarkers {
		if strings.Contains(err.Error(), m) {
			return errors.Join(ErrMixedEngines, err)
		}
	}
	return err
}

// TryLock runs scalable_try_lock.lua (reads Owner, LeaseMs, NowMs, WaitMs),
// as FairTryLock. It never queues.
func (s *ScalableScripts) TryLock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, err error) {
	acquired, _, err = nilOrInt(s.Script(FileScalableTryLock).Run(ctx, rdb,
		[]string{k.Name, k.ScalableQueue(), k.Queue, k.Timeouts, a.acquireLatch(k)}, a.LeaseMs, a.Owner, a.NowMs, a.WaitMs, a.acquireLatchMs()))
	return acquired, acquireErr(err)
}

// TryLockWait runs scalable_try_lock_wait.lua (reads Owner, LeaseMs, WaitMs,
// NowMs, GraceMs), as FairTryLockWait.
func (s *ScalableScripts) TryLockWait(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (acquired bool, ttlMs int64, err error) {
	acquired, ttlMs, err = nilOrInt(s.Script(FileScalableTryLockWait).Run(ctx, rdb,
		[]string{k.Name, k.ScalableQueue(), k.Queue, k.Timeouts, a.acquireLatch(k)}, a.LeaseMs, a.Owner, a.WaitMs, a.NowMs, a.GraceMs, a.acquireLatchMs()))
	return acquired, ttlMs, acquireErr(err)
}

// AcquireFailed runs scalable_acquire_failed.lua (reads Owner, WaitMs,
// PubCmd), as FairAcquireFailed.
func (s *ScalableScripts) AcquireFailed(ctx context.Context, rdb redis.Scripter, k Keys, a Args) error {
	err := s.Script(FileScalableAcquireFailed).Run(ctx, rdb,
		[]string{k.ScalableQueue(), k.Name, k.Channel, k.Queue, k.Timeouts}, a.Owner, a.WaitMs, a.pubCmd(), UnlockMessage).Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return mixed(err)
}

// Unlock runs scalable_unlock.lua (reads Owner, LeaseMs, NowMs, RequestID,
// LatchMs, GraceMs, PubCmd), as FairUnlock.
func (s *ScalableScripts) Unlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (UnlockResult, error) {
	r, err := unlockResult(s.Script(FileScalableUnlock).Run(ctx, rdb,
		[]string{k.Name, k.ScalableQueue(), k.Channel, k.Latch(a.RequestID), k.Queue, k.Timeouts},
		UnlockMessage, a.LeaseMs, a.Owner, a.NowMs, a.pubCmd(), a.LatchMs, a.GraceMs))
	return r, mixed(err)
}

// ForceUnlock runs scalable_force_unlock.lua (reads NowMs, GraceMs,
// PubCmd), as FairForceUnlock.
func (s *ScalableScripts) ForceUnlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (bool, error) {
	_, n, err := nilOrInt(s.Script(FileScalableForceUnlock).Run(ctx, rdb,
		[]string{k.Name, k.ScalableQueue(), k.Channel, k.Queue, k.Timeouts}, UnlockMessage, a.NowMs, a.pubCmd(), a.GraceMs))
	return n == 1, mixed(err)
}

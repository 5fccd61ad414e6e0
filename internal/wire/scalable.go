package wire

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The scalable fair-lock engine runs the same script bodies as the
// Redisson-compatible one (fair_*.lua, with fair_common.lua's rules), with
// the same KEYS, ARGV, replies and messages, over other queue operations
// (queue_scalable.lua): a doubly linked list with relative deadlines in one
// hash, so that every script runs O(1) commands whatever the queue's length.
// Its queue key differs from Redisson's, so one lock name is served by one
// engine: the acquisition scripts of each engine refuse a lock whose queue
// the other keeps. Releasing and giving up are never refused.

// The scalable engine's scripts are the fair-lock bodies; these names are
// theirs, for callers that name a script per engine.
const (
	FileScalableTryLock       = FileFairTryLock
	FileScalableTryLockWait   = FileFairTryLockWait
	FileScalableAcquireFailed = FileFairAcquireFailed
	FileScalableUnlock        = FileFairUnlock
	FileScalableForceUnlock   = FileFairForceUnlock
)

// ScalableFiles lists the scalable engine's scripts: the fair-lock bodies.
var ScalableFiles = []string{
	FileScalableTryLock, FileScalableTryLockWait, FileScalableAcquireFailed, FileScalableUnlock, FileScalableForceUnlock,
}

const (
	squeuePrefix      = "fairlock_squeue"
	fileQueueScalable = "queue_scalable.lua"
)

// ErrMixedEngines reports a fair lock whose name is already used by the
// other fair-lock engine: an acquisition found the other engine's queue. The
// script changed nothing.
var ErrMixedEngines = errors.New("fairlock: lock is used by the other fair-lock engine")

// mixedMarkers are in the error replies of q_refuse (queue_scalable.lua and
// queue_redisson.lua).
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

// ScalableSource returns the text of a scalable-engine script as it is sent
// to Redis: the fair-lock body with latch_common.lua, queue_scalable.lua,
// res_lock.lua and fair_common.lua in front of it.
func ScalableSource(file string) string { return scalableSource(file, compose) }

func scalableSource(file string, compose composer) string {
	body, err := readFile(file)
	if err != nil || !strings.HasPrefix(file, "fair_") {
		panic("lua: no fair-lock script " + file)
	}
	return compose(string(body), mustRead(fileLatchCommon), mustRead(fileFairToken), fastPath(file), mustRead(fileQueueScalable), mustRead(fileResLock), mustRead(fileFairCommon))
}

// ScalableScripts is one loaded set of the scalable engine's scripts.
// ScalableDefault is the real set; tests build broken sets with EditScalable.
type ScalableScripts struct {
	byFile map[string]*redis.Script
	set    *Scripts
}

// ScalableDefault is the set every scalable fair lock uses.
var ScalableDefault = sync.OnceValue(func() *ScalableScripts { return EditScalable(nil) })

// EditScalable builds a set of the scalable scripts whose source is
// edit(file, source); nil leaves them as they are.
func EditScalable(edit func(file, src string) string) *ScalableScripts {
	set := newScripts(len(ScalableFiles))
	for _, f := range ScalableFiles {
		src := editSource(f, edit, scalableSource)
		set.add(f, src)
	}
	return &ScalableScripts{byFile: set.byFile, set: set}
}

// Script returns the loaded script of file.
func (s *ScalableScripts) Script(file string) *redis.Script {
	sc, ok := s.byFile[file]
	if !ok {
		panic("lua: no scalable script " + file)
	}
	return sc
}

// Fair returns the scalable engine's scripts as a FairSet.
func (s *ScalableScripts) Fair() FairSet { return FairSet{set: s.set} }

// mixed turns the scripts' refusal into ErrMixedEngines.
func mixed(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range mixedMarkers {
		if strings.Contains(err.Error(), m) {
			return marked(ErrMixedEngines, err)
		}
	}
	return err
}

// TryLock is s.Fair().TryLock.
func (s *ScalableScripts) TryLock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (bool, error) {
	return s.Fair().TryLock(ctx, rdb, k, a)
}

// TryLockWait is s.Fair().TryLockWait.
func (s *ScalableScripts) TryLockWait(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (bool, int64, error) {
	return s.Fair().TryLockWait(ctx, rdb, k, a)
}

// AcquireFailed is s.Fair().AcquireFailed.
func (s *ScalableScripts) AcquireFailed(ctx context.Context, rdb redis.Scripter, k Keys, a Args) error {
	return s.Fair().AcquireFailed(ctx, rdb, k, a)
}

// Unlock is s.Fair().Unlock.
func (s *ScalableScripts) Unlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (UnlockResult, error) {
	return s.Fair().Unlock(ctx, rdb, k, a)
}

// ForceUnlock is s.Fair().ForceUnlock.
func (s *ScalableScripts) ForceUnlock(ctx context.Context, rdb redis.Scripter, k Keys, a Args) (bool, error) {
	return s.Fair().ForceUnlock(ctx, rdb, k, a)
}

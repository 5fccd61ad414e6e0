// Package wire is the Go side of the wire contract in package lua: the key
// and channel names, and typed wrappers that are the only Go code that knows
// each script's KEYS and ARGV order. The script sources are package lua's
// files (lua.FS), which it hands over with Load when it is linked in.
package wire

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// files are the script sources (Load).
var files fs.FS

// Load hands over the script sources; package lua calls it when it is
// linked in. A second call is ignored.
func Load(fsys fs.FS) {
	if files == nil {
		files = fsys
	}
}

func readFile(name string) ([]byte, error) {
	if files == nil {
		panic("wire: no script sources: import github.com/fairlock-go/fairlock/lua")
	}
	return fs.ReadFile(files, name)
}

// Message values published on lock channels, as Redisson's LockPubSub.
const (
	// UnlockMessage wakes one waiter.
	UnlockMessage = "0"
	// ReadUnlockMessage wakes every waiter (used by Redisson's write lock).
	ReadUnlockMessage = "1"
)

// Publish commands a script can be told to use.
const (
	Publish  = "publish"
	SPublish = "spublish" // sharded pub/sub, Redis 7+ cluster
)

// Key prefixes, as in Redisson.
const (
	channelPrefix = "redisson_lock__channel"
	queuePrefix   = "redisson_lock_queue"
	timeoutPrefix = "redisson_lock_timeout"
	latchPrefix   = "redisson_unlock_latch"
	// Not in Redisson: the acquisition latch (latch_common.lua).
	acquireLatchPrefix = "fairlock_acquire_latch"
)

// ErrInvalidName reports a lock name that cannot be used: empty, or with
// braces that do not form one Redis hash tag.
var ErrInvalidName = errors.New("fairlock: invalid lock name")

// ValidateName checks that name can name a lock. A name may carry its own
// hash tag ("{order}:seat"); then every key of the lock reuses that tag, as in
// Redisson. A name with a brace that does not open a non-empty tag ("a{b",
// "a{}b", "a}b") is rejected: its keys would hash to different cluster slots.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	open := strings.IndexByte(name, '{')
	if open < 0 {
		if strings.IndexByte(name, '}') >= 0 {
			return fmt.Errorf("%w: %q has '}' without '{'", ErrInvalidName, name)
		}
		return nil
	}
	close := strings.IndexByte(name[open+1:], '}')
	if close < 0 {
		return fmt.Errorf("%w: %q has an unbalanced '{'", ErrInvalidName, name)
	}
	if close == 0 {
		return fmt.Errorf("%w: %q has an empty hash tag '{}'", ErrInvalidName, name)
	}
	return nil
}

// prefixName is Redisson's prefixName: "prefix:{name}", or "prefix:name" when
// the name carries its own hash tag.
func prefixName(prefix, name string) string {
	if strings.IndexByte(name, '{') >= 0 {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}

// Keys are the Redis keys and channels of one lock.
type Keys struct {
	Name     string // the lock hash: owner -> hold count
	Channel  string // redisson_lock__channel:{name}; fair waiters append ":<owner>"
	Queue    string // redisson_lock_queue:{name} (fair lock)
	Timeouts string // redisson_lock_timeout:{name} (fair lock)
	latch    string
	alatch   string
	squeue   string // the scalable engine's queue, see ScalableQueue
	grace    string // the fair lock's head grace, see Grace
	token    string // the fencing token counter, see Token
}

// KeysFor returns the keys of the lock called name. It does not validate the
// name: call ValidateName first.
func KeysFor(name string) Keys {
	return Keys{
		Name:     name,
		Channel:  prefixName(channelPrefix, name),
		Queue:    prefixName(queuePrefix, name),
		Timeouts: prefixName(timeoutPrefix, name),
		latch:    prefixName(latchPrefix, name),
		alatch:   prefixName(acquireLatchPrefix, name),
		squeue:   prefixName(squeuePrefix, name),
		grace:    prefixName(gracePrefix, name),
		token:    prefixName(tokenPrefix, name),
	}
}

// Latch is the unlock latch key of one unlock call.
func (k Keys) Latch(requestID string) string { return k.latch + ":" + requestID }

// AcquireLatchPrefix is the acquisition latches' prefix,
// "fairlock_acquire_latch:{name}" (AcquireLatch adds ":<request-id>").
func (k Keys) AcquireLatchPrefix() string {
	if k.alatch == "" {
		return prefixName(acquireLatchPrefix, k.Name)
	}
	return k.alatch
}

// AcquireLatch is the acquisition latch key of one acquisition call
// (latch_common.lua): "fairlock_acquire_latch:{name}:<request-id>".
func (k Keys) AcquireLatch(requestID string) string {
	if k.alatch == "" {
		return prefixName(acquireLatchPrefix, k.Name) + ":" + requestID
	}
	return k.alatch + ":" + requestID
}

// WaiterChannel is the fair lock's per-waiter channel of owner.
func (k Keys) WaiterChannel(owner string) string { return k.Channel + ":" + owner }

// Owner formats an owner id, "<client-uuid>:<thread-id>".
func Owner(clientID string, threadID int64) string {
	return fmt.Sprintf("%s:%d", clientID, threadID)
}

// Script file names.
const (
	FileAcquire           = "acquire.lua"
	FileUnlock            = "unlock.lua"
	FileForceUnlock       = "force_unlock.lua"
	FileRenew             = "renew.lua"
	FileFairTryLock       = "fair_try_lock.lua"
	FileFairTryLockWait   = "fair_try_lock_wait.lua"
	FileFairAcquireFailed = "fair_acquire_failed.lua"
	FileFairUnlock        = "fair_unlock.lua"
	FileFairForceUnlock   = "fair_force_unlock.lua"
	FileAbandon           = "abandon.lua"
	FileFairState         = "fair_state.lua" // read-only, both engines, no prepended parts
	// FileFencedAcquire is in fenced.go.
	fileFairCommon     = "fair_common.lua"
	fileFairToken      = "fair_token.lua"       // the fencing token, after latch_common.lua wherever fair_common.lua runs
	fileFairFastTake   = "fair_fast_take.lua"   // the fair tryLock scripts' fast path, before the queue operations
	fileFairFastUnlock = "fair_fast_unlock.lua" // the fair unlock's latch check and fast path, before the queue operations
	fileResLock        = "res_lock.lua"         // the fair lock's resource, in front of fair_common.lua
	fileQueueRedisson  = "queue_redisson.lua"
	fileLatchCommon    = "latch_common.lua"
)

// Files lists every script, in a fixed order.
var Files = []string{
	FileAcquire, FileUnlock, FileForceUnlock, FileRenew, FileAbandon, FileFencedAcquire,
	FileFairTryLock, FileFairTryLockWait, FileFairAcquireFailed, FileFairUnlock, FileFairForceUnlock, FileFairState,
	FileRWReadAcquire, FileRWReadUnlock, FileRWWriteAcquire, FileRWWriteUnlock, FileRWForceUnlock, FileRWRenew,
}

// Source returns the text of a script as it is sent to Redis: the file, with
// latch_common.lua in front of it (sem_common.lua for the permit-expirable
// semaphore's sem_*.lua; SemFairSource assembles the fair semaphore's), and
// for the fair-lock scripts the Redisson-compatible engine's queue
// operations, the lock's resource (res_lock.lua) and fair_common.lua too
// (see ScalableSource for the other engine). Every Source function leaves
// out the shared parts' unused top-level functions (compose, trim.go).
func Source(file string) string { return source(file, compose) }

func source(file string, compose composer) string {
	body, err := readFile(file)
	if err != nil {
		panic("lua: no script " + file)
	}
	if strings.HasPrefix(file, "sem_") {
		return compose(string(body), mustRead(fileSemCommon))
	}
	if file == FileFairState {
		return string(body)
	}
	if !strings.HasPrefix(file, "fair_") {
		return compose(string(body), mustRead(fileLatchCommon))
	}
	return compose(string(body), mustRead(fileLatchCommon), mustRead(fileFairToken), fastPath(file), mustRead(fileQueueRedisson), mustRead(fileResLock), mustRead(fileFairCommon))
}

// fastPath is the fast path of a fair acquisition (fair_fast_take.lua) for
// the two fair tryLock scripts, of a fair release (fair_fast_unlock.lua) for
// fair_unlock.lua, "" for the others: it runs before the rest of the
// script's functions are defined (issue 23).
func fastPath(file string) string {
	switch file {
	case FileFairTryLock, FileFairTryLockWait:
		return mustRead(fileFairFastTake)
	case FileFairUnlock:
		return mustRead(fileFairFastUnlock)
	}
	return ""
}

func mustRead(file string) string {
	b, err := readFile(file)
	if err != nil {
		panic("lua: missing " + file)
	}
	return string(b)
}

// Scripts is one loaded set of the scripts. Default() is the real set; tests
// build deliberately broken sets with Edit.
type Scripts struct {
	byFile   map[string]*redis.Script
	src      map[string]string    // each script's source, for EVAL
	boxedSha map[string]any       // each script's digest, boxed once (exec.go)
	fn       map[string]*function // each script as a Redis Function (funclib.go), when it can be one
}

func newScripts(n int) *Scripts {
	return &Scripts{byFile: make(map[string]*redis.Script, n),
		src: make(map[string]string, n), boxedSha: make(map[string]any, n),
		fn: make(map[string]*function, n)}
}

func (s *Scripts) add(file, src string) {
	sc := redis.NewScript(src)
	s.byFile[file], s.src[file], s.boxedSha[file] = sc, src, sc.Hash()
	name := LibraryPrefix + sc.Hash()
	if lib, ok := functionLib(name, src); ok {
		s.fn[file] = &function{name: name, boxedName: name, lib: lib}
	}
}

// Function returns the Redis Function library of file and the name of its
// function, or ok false when the script is only sent with EVALSHA.
func (s *Scripts) Function(file string) (name, lib string, ok bool) {
	f := s.fn[file]
	if f == nil {
		return "", "", false
	}
	return f.name, f.lib, true
}

// Default is the set every lock uses (built once, at the first call).
var Default = sync.OnceValue(func() *Scripts { return Edit(nil) })

// Edit builds a set of scripts whose source is edit(file, source). A nil edit
// leaves every script as it is. Tests use it to make broken variants.
func Edit(edit func(file, src string) string) *Scripts {
	s := newScripts(len(Files))
	for _, f := range Files {
		src := editSource(f, edit, source)
		s.add(f, src)
	}
	return s
}

// Script returns the loaded script of file.
func (s *Scripts) Script(file string) *redis.Script {
	sc, ok := s.byFile[file]
	if !ok {
		panic("lua: no script " + file)
	}
	return sc
}

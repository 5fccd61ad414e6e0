// Package lua is the wire contract of the locks: the Redis scripts, one
// .lua file each, whose headers state their KEYS, ARGV and replies. FS holds
// them as they are, for tools and for services in other languages that run
// the same scripts.
//
// Key names, channel names, owner ids, message values and argument order are
// Redisson's, so a Java service using Redisson and a Go service using this
// module exclude each other on the same lock. Where a script does more than
// Redisson's (the fair-lock hazards H1, H2 and H4, the head grace), its header
// says so; the extra arguments come after Redisson's. docs/design.md ("Script
// contracts") has them side by side.
//
// A script is sent to Redis with the shared parts it uses in front of it
// (latch_common.lua; for the fair-lock scripts, the fencing token
// fair_token.lua, for the two tryLock scripts their fast path
// fair_fast_take.lua, for fair_unlock.lua its fast path fair_fast_unlock.lua,
// one engine's queue operations, queue_redisson.lua or
// queue_scalable.lua, the lock's resource res_lock.lua and fair_common.lua;
// for the fair semaphore's sem_fair_*.lua, fair_token.lua,
// queue_scalable.lua, res_sem.lua and fair_common.lua). The fair semaphore
// is not in Redisson: its keys and replies are this module's own. A shared
// part goes without its top-level functions that nothing kept calls (package
// wire, trim.go), so the text sent differs from the files' concatenation.
// On a Redis with Functions that text, rewritten so that its functions are
// defined once when it loads, is a function library, fairlock_<sha1 of the
// text>, called with FCALL (package wire, funclib.go); elsewhere the text
// is sent with EVALSHA. Both take the same KEYS and ARGV and reply alike.
// The Go code that knows each script's KEYS and ARGV order is internal; the
// locks load these files when this package is linked in, which every lock
// package does.
package lua

import (
	"embed"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// FS holds every script file of the wire contract.
//
//go:embed *.lua
var FS embed.FS

func init() { wire.Load(FS) }

package wire

import (
	"context"
	"hash/maphash"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The hot scripts (acquire, unlock, the fair lock's) are sent without
// go-redis's Script.Run, which copies the keys and arguments into a fresh
// []any and boxes each of them on every call. A call here builds its
// EVALSHA command's argument list once, in one allocation, and takes the
// values that repeat from call to call (key names, the owner id, the lease,
// the latch and wait times) already boxed from a small cache: an
// uncontended Lock+Unlock allocates about half as much (see
// BenchmarkLockUnlock in reentrant and fair).

// cmdBuf is one script call's arguments: "evalsha", the digest, the number
// of keys, the keys, then ARGV.
type cmdBuf struct {
	s     *Scripts
	file  string
	nkeys int
	args  []any
}

// cmd starts a call of file with nkeys keys and nargs arguments.
func (s *Scripts) cmd(file string, nkeys, nargs int) cmdBuf {
	if _, ok := s.byFile[file]; !ok {
		panic("lua: no script " + file)
	}
	args := make([]any, 3, 3+nkeys+nargs)
	args[0], args[1], args[2] = "evalsha", s.boxedSha[file], nkeys
	return cmdBuf{s: s, file: file, nkeys: nkeys, args: args}
}

// key appends a key (or any string) that repeats from call to call.
func (b *cmdBuf) key(v string) *cmdBuf { b.args = append(b.args, boxString(v)); return b }

// str appends a string that changes from call to call.
func (b *cmdBuf) str(v string) *cmdBuf { b.args = append(b.args, v); return b }

// num appends an integer that repeats from call to call.
func (b *cmdBuf) num(v int64) *cmdBuf { b.args = append(b.args, boxInt(v)); return b }

// now appends an integer that changes from call to call (a clock).
func (b *cmdBuf) now(v int64) *cmdBuf { b.args = append(b.args, v); return b }

// processor is what every go-redis client (Client, ClusterClient, Ring,
// UniversalClient) offers beyond redis.Scripter.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// run sends the call: FCALL of the script's function on a Redis that has
// Functions (funclib.go, fcall below), else EVALSHA, and EVAL when the
// server does not have the script (NOSCRIPT), as Script.Run does.
func (b *cmdBuf) run(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	p, ok := rdb.(processor)
	if !ok {
		sc := b.s.byFile[b.file]
		keys := make([]string, b.nkeys)
		for i := range keys {
			keys[i] = b.args[3+i].(string)
		}
		return sc.Run(ctx, rdb, keys, b.args[3+b.nkeys:]...)
	}
	// A cluster call needs a key: it names the node that runs it, and
	// the node to load the library on.
	if f := b.s.fn[b.file]; f != nil && !f.broken.Load() && functionsOK(p) && (b.nkeys > 0 || !isCluster(p)) {
		if cmd, done := b.fcall(ctx, p, f); done {
			return cmd
		}
		b.args[0], b.args[1] = "evalsha", b.s.boxedSha[b.file]
	}
	cmd := redis.NewCmd(ctx, b.args...)
	if b.nkeys > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = p.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && (err == redis.ErrNoScript || strings.HasPrefix(err.Error(), "NOSCRIPT")) {
		args := slices.Clone(b.args)
		args[0], args[1] = "eval", b.s.src[b.file]
		cmd = redis.NewCmd(ctx, args...)
		if b.nkeys > 0 {
			cmd.SetFirstKeyPos(3)
		}
		_ = p.Process(ctx, cmd)
	}
	return cmd
}

func isCluster(p processor) bool { _, ok := p.(*redis.ClusterClient); return ok }

// The box cache: boxed values of strings and integers that repeat, so that
// passing them as []any does not allocate each time. A value hashes to a
// pair of slots; a miss boxes afresh and takes the pair's older slot. With
// 4096 slots the dozen values of one lock handle rarely evict each other,
// and many handles at once degrade to go-redis's own cost (one allocation
// per value), never worse.
type boxed struct {
	s     string
	n     int64
	isInt bool
	v     any
}

var (
	boxSeed  = maphash.MakeSeed()
	boxSlots [4096]atomic.Pointer[boxed]
	boxFlip  atomic.Uint32 // which slot of a pair a miss takes
)

func boxString(s string) any {
	i := maphash.String(boxSeed, s) % uint64(len(boxSlots)) &^ 1
	for j := i; j <= i+1; j++ {
		if b := boxSlots[j].Load(); b != nil && !b.isInt && b.s == s {
			return b.v
		}
	}
	b := &boxed{s: s, v: s}
	boxSlots[i+uint64(boxFlip.Add(1)&1)].Store(b)
	return b.v
}

func boxInt(n int64) any {
	if n >= 0 && n < 256 {
		return n // the runtime boxes small integers without allocating
	}
	i := (uint64(n) * 0x9E3779B97F4A7C15 >> 32) % uint64(len(boxSlots)) &^ 1
	for j := i; j <= i+1; j++ {
		if b := boxSlots[j].Load(); b != nil && b.isInt && b.n == n {
			return b.v
		}
	}
	b := &boxed{n: n, isInt: true, v: n}
	boxSlots[i+uint64(boxFlip.Add(1)&1)].Store(b)
	return b.v
}

// call runs file with keys and args as run does (FCALL, EVALSHA, EVAL), for
// the scripts that do not build their arguments with cmd.
func (s *Scripts) call(ctx context.Context, rdb redis.Scripter, file string, keys []string, args ...any) *redis.Cmd {
	b := s.cmd(file, len(keys), len(args))
	for _, k := range keys {
		b.args = append(b.args, k)
	}
	b.args = append(b.args, args...)
	return b.run(ctx, rdb)
}

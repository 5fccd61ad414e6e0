package wire

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"
)

// A script as a Redis Function (issue 33). A script sent with EVALSHA runs
// its whole text at every call: each of its top-level `local function`s
// makes a closure then, called or not (the fair release defines about 40,
// ~30 µs of Redis time when Redis wakes for the call; docs/benchmarks.md).
// A Redis 7 server can hold the same script as a function library
// (FUNCTION LOAD once, then FCALL), whose top level runs once, at load.
//
// functionLib rewrites a composed script into such a library, keeping what
// each call sees:
//
//   - every top-level `local function` (the shape luaDefs reads: column 0 up
//     to a line that is exactly "end") is defined once, at the library's
//     top level, in the script's order;
//   - every other top-level local (a column-0 `local a, b = ...` or
//     `local a`) is declared once at the library's top level, before the
//     functions, so that they capture it as they captured the script's
//     local; the declaration's place in the script becomes an assignment
//     (`a, b = ...`; `a, b = nil` for one without a value) that runs at
//     every call, so no value outlives the call that set it;
//   - the rest of the text runs at every call, in its order, in the
//     function registered under the library's name, whose keys and
//     arguments it first stores in the library's KEYS and ARGV (the globals
//     a script reads).
//
// It declines (ok false: the script is sent with EVALSHA as before) a text
// that does not have the shape, or that declares one top-level name twice
// (a later declaration shadows the earlier one only for what follows it,
// which one shared local cannot keep), or whose declaration reads the name
// it declares (`local type = type`), or that has more top-level names than
// Lua 5.1 lets a chunk have.
func functionLib(name, src string) (lib string, ok bool) {
	lib, why := functionLibWhy(name, src)
	return lib, why == ""
}

// functionLibWhy is functionLib with the reason it declines.
func functionLibWhy(name, src string) (lib, why string) {
	lines := strings.Split(src, "\n")
	defs, ok := luaDefs(lines, 0)
	if !ok {
		return "", "not the shape of the shared parts"
	}
	inDef := make([]bool, len(lines))
	seen := map[string]bool{"KEYS": true, "ARGV": true}
	for _, d := range defs {
		for l := d.start; l <= d.end; l++ {
			inDef[l] = true
		}
		if seen[d.name] {
			return "", "function " + d.name + " defined twice"
		}
		seen[d.name] = true
	}
	// The rest, in runs: the lines between two definitions. A run that
	// cannot return (no "return" in it) becomes a function of the library
	// that the call runs at the run's place, so that the names it uses are
	// that function's upvalues, not the call's (Lua 5.1 allows 60 a
	// function); a run that can return stays in the call's own text.
	var vars []string
	var runs [][]string
	var run []string
	for l, line := range lines {
		if inDef[l] {
			if run != nil {
				runs, run = append(runs, run), nil
			}
			continue
		}
		if !strings.HasPrefix(line, "local ") && !strings.HasPrefix(line, "local\t") {
			run = append(run, line)
			continue
		}
		m := localDecl.FindStringSubmatch(line)
		if m == nil {
			return "", "a column-0 local of another form: " + line
		}
		names := strings.Split(m[1], ",")
		for i := range names {
			names[i] = strings.TrimSpace(names[i])
			n := names[i]
			if seen[n] {
				return "", "local " + n + " declared twice"
			}
			seen[n] = true
			vars = append(vars, n)
		}
		if value := m[2]; value != "" {
			for _, id := range luaIdents(luaString.ReplaceAllString(value, "''")) {
				for _, n := range names {
					if id == n {
						return "", "local " + n + " reads itself"
					}
				}
			}
			run = append(run, strings.Join(names, ", ")+" "+value)
		} else if !fnKeepUnset {
			run = append(run, strings.TrimSpace(strings.Join(names, ", ")+" = nil "+m[3]))
		}
	}
	if run != nil {
		runs = append(runs, run)
	}
	var fns, call []string
	for _, r := range runs {
		text := strings.Join(r, "\n")
		ids := luaIdents(text)
		switch {
		case len(ids) == 0: // comments and blank lines
		case slices.Contains(ids, "return"):
			call = append(call, text)
		default:
			fn := fmt.Sprintf("fairlock_run%d", len(fns))
			if seen[fn] {
				return "", "name " + fn + " taken"
			}
			seen[fn] = true
			fns = append(fns, "local function "+fn+"()\n"+text+"\nend")
			call = append(call, fn+"()")
		}
	}
	if len(seen) > 180 { // Lua 5.1: at most 200 locals in a function
		return "", "too many top-level names"
	}
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n")
	b.WriteString("local KEYS, ARGV\n")
	for i := 0; i < len(vars); i += 20 {
		b.WriteString("local " + strings.Join(vars[i:min(i+20, len(vars))], ", ") + "\n")
	}
	for _, d := range defs {
		b.WriteString(strings.Join(lines[d.start:d.end+1], "\n"))
		b.WriteByte('\n')
	}
	for _, f := range fns {
		b.WriteString(f + "\n")
	}
	b.WriteString("redis.register_function('" + name + "', function(keys, args)\nKEYS, ARGV = keys, args\n")
	b.WriteString(strings.Join(call, "\n"))
	b.WriteString("\nend)\n")
	return b.String(), ""
}

// luaString is a quoted string on one line.
var luaString = regexp.MustCompile(`'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"`)

// localDecl is a column-0 declaration of top-level locals: the names, then
// "= value..." (m[2]) or nothing but a comment (m[3]).
var localDecl = regexp.MustCompile(`^local\s+([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*(?:(=.*)|(\s*--.*)?)$`)

// fnKeepUnset breaks functionLib for its tests: a top-level local declared
// without a value keeps the value of the last call instead of starting nil.
var fnKeepUnset = false

// function is one script as a Redis Function.
type function struct {
	name      string
	boxedName any // name, boxed once
	lib       string
	broken    atomic.Bool // the server refused the library: EVALSHA from now on
}

// Set returns the scripts of the scalable engine as a Scripts (their
// sources, digests and functions).
func (s *ScalableScripts) Set() *Scripts { return s.set }

// Set returns the fair semaphore's scripts as a Scripts.
func (s *SemFairScripts) Set() *Scripts { return s.set }

// Set returns the multi-seat hold's scripts as a Scripts.
func (s *SeatsScripts) Set() *Scripts { return s.set }

// fcall sends the call as FCALL of f on c (a plain or a cluster client),
// loading f's library first where the call's keys live when that server
// does not have it (a server started since, or never sent it).
// done false: the server cannot run it as a function (no Functions, as
// Redis 6 and miniredis; a user not allowed FUNCTION LOAD; a library it
// refused), and the caller sends it with EVALSHA; the call has not run.
func (b *cmdBuf) fcall(ctx context.Context, c processor, f *function) (cmd *redis.Cmd, done bool) {
	b.args[0], b.args[1] = "fcall", f.boxedName
	for attempt := 0; ; attempt++ {
		cmd = redis.NewCmd(ctx, b.args...)
		if b.nkeys > 0 {
			cmd.SetFirstKeyPos(3)
		}
		_ = c.Process(ctx, cmd)
		err := cmd.Err()
		switch {
		case err == nil || !isRedisError(err):
			return cmd, true
		case noFunctionsReply(err.Error()):
			noFunctions(c) // no Functions, or a user not allowed FCALL itself
			return nil, false
		case !functionMissing(err.Error()):
			return cmd, true // the function's own error
		case attempt > 0:
			// gone again at once (FUNCTION FLUSH), or on a cluster the
			// call went to a node the load did not reach (a slot being
			// migrated, a slot map not yet reloaded): EVALSHA
			return nil, false
		}
		node := c
		if cc, ok := c.(*redis.ClusterClient); ok {
			// Libraries are per node: load it on the primary of the
			// call's slot (replicas follow it, and a promoted one has it).
			n, err := cc.MasterForKey(ctx, b.args[3].(string))
			if err != nil {
				return nil, false
			}
			node = n
		}
		load := redis.NewCmd(ctx, "function", "load", f.lib)
		_ = node.Process(ctx, load)
		if err := load.Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
			if !isRedisError(err) {
				cmd.SetErr(err) // the connection's error: the call's
				return cmd, true
			}
			if strings.HasPrefix(err.Error(), "NOPERM") {
				noFunctions(c)
			} else {
				f.broken.Store(true)
			}
			return nil, false
		}
	}
}

func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// noFuncs holds the clients whose servers have no Functions for this
// module (weakly: a client's entry goes with it).
var noFuncs sync.Map // weak.Pointer[redis.Client or redis.ClusterClient] -> struct{}

// functionsOK reports whether calls over c are sent as FCALL: c is a plain
// or a cluster client not known to lack Functions. Other clients (Ring, a
// pipeline) use EVALSHA.
func functionsOK(c processor) bool {
	var no bool
	switch c := c.(type) {
	case *redis.Client:
		_, no = noFuncs.Load(weak.Make(c))
	case *redis.ClusterClient:
		_, no = noFuncs.Load(weak.Make(c))
	default:
		return false
	}
	return !no
}

// DisableFunctions makes every call over c use EVALSHA (fairlock's
// WithFunctions(false)).
func DisableFunctions(c redis.UniversalClient) { noFunctions(c) }

func noFunctions(c any) {
	switch c := c.(type) {
	case *redis.Client:
		markNoFunctions(c)
	case *redis.ClusterClient:
		markNoFunctions(c)
	}
}

func markNoFunctions[T any](c *T) {
	w := weak.Make(c)
	if _, had := noFuncs.LoadOrStore(w, struct{}{}); !had {
		runtime.AddCleanup(c, func(w weak.Pointer[T]) { noFuncs.Delete(w) }, w)
	}
}

// ScriptCall reports the digest (SHA1 of the source, as EVALSHA names it)
// of the script cmd runs, when cmd is a script call: EVALSHA, EVAL, or
// FCALL of a script's function (named "fairlock_" and the digest). Hooks
// (tests', the demo's) use it to tell the scripts apart whichever way they
// are sent; NotRun tells them the calls the server did not run.
func ScriptCall(cmd redis.Cmder) (sha string, ok bool) {
	args := cmd.Args()
	if len(args) < 3 {
		return "", false
	}
	s, _ := args[1].(string)
	switch strings.ToLower(cmd.Name()) {
	case "evalsha":
		return s, true
	case "eval":
		sum := sha1.Sum([]byte(s))
		return hex.EncodeToString(sum[:]), true
	case "fcall":
		return strings.TrimPrefix(s, LibraryPrefix), true
	}
	return "", false
}

// NotRun reports whether err, a script call's error, says the server did
// not run the call, which the library then sends again in another form:
// NOSCRIPT (EVAL follows), a function not loaded (FUNCTION LOAD and FCALL
// follow), or no Functions on the server (EVALSHA follows).
func NotRun(err error) bool {
	if err == nil || !isRedisError(err) {
		return false
	}
	m := err.Error()
	return strings.HasPrefix(m, "NOSCRIPT") || functionMissing(m) || noFunctionsReply(m)
}

// functionMissing: the server has Functions but not this library (FCALL's
// reply before FUNCTION LOAD).
func functionMissing(msg string) bool { return strings.HasPrefix(msg, "ERR Function not found") }

// noFunctionsReply: FCALL is refused as a command (a server without
// Functions: Redis 6, miniredis; or a user not allowed FCALL itself).
func noFunctionsReply(msg string) bool {
	return strings.Contains(strings.ToLower(msg), "unknown command") ||
		strings.HasPrefix(msg, "NOPERM") && strings.Contains(msg, "'fcall'")
}

// NoFunctions reports whether err is a server's answer that it has no
// Functions for this client (Redis 6 and miniredis: unknown command; an ACL
// user without FCALL), as a script call reads it.
func NoFunctions(err error) bool { return err != nil && noFunctionsReply(err.Error()) }

// LibraryPrefix starts the name of every function library this module loads
// ("fairlock_<sha1 of the script>").
const LibraryPrefix = "fairlock_"

// LibraryNames returns the names of the function libraries this build's
// scripts load (the default sets of every lock kind): what `fairlock
// functions` keeps when it prunes the libraries of other versions.
func LibraryNames() map[string]bool {
	names := map[string]bool{}
	for _, s := range []struct {
		files []string
		set   *Scripts
	}{
		{Files, Default()},
		{ScalableFiles, ScalableDefault().Set()},
		{SemFairFiles, SemFairDefault().Set()},
		{SeatsFiles, SeatsDefault().Set()},
	} {
		for _, f := range s.files {
			if name, _, ok := s.set.Function(f); ok {
				names[name] = true
			}
		}
	}
	return names
}

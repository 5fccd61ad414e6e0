package wire_test

import (
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/lua"
)

// The shared parts that package wire puts in front of a script body.
var sharedParts = []string{
	"latch_common.lua", "fair_token.lua", "fair_fast_take.lua", "fair_fast_unlock.lua",
	"queue_redisson.lua", "queue_scalable.lua", "res_lock.lua", "res_sem.lua",
	"fair_common.lua", "sem_common.lua", "seats_common.lua",
}

var localFunc = regexp.MustCompile(`(?m)^local function ([A-Za-z_][A-Za-z0-9_]*)\s*\(`)

// sharedFuncs returns the names of the shared parts' top-level functions,
// read from the files (lua.FS), not from package wire.
func sharedFuncs(t *testing.T) map[string]bool {
	names := map[string]bool{}
	for _, f := range sharedParts {
		b, err := fs.ReadFile(lua.FS, f)
		require.NoError(t, err, f)
		for _, m := range localFunc.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	require.Greater(t, len(names), 50, "the shared parts define functions")
	return names
}

// stripComments cuts each line at its first "--". It is exact only when no
// line of the sources has "--" inside a string; TestComposedScriptsDefine
// WhatTheyUse checks that first.
func stripComments(src string) string {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		if j := strings.Index(l, "--"); j >= 0 {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}

var ident = regexp.MustCompile(`(?:^|[^.:\w])([A-Za-z_][A-Za-z0-9_]*)`)

// useLines returns, for each name used in code as a variable (not as a
// field after "." or ":"), the lines where it appears.
func useLines(code string) map[string][]int {
	at := map[string][]int{}
	for n, l := range strings.Split(code, "\n") {
		for _, m := range ident.FindAllStringSubmatch(l, -1) {
			at[m[1]] = append(at[m[1]], n)
		}
	}
	return at
}

// declares reports whether code declares a local variable named name (a
// body's own local that shares a shared function's name, such as
// sem_release_hold.lua's reply).
func declares(code, name string) bool {
	return regexp.MustCompile(`(?m)\blocal\s+([A-Za-z_][A-Za-z0-9_]*\s*,\s*)*` + name + `\b`).MatchString(code)
}

// composed is every script as package wire composes it, by set and file.
func composed() map[string]string {
	out := map[string]string{}
	for _, f := range wire.Files {
		out["default/"+f] = wire.Source(f)
	}
	for _, f := range wire.ScalableFiles {
		out["scalable/"+f] = wire.ScalableSource(f)
	}
	for _, f := range wire.SeatsFiles {
		out["seats/"+f] = wire.SeatsSource(f)
	}
	for _, f := range wire.SemFairFiles {
		out["semfair/"+f] = wire.SemFairSource(f)
	}
	return out
}

// trimProblems checks each composed script against a scan independent of
// the trimmer: every shared function that the script's code (comments cut)
// names is defined in it, and every shared function defined in it is named
// somewhere outside its own definition. Local functions only see earlier
// ones, so a dead definition that only dead ones name is caught at the last
// of them. It returns the problems and the number of shared definitions.
func trimProblems(t *testing.T, shared map[string]bool) (problems []string, defined int) {
	scripts := composed()
	keys := make([]string, 0, len(scripts))
	for k := range scripts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		code := stripComments(scripts[k])
		lines := strings.Split(code, "\n")
		at := useLines(code)
		have := map[string]bool{}
		for i := 0; i < len(lines); i++ {
			m := localFunc.FindStringSubmatch(lines[i])
			if m == nil || !shared[m[1]] {
				continue
			}
			have[m[1]] = true
			defined++
			end := i + 1
			for end < len(lines) && lines[end] != "end" {
				end++
			}
			outside := false
			for _, n := range at[m[1]] {
				outside = outside || n < i || n > end
			}
			if !outside {
				problems = append(problems, fmt.Sprintf("%s: defines %s, which nothing else names", k, m[1]))
			}
		}
		for name := range shared {
			if !have[name] && len(at[name]) > 0 && !declares(code, name) {
				problems = append(problems, fmt.Sprintf("%s: names %s without its definition", k, name))
			}
		}
	}
	sort.Strings(problems)
	return problems, defined
}

// TestComposedScriptsDefineWhatTheyUse (issue 33): each script carries the
// shared functions it calls, transitively, and no other.
func TestComposedScriptsDefineWhatTheyUse(t *testing.T) {
	// The comment cut of the scan is exact only without "--" in a string.
	entries, err := fs.ReadDir(lua.FS, ".")
	require.NoError(t, err)
	for _, e := range entries {
		b, err := fs.ReadFile(lua.FS, e.Name())
		require.NoError(t, err)
		for n, l := range strings.Split(string(b), "\n") {
			if j := strings.Index(l, "--"); j >= 0 {
				before := l[:j]
				require.True(t, strings.Count(before, "'")%2 == 0 && strings.Count(before, `"`)%2 == 0,
					"%s:%d: \"--\" in a string; the test's scan cannot read it", e.Name(), n+1)
			}
		}
	}
	shared := sharedFuncs(t)

	problems, trimmed := trimProblems(t, shared)
	assert.Empty(t, problems)

	// The scan sees the scripts as they were before the trim: it finds the
	// unused definitions (the check can fail), and the trim drops some.
	restore := wire.SetTrimmer(true, nil)
	whole, untrimmed := trimProblems(t, shared)
	restore()
	assert.NotEmpty(t, whole, "the untrimmed scripts have unused definitions")
	assert.Less(t, trimmed, untrimmed*3/4, "the trim drops at least a quarter of the definitions")
	t.Logf("shared definitions over all scripts: %d untrimmed, %d trimmed", untrimmed, trimmed)

	// A trimmer that drops one function a script calls is caught.
	for _, name := range []string{"latch_check", "wake", "q_refuse", "sem_guard", "seats_guard"} {
		require.True(t, shared[name], name)
		restore := wire.SetTrimmer(false, func(n string) bool { return n == name })
		broken, _ := trimProblems(t, shared)
		restore()
		found := false
		for _, p := range broken {
			found = found || strings.Contains(p, "names "+name+" without")
		}
		assert.True(t, found, "dropping %s: %v", name, broken)
	}
}

package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTrimPartsSynthetic(t *testing.T) {
	a := "-- part a\nlocal K = 1\nlocal function used(x)\n    return helper(x) -- see unused\nend\n" +
		"local function unused()\n    return 2\nend\n"
	b := "local function helper(x)\n    return x + K\nend\nlocal function dead()\n    return ' -- used() '\nend\n"
	out := trimParts("return used(1) -- dead()\n", []string{b, a})
	// b comes first here, so helper is named only by a's kept used: kept all the same.
	assert.Contains(t, out[0], "local function helper(x)")
	assert.NotContains(t, out[0], "local function dead()", "only named in a comment of the body")
	assert.Contains(t, out[1], "local function used(x)")
	assert.NotContains(t, out[1], "local function unused()", "only named in a comment")
	assert.Contains(t, out[1], "local K = 1", "constants stay")

	// "--" inside a string starts no comment.
	out = trimParts("local s = '--' .. x()\n", []string{"local function x()\nend\n"})
	assert.Contains(t, out[0], "local function x()")

	// A name inside a string counts (a scan may keep too much, never too little).
	out = trimParts("return 1", []string{"local function f()\nend\nlocal s = 'f'\n"})
	assert.Contains(t, out[0], "local function f()")

	// A part off the shape stays whole.
	for _, p := range []string{
		"local function g() return 1 end\nlocal function h()\nend\n", // one-line definition
		"local function g()\n  return 1\n",                           // no end
		"local function g()\nreturn 1\nend\n",                        // a column-0 line inside
		"local function g()\n  return [[x]]\nend\n",                  // a long bracket
	} {
		assert.Equal(t, p, trimParts("return 1", []string{p})[0], p)
	}

	// Nothing to drop: the part as it was, byte for byte.
	p := "local function f()\nend\n"
	assert.Equal(t, p, trimParts("f()", []string{p})[0])
	assert.Equal(t, "", strings.TrimSpace(trimParts("return 1", []string{p})[0]))
}

// A broken variant (a test's edit) that calls a shared function its script
// does not use gets the script composed whole, so the function is there:
// otherwise Redis would refuse the variant on a missing global and a test
// would count that as the variant caught.
func TestEditSourceKeepsWhatTheEditCalls(t *testing.T) {
	const def = "local function latch_token("
	if !strings.Contains(Source(FileUnlock), "latch_token") {
		// the premise: unlock.lua's composition leaves latch_token out
		assert.NotContains(t, Source(FileUnlock), def)
	} else {
		t.Fatalf("unlock.lua uses latch_token now: pick another function for this test")
	}
	const line = "local latched = redis.call('get', KEYS[3])\n"
	if n := strings.Count(Source(FileUnlock), line); n != 1 {
		t.Fatalf("%q occurs %d times in unlock.lua as sent", line, n)
	}
	edit := func(file, src string) string {
		if file != FileUnlock {
			return src
		}
		return strings.Replace(src, line, "local _ = latch_token\n"+line, 1)
	}
	got := editSource(FileUnlock, edit, source)
	assert.Contains(t, got, "local _ = latch_token", "the edit applied")
	assert.Contains(t, got, def, "the function the edit calls is defined")
	assert.Equal(t, Source(FileAcquire), editSource(FileAcquire, edit, source), "a script the edit leaves alone is sent as it is")
	assert.Equal(t, Source(FileUnlock), editSource(FileUnlock, nil, source))
}

// The Edit functions call an edit once per script: the tests' edits count
// their matches (faulttests' seats and semaphore variants).
func TestEditSourceCallsTheEditOnce(t *testing.T) {
	calls := 0
	editSource(FileUnlock, func(file, src string) string { calls++; return src + "\n-- x" }, source)
	assert.Equal(t, 1, calls)
}

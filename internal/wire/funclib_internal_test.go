package wire

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// perCallScript keeps state in top-level locals as the shared parts do (a
// cache read once per call, a table filled per call): run as a function it
// must answer each call as EVAL does, from that call's own arguments.
const perCallScript = `-- a shared part's state
local FIRST -- the first value noted by this call
local SEEN = {}

local function note(v)
    SEEN[#SEEN + 1] = v
    if FIRST == nil then
        FIRST = v
    end
    return FIRST
end

local function count()
    return #SEEN
end
note(ARGV[1])
local second = note(ARGV[2])
return {count(), second, KEYS[1]}
`

// runBoth runs perCallScript with EVAL and as a function (loaded from the
// library functionLib makes), with the same keys and arguments.
func runBoth(t *testing.T, rdb *redis.Client, name, arg1, arg2 string) (eval, fcall []any) {
	t.Helper()
	ctx := context.Background()
	e, err := rdb.Eval(ctx, perCallScript, []string{"k:" + arg1}, arg1, arg2).Slice()
	require.NoError(t, err)
	f, err := rdb.FCall(ctx, name, []string{"k:" + arg1}, arg1, arg2).Slice()
	require.NoError(t, err)
	return e, f
}

func TestFunctionLibKeepsStatePerCall(t *testing.T) {
	rdb := redistest.Real(t).Client(t)
	ctx := context.Background()
	load := func(name string) string {
		lib, why := functionLibWhy(name, perCallScript)
		require.Empty(t, why)
		require.NoError(t, rdb.FunctionLoadReplace(ctx, lib).Err())
		t.Cleanup(func() { rdb.FunctionDelete(context.Background(), name) })
		return name
	}
	name := load("fairlock_test_percall")
	for _, args := range [][2]string{{"a", "b"}, {"c", "d"}, {"e", "f"}} {
		e, f := runBoth(t, rdb, name, args[0], args[1])
		assert.Equal(t, []any{int64(2), args[0], "k:" + args[0]}, e, "EVAL")
		assert.Equal(t, e, f, "as a function, call %v", args)
	}

	// The broken variant (an unset local keeps the last call's value) is
	// caught: its second call answers from the first call's value.
	fnKeepUnset = true
	broken := load("fairlock_test_percall_broken")
	fnKeepUnset = false
	_, f1 := runBoth(t, rdb, broken, "a", "b")
	assert.Equal(t, []any{int64(2), "a", "k:a"}, f1)
	e2, f2 := runBoth(t, rdb, broken, "c", "d")
	assert.NotEqual(t, e2, f2, "the broken library must answer the second call differently")
}

func TestFunctionLibDeclines(t *testing.T) {
	for what, src := range map[string]string{
		"a name declared twice":      "local A = 1\nlocal A = 2\nreturn A\n",
		"a function defined twice":   "local function f()\n    return 1\nend\nlocal function f()\n    return 2\nend\nreturn f()\n",
		"a local and a function":     "local f = 1\nlocal function f()\n    return 2\nend\nreturn f()\n",
		"a declaration reads itself": "local type = type\nreturn type(1)\n",
		"not the shape":              "local function f()\nreturn 1\nend\nreturn f()\n",
		"a long string":              "local s = [[x]]\nreturn s\n",
		"another form of local":      "local function f() return 1 end\nreturn f()\n",
	} {
		_, why := functionLibWhy("x", src)
		assert.NotEmpty(t, why, what)
	}
	lib, why := functionLibWhy("x", "local a, b = 'type', ARGV[1] -- a string naming it is fine\nreturn a\n")
	assert.Empty(t, why)
	assert.Contains(t, lib, "\na, b = 'type', ARGV[1] -- a string")
}

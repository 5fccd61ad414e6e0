package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/cmd/fairlock/internal/inspect"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// frameWriter collects what the watch prints, and after the k-th Write
// (frame k: a frame is one Write) runs step k before the next frame is
// read, so each frame shows a known state whatever the timing.
type frameWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	steps  []func()
}

func (w *frameWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.writes++
	if w.writes <= len(w.steps) && w.steps[w.writes-1] != nil {
		w.steps[w.writes-1]()
	}
	return len(p), nil
}

func (w *frameWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// watchScenario holds lock name with a fair mutex; its steps queue a
// waiter (after frame 1) and release the lock (after frame 2), so the head
// grace starts for the waiter and the unlock leaves its latch.
func watchScenario(t *testing.T, b *redistest.Backend, name string) (holder, waiter string, steps []func()) {
	t.Helper()
	ctx := testCtx(t)
	c, err := fairlock.NewClient(b.Client(t), fairlock.WithHeadGrace(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	m, err := fair.New(c, name)
	require.NoError(t, err)
	require.NoError(t, m.Lock(ctx))
	rdb := b.Client(t)
	k := wire.KeysFor(name)
	t.Cleanup(func() { rdb.Del(context.Background(), k.Name, k.Queue, k.Timeouts, k.Grace()) })
	waiter = wire.Owner("0b9a8c7d-1e2f-4a3b-8c5d-6e7f8a9b0c1d", 7)
	steps = []func(){
		func() {
			ok, _, err := wire.Default().FairTryLockWait(ctx, rdb, k, wire.Args{
				Owner: waiter, LeaseMs: 30_000, WaitMs: 300_000, NowMs: time.Now().UnixMilli(), GraceMs: 5000})
			assert.NoError(t, err)
			assert.False(t, ok)
		},
		func() { assert.NoError(t, m.Unlock(ctx)) },
	}
	return m.Owner(), waiter, steps
}

// splitFrames cuts the text output at its "=== frame N at TIME ===" lines.
func splitFrames(t *testing.T, s string) []string {
	t.Helper()
	head := regexp.MustCompile(`(?m)^=== frame (\d+) at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ===$`)
	idx := head.FindAllStringSubmatchIndex(s, -1)
	var frames []string
	for i, m := range idx {
		assert.Equal(t, strconv.Itoa(i+1), s[m[2]:m[3]], "frame numbers in order")
		end := len(s)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		frames = append(frames, s[m[0]:end])
	}
	return frames
}

func TestInspectWatchText(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		name := redistest.Prefix(t) + "seats"
		holder, waiter, steps := watchScenario(t, b, name)
		out := &frameWriter{steps: steps}
		var errb bytes.Buffer
		code := run([]string{"inspect", name, "--redis", b.Addr, "--watch", "--count", "3", "--interval", "50ms"}, out, &errb)
		s := out.String()
		t.Log("\n" + s)
		require.Equal(t, 0, code, "stderr: %s", errb.String())
		assert.Empty(t, errb.String())
		assert.NotContains(t, s, "\x1b[", "no terminal escapes when stdout is not a terminal")
		frames := splitFrames(t, s)
		require.Len(t, frames, 3)

		holderLine := `(?m)^holder: ` + regexp.QuoteMeta(holder) + `  holds 1  lease \S+ left$`
		waiterLine := `(?m)^  1  ` + regexp.QuoteMeta(waiter) + ` +\d\d:\d\d:\d\d\.\d{3}  +\S+ +(granted|takes it)$`
		// Frame 1: held, nobody waiting, no grace; the Lock call's
		// acquisition latch (granted, with fencing token).
		assert.Regexp(t, holderLine, frames[0])
		assert.Contains(t, frames[0], "queue:  empty")
		assert.Contains(t, frames[0], "grace:  none")
		assert.Regexp(t, `(?m)^latches: 1 `, frames[0])
		assert.Regexp(t, `(?m)^  acquire  \S+  held:\d+ +\S+$`, frames[0])
		// Frame 2: still held, the waiter queued.
		assert.Regexp(t, holderLine, frames[1])
		assert.Contains(t, frames[1], "queue:  1 waiting")
		assert.Regexp(t, waiterLine, frames[1])
		// Frame 3: released; the waiter is the head with its grace, and
		// the unlock's latch (reply 1) is there besides the Lock's.
		assert.Contains(t, frames[2], "holder: none (the lock is free)")
		assert.Regexp(t, waiterLine, frames[2])
		assert.Regexp(t, `(?m)^grace:  `+regexp.QuoteMeta(waiter)+` may take the free lock, \S+ left \(first grace\)$`, frames[2])
		assert.Regexp(t, `(?m)^latches: 2 `, frames[2])
		assert.Regexp(t, `(?m)^  acquire  \S+  held:\d+ +\S+$`, frames[2])
		assert.Regexp(t, `(?m)^  unlock   \S+  1 +\S+$`, frames[2])
		for _, f := range frames {
			assert.Contains(t, f, `lock "`+name+`"`)
		}
	})
}

func TestInspectWatchNDJSON(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		name := redistest.Prefix(t) + "seats"
		holder, waiter, steps := watchScenario(t, b, name)
		out := &frameWriter{steps: steps}
		var errb bytes.Buffer
		code := run([]string{"inspect", "--watch", "--json", "--count=3", "--interval=50ms", "--redis", b.Addr, name}, out, &errb)
		require.Equal(t, 0, code, "stderr: %s", errb.String())
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		require.Len(t, lines, 3, "one line a frame: %q", out.String())
		frames := make([]inspect.Frame, len(lines))
		for i, l := range lines {
			require.NoError(t, json.Unmarshal([]byte(l), &frames[i]), "line %d: %s", i+1, l)
			f := frames[i]
			assert.Equal(t, i+1, f.Frame)
			assert.Equal(t, name, f.Name)
			assert.Empty(t, f.Error)
			require.NotNil(t, f.Report, "line %d", i+1)
			_, err := time.Parse(time.RFC3339, f.Time)
			assert.NoError(t, err)
			require.NotNil(t, f.Latches)
		}
		f1, f2, f3 := frames[0], frames[1], frames[2]
		require.Len(t, f1.Holders, 1)
		assert.Equal(t, holder, f1.Holders[0].Owner)
		assert.Empty(t, f1.Queue)
		assert.Nil(t, f1.Grace)
		require.Equal(t, 1, f1.Latches.Found, "the Lock call's acquisition latch")
		assert.Equal(t, inspect.AcquireLatch, f1.Latches.Keys[0].Kind)
		assert.Regexp(t, `^held:\d+$`, f1.Latches.Keys[0].Value)

		require.Len(t, f2.Holders, 1)
		require.Len(t, f2.Queue, 1)
		assert.Equal(t, waiter, f2.Queue[0].Owner)

		assert.False(t, f3.Locked)
		require.Len(t, f3.Queue, 1)
		assert.Equal(t, waiter, f3.Queue[0].Owner)
		require.NotNil(t, f3.Grace)
		assert.Equal(t, waiter, f3.Grace.Owner)
		assert.False(t, f3.Grace.Second)
		assert.Positive(t, f3.Grace.LeftMs)
		require.Equal(t, 2, f3.Latches.Found)
		var l inspect.Latch
		for _, x := range f3.Latches.Keys {
			if x.Kind == inspect.UnlockLatch {
				l = x
			}
		}
		assert.Equal(t, inspect.UnlockLatch, l.Kind)
		assert.Equal(t, "1", l.Value)
		assert.Equal(t, wire.KeysFor(name).Latch(l.RequestID), l.Key)
		assert.Positive(t, l.TTLMs)
	})
}

// TestInspectWatchRedisBlip stops Redis after frame 1 and starts it again
// after frame 2: frame 2 shows the error and the watch goes on.
func TestInspectWatchRedisBlip(t *testing.T) {
	srv := miniredis.RunT(t)
	out := &frameWriter{steps: []func(){srv.Close, func() { require.NoError(t, srv.Restart()) }}}
	var errb bytes.Buffer
	code := run([]string{"inspect", "seats", "--redis", srv.Addr(), "--watch", "--count", "3", "--interval", "10ms"}, out, &errb)
	s := out.String()
	t.Log("\n" + s)
	assert.Equal(t, 4, code, "the last frame read the name and found no such lock: stderr %s", errb.String())
	frames := splitFrames(t, s)
	require.Len(t, frames, 3)
	assert.Contains(t, frames[0], "no such lock")
	assert.Contains(t, frames[1], "ERROR:  cannot read the lock:")
	assert.Contains(t, frames[1], "(still watching)")
	assert.NotContains(t, frames[1], "no such lock")
	assert.Contains(t, frames[2], "no such lock")

	// With --count ending on an error frame, the exit code is 1.
	out = &frameWriter{steps: []func(){srv.Close}}
	code = run([]string{"inspect", "seats", "--redis", srv.Addr(), "--watch", "--count", "2", "--interval", "10ms", "--json"}, out, &errb)
	assert.Equal(t, 1, code)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	var f inspect.Frame
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &f))
	assert.NotEmpty(t, f.Error)
	assert.Nil(t, f.Report)
}

// TestInspectWatchInterrupt cancels the context (what Ctrl-C does) while
// the first frame is printed.
func TestInspectWatchInterrupt(t *testing.T) {
	srv := miniredis.RunT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb bytes.Buffer
	code := runCtx(ctx, []string{"inspect", "seats", "--redis", srv.Addr(), "--watch"}, cancelOnWrite{cancel}, &errb)
	assert.Equal(t, 130, code)
	assert.Equal(t, "fairlock inspect: interrupted: stopped watching\n", errb.String())
}

func TestInspectWatchUsage(t *testing.T) {
	down := closedPort(t)
	cases := []struct {
		args   []string
		stderr string
	}{
		{[]string{"--watch", "--interval", "0"}, "--interval 0s: must be from 10ms to 1h0m0s"},
		{[]string{"--watch", "--interval", "-1s"}, "--interval -1s: must be"},
		{[]string{"--watch", "--interval", "1ms"}, "--interval 1ms: must be"},
		{[]string{"--watch", "--interval", "2h"}, "--interval 2h0m0s: must be"},
		{[]string{"--watch", "--interval", "soon"}, "invalid value"},
		{[]string{"--watch", "--count", "-1"}, "--count -1: must be 0"},
		{[]string{"--interval", "1s"}, "--interval and --count go with --watch"},
		{[]string{"--count", "3"}, "--interval and --count go with --watch"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(append([]string{"inspect", "seats", "--redis", down}, tc.args...), &out, &errb)
			assert.Equal(t, 2, code)
			assert.Contains(t, errb.String(), tc.stderr)
			assert.Contains(t, errb.String(), "Usage:")
			assert.Empty(t, out.String())
		})
	}
}

// TestReadLatches: the scan finds the lock's latch keys of both kinds and
// no other lock's, even when the name holds glob characters.
func TestReadLatches(t *testing.T) {
	srv := miniredis.RunT(t)
	b := &redistest.Backend{Addr: srv.Addr(), Mini: srv}
	rdb := b.Client(t)
	ctx := testCtx(t)
	for _, name := range []string{"a*", "a[b]", `a\?`, "{order}:seat"} {
		k := wire.KeysFor(name)
		require.NoError(t, rdb.Set(ctx, k.Latch("r1"), "1", time.Minute).Err())
		require.NoError(t, rdb.Set(ctx, k.AcquireLatch("r2"), "held:4", 0).Err())
	}
	for _, other := range []string{"ab", "ab]", `a\x`, "{order}:seats", "{order}"} {
		k := wire.KeysFor(other)
		require.NoError(t, rdb.Set(ctx, k.Latch("x"), "0", 0).Err())
	}
	require.NoError(t, rdb.Set(ctx, "other_latch:{a*}:z", "0", 0).Err())
	for _, name := range []string{"a*", "a[b]", `a\?`, "{order}:seat"} {
		l, err := inspect.ReadLatches(ctx, rdb, name)
		require.NoError(t, err, name)
		k := wire.KeysFor(name)
		assert.Equal(t, 2, l.Found, name)
		assert.False(t, l.Partial)
		assert.ElementsMatch(t, []inspect.Latch{
			{Kind: inspect.UnlockLatch, Key: k.Latch("r1"), RequestID: "r1", Value: "1", TTLMs: 60_000},
			{Kind: inspect.AcquireLatch, Key: k.AcquireLatch("r2"), RequestID: "r2", Value: "held:4", TTLMs: -1},
		}, l.Keys, name)
	}
}

// TestInspectWatchReadOnly records every command one frame sends.
func TestInspectWatchReadOnly(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		name := redistest.Prefix(t) + "seats"
		_, _, steps := watchScenario(t, b, name)
		for _, s := range steps {
			s() // queued, then released: a grace and two latches
		}
		rdb := b.Client(t)
		rec := &recorder{}
		rdb.AddHook(rec)
		f := inspect.ReadFrame(testCtx(t), rdb, name, 1, time.Now())
		require.Empty(t, f.Error)
		require.NotNil(t, f.Grace)
		require.Equal(t, 2, f.Latches.Found)
		allowed := map[string]bool{"hello": true, "client setinfo": true, "client maint_notifications": true,
			"multi": true, "exec": true, "type": true, "hgetall": true,
			"pttl": true, "lrange": true, "zrange": true, "get": true, "time": true, "scan": true}
		require.Contains(t, rec.cmds, "scan")
		for _, c := range rec.cmds {
			assert.True(t, allowed[c], "a frame sent %s", c)
		}
	})
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/cmd/fairlock/internal/inspect"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/multi"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/rwlock"
	"github.com/fairlock-go/fairlock/semaphore"
)

// newClient is a library client on b, closed at the end of t.
func newClient(t *testing.T, b *redistest.Backend) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(b.Client(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// inspectText runs inspect NAME and returns its text and exit code.
func inspectText(t *testing.T, b *redistest.Backend, name string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run([]string{"inspect", name, "--redis", b.Addr}, &out, &errb)
	t.Log("\n" + out.String() + errb.String())
	assert.Empty(t, errb.String())
	// Lines fit in 100 columns, but for a key name that long alone
	// (the tests' names are).
	for _, line := range strings.Split(out.String(), "\n") {
		long := false
		for _, w := range strings.Fields(line) {
			long = long || len(w) > 60
		}
		if !long {
			assert.LessOrEqual(t, len([]rune(line)), 100, "line too wide: %q", line)
		}
	}
	return out.String(), code
}

// inspectJSON runs inspect --json NAME and decodes its report.
func inspectJSON(t *testing.T, b *redistest.Backend, name string) (*inspect.Report, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run([]string{"inspect", "--json", name, "--redis", b.Addr}, &out, &errb)
	var r inspect.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "%s", out.String())
	return &r, code
}

// eventually polls cond for up to 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// background runs f with a ctx cancelled (and waited for) at the end of t:
// a waiter that stays queued while the test inspects.
func background(t *testing.T, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestInspectKindFairSemaphore is issue 30's case: a fair semaphore with 1
// of 1 permits held and 2 waiters queued was shown as a free lock.
func TestInspectKindFairSemaphore(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "windows"
		holderC, w1C, w2C := newClient(t, b), newClient(t, b), newClient(t, b)
		sem, err := semaphore.NewFair(holderC, name)
		require.NoError(t, err)
		require.NoError(t, sem.SetPermits(ctx, 1))
		p, err := sem.Acquire(ctx, 1, time.Minute)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Release(context.Background()) })
		rdb := b.Client(t)
		k := wire.SemFairKeysFor(name)
		for i, c := range []*fairlock.Client{w1C, w2C} {
			s, err := semaphore.NewFair(c, name)
			require.NoError(t, err)
			background(t, func(ctx context.Context) { _, _ = s.Acquire(ctx, 1, 0) })
			eventually(t, "the waiter queued", func() bool { return rdb.HLen(ctx, k.Wants).Val() == int64(i+1) })
		}

		s, code := inspectText(t, b, name)
		assert.Equal(t, 0, code)
		assert.NotContains(t, s, "holder: none (the lock is free)")
		assert.NotContains(t, s, "queue:  empty")
		assert.Regexp(t, `(?m)^fair semaphore "`+regexp.QuoteMeta(name)+`"$`, s)
		assert.Regexp(t, `(?m)^  kind: +fair semaphore`, s)
		assert.Regexp(t, `(?m)^pool:   1 permit, 0 available \(1 held\)$`, s)
		assert.Regexp(t, `(?m)^holder: `+regexp.QuoteMeta(holderC.ID())+`:\d+  permits 1  lease \S+ left$`, s)
		assert.Regexp(t, `(?m)^queue:  2 waiting, head first`, s)
		assert.Regexp(t, `(?m)^  1  `+regexp.QuoteMeta(w1C.ID())+`:\d+ +1 +\d\d:\d\d:\d\d\.\d{3}  +\S+$`, s)
		assert.Regexp(t, `(?m)^  2  `+regexp.QuoteMeta(w2C.ID())+`:\d+ +1 +\d\d:\d\d:\d\d\.\d{3}  +\S+$`, s)
		assert.Regexp(t, `(?m)^token:  \d+`, s)
		assert.Contains(t, s, "problems: none")

		r, code := inspectJSON(t, b, name)
		assert.Equal(t, 0, code)
		assert.True(t, r.Found)
		assert.Equal(t, []string{inspect.KindFairSemaphore}, r.Kinds)
		require.NotNil(t, r.FairSemaphore)
		fs := r.FairSemaphore
		assert.EqualValues(t, 1, fs.Pool)
		assert.True(t, fs.PoolSet)
		assert.EqualValues(t, 0, fs.Available)
		require.Len(t, fs.Holders, 1)
		assert.True(t, strings.HasPrefix(fs.Holders[0].Owner, holderC.ID()+":"))
		assert.EqualValues(t, 1, fs.Holders[0].Count)
		assert.Positive(t, fs.Holders[0].LeaseMs)
		assert.LessOrEqual(t, fs.Holders[0].LeaseMs, int64(60_000))
		require.Len(t, fs.Queue, 2)
		assert.True(t, strings.HasPrefix(fs.Queue[0].Owner, w1C.ID()+":"))
		assert.True(t, strings.HasPrefix(fs.Queue[1].Owner, w2C.ID()+":"))
		assert.LessOrEqual(t, fs.Queue[0].DeadlineMs, fs.Queue[1].DeadlineMs)
		assert.EqualValues(t, 1, fs.Queue[0].Asks)
		assert.True(t, r.OK)
	})
}

func TestInspectKindExpirableSemaphore(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "pool"
		sem, err := semaphore.NewExpirable(newClient(t, b), name)
		require.NoError(t, err)
		ok, err := sem.TrySetPermits(ctx, 3)
		require.NoError(t, err)
		require.True(t, ok)
		leased, err := sem.Acquire(ctx, 1, time.Minute)
		require.NoError(t, err)
		t.Cleanup(func() { _ = leased.Release(context.Background()) })
		watched, err := sem.Acquire(ctx, 1, 0)
		require.NoError(t, err)
		t.Cleanup(func() { _ = watched.Release(context.Background()) })

		s, code := inspectText(t, b, name)
		assert.Equal(t, 0, code)
		assert.NotContains(t, s, "holder: none (the lock is free)")
		assert.Regexp(t, `(?m)^permit-expirable semaphore "`+regexp.QuoteMeta(name)+`"$`, s)
		assert.Regexp(t, `(?m)^  kind: +permit-expirable semaphore`, s)
		assert.Regexp(t, `(?m)^pool:   3 permits: 1 available, 2 acquired$`, s)
		for _, id := range append(leased.IDs(), watched.IDs()...) {
			assert.Regexp(t, `(?m)^permit: `+id+`  lease \S+ left$`, s)
		}
		assert.Regexp(t, `(?m)^token:  \d+`, s)
		assert.Contains(t, s, "problems: none")

		r, code := inspectJSON(t, b, name)
		assert.Equal(t, 0, code)
		assert.Equal(t, []string{inspect.KindExpirableSemaphore}, r.Kinds)
		require.NotNil(t, r.ExpirableSemaphore)
		es := r.ExpirableSemaphore
		assert.EqualValues(t, 1, es.Available)
		assert.EqualValues(t, 2, es.Acquired)
		require.Len(t, es.Permits, 2)
		ids := []string{es.Permits[0].ID, es.Permits[1].ID}
		assert.ElementsMatch(t, append(leased.IDs(), watched.IDs()...), ids)
		for _, p := range es.Permits {
			assert.Positive(t, p.LeaseMs)
			assert.LessOrEqual(t, p.LeaseMs, int64(60_000))
		}
		assert.True(t, r.OK)
	})
}

func TestInspectKindRWLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "doc"
		c1, c2 := newClient(t, b), newClient(t, b)
		rw1, err := rwlock.New(c1, name)
		require.NoError(t, err)
		rw2, err := rwlock.New(c2, name)
		require.NoError(t, err)
		require.NoError(t, rw1.ReadLock().Lock(ctx))
		require.NoError(t, rw1.ReadLock().Lock(ctx))
		require.NoError(t, rw2.ReadLock().Lock(ctx))
		t.Cleanup(func() {
			_ = rw1.ReadLock().Unlock(context.Background())
			_ = rw1.ReadLock().Unlock(context.Background())
			_ = rw2.ReadLock().Unlock(context.Background())
		})

		s, code := inspectText(t, b, name)
		assert.Equal(t, 0, code)
		assert.NotContains(t, s, "holder: none (the lock is free)")
		assert.Regexp(t, `(?m)^read-write lock "`+regexp.QuoteMeta(name)+`"$`, s)
		assert.Regexp(t, `(?m)^  kind: +read-write lock`, s)
		assert.Regexp(t, `(?m)^mode:   read  lease \S+ left$`, s)
		assert.Regexp(t, `(?m)^reader: `+regexp.QuoteMeta(rw1.ReadLock().Owner())+`  holds 2  leases \S+, \S+ left$`, s)
		assert.Regexp(t, `(?m)^reader: `+regexp.QuoteMeta(rw2.ReadLock().Owner())+`  holds 1  leases \S+ left$`, s)
		assert.Contains(t, s, "problems: none")

		r, code := inspectJSON(t, b, name)
		assert.Equal(t, 0, code)
		assert.Equal(t, []string{inspect.KindRWLock}, r.Kinds)
		require.NotNil(t, r.RWLock)
		assert.Equal(t, "read", r.RWLock.Mode)
		require.Len(t, r.RWLock.Holders, 2)
		assert.Positive(t, r.RWLock.LeaseMs)
		assert.True(t, r.OK)
	})
}

func TestInspectKindRWLockWrite(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "doc"
		rw, err := rwlock.New(newClient(t, b), name)
		require.NoError(t, err)
		require.NoError(t, rw.WriteLock().Lock(ctx))
		t.Cleanup(func() { _ = rw.WriteLock().Unlock(context.Background()) })

		s, code := inspectText(t, b, name)
		assert.Equal(t, 0, code)
		assert.Regexp(t, `(?m)^mode:   write  lease \S+ left$`, s)
		assert.Regexp(t, `(?m)^writer: `+regexp.QuoteMeta(rw.WriteLock().Owner())+`  holds 1$`, s)
		assert.Contains(t, s, "problems: none")
	})
}

func TestInspectKindSeats(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		venue := redistest.Prefix(t) + "hall"
		seat := func(s string) string { return "{" + venue + "}:" + s }
		c1, c2 := newClient(t, b), newClient(t, b)
		h1, err := multi.NewSeats(c1, seat("1A"), seat("1B"))
		require.NoError(t, err)
		hold, err := h1.Acquire(ctx, time.Minute)
		require.NoError(t, err)
		t.Cleanup(func() { _ = hold.Release(context.Background()) })
		h2, err := multi.NewSeats(c2, seat("1B"), seat("1C"))
		require.NoError(t, err)
		background(t, func(ctx context.Context) { _, _ = h2.Acquire(ctx, 0) })
		rdb := b.Client(t)
		k := wire.SeatsKeysFor(venue)
		eventually(t, "the second request queued", func() bool { return rdb.HLen(ctx, k.Req).Val() == 2 })

		for _, name := range []string{seat("1B"), venue} {
			s, code := inspectText(t, b, name)
			assert.Equal(t, 0, code)
			assert.NotContains(t, s, "holder: none (the lock is free)")
			assert.Regexp(t, `(?m)^seat venue "`+regexp.QuoteMeta(venue)+`"`, s)
			assert.Regexp(t, `(?m)^  kind: +seat venue`, s)
			assert.Regexp(t, `(?m)^holder: `+regexp.QuoteMeta(c1.ID())+`:\d+  seats 2  lease \S+ left$`, s)
			assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(seat("1A"))+`\n    holder: `+regexp.QuoteMeta(c1.ID())+`:\d+\n    queue:  empty$`, s)
			assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(seat("1B"))+`\n    holder: `+regexp.QuoteMeta(c1.ID())+`:\d+\n    queue:  `+
				regexp.QuoteMeta(c2.ID())+`:\d+$`, s)
			assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(seat("1C"))+`\n    holder: none \(free\)\n    queue:  `+regexp.QuoteMeta(c2.ID())+`:\d+$`, s)
			assert.Regexp(t, `(?m)^waiting: 1 request$`, s)
			assert.Contains(t, s, "problems: none")
		}

		r, code := inspectJSON(t, b, seat("1B"))
		assert.Equal(t, 0, code)
		assert.Equal(t, []string{inspect.KindSeats}, r.Kinds)
		require.NotNil(t, r.Seats)
		assert.Equal(t, venue, r.Seats.Venue)
		require.Len(t, r.Seats.Holders, 1)
		assert.Equal(t, []string{seat("1A"), seat("1B")}, r.Seats.Holders[0].Seats)
		assert.Positive(t, r.Seats.Holders[0].LeaseMs)
		require.Len(t, r.Seats.Waiting, 1)
		assert.Equal(t, []string{seat("1B"), seat("1C")}, r.Seats.Waiting[0].Seats)
		assert.True(t, r.OK)

		// A seat of the venue that nobody holds or waits for is no such
		// lock, with a hint at the venue.
		s, code := inspectText(t, b, seat("9Z"))
		assert.Equal(t, 4, code)
		assert.Contains(t, s, "no such lock")
		assert.Contains(t, strings.Join(strings.Fields(s), " "), fmt.Sprintf("its seat venue %q has state", venue))
		r, code = inspectJSON(t, b, seat("9Z"))
		assert.Equal(t, 4, code)
		assert.False(t, r.Found)
		assert.Equal(t, venue, r.Venue)
	})
}

// TestInspectKindLocks: the lock kinds say which they are.
func TestInspectKindLocks(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b)
		p := redistest.Prefix(t)

		re, err := reentrant.New(c, p+"re")
		require.NoError(t, err)
		require.NoError(t, re.Lock(ctx))
		require.NoError(t, re.Lock(ctx))
		t.Cleanup(func() { _ = re.Unlock(context.Background()); _ = re.Unlock(context.Background()) })
		s, code := inspectText(t, b, p+"re")
		assert.Equal(t, 0, code)
		assert.Regexp(t, `(?m)^  kind: +reentrant lock`, s)
		assert.Regexp(t, `(?m)^holder: `+regexp.QuoteMeta(re.Owner())+`  holds 2  lease \S+ left$`, s)

		fe, err := fenced.New(c, p+"fe")
		require.NoError(t, err)
		tok, err := fe.LockAndGetToken(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = fe.Unlock(context.Background()) })
		s, code = inspectText(t, b, p+"fe")
		assert.Equal(t, 0, code)
		assert.Regexp(t, `(?m)^  kind: +fenced lock, or a fair lock with nobody queued`, s)
		assert.Regexp(t, `(?m)^token:  `+strconv.FormatInt(tok, 10)+`$`, s)

		for _, e := range []struct {
			engine fair.Engine
			label  string
		}{{fair.Redisson, "redisson"}, {fair.Scalable, "scalable"}} {
			name := p + "fair-" + e.label
			m, err := fair.New(c, name, fair.WithEngine(e.engine))
			require.NoError(t, err)
			require.NoError(t, m.Lock(ctx))
			t.Cleanup(func() { _ = m.Unlock(context.Background()) })
			wc := newClient(t, b)
			w, err := fair.New(wc, name, fair.WithEngine(e.engine))
			require.NoError(t, err)
			background(t, func(ctx context.Context) { _ = w.Lock(ctx) })
			rdb := b.Client(t)
			k := wire.KeysFor(name)
			eventually(t, "the waiter queued", func() bool {
				return rdb.LLen(ctx, k.Queue).Val()+rdb.HLen(ctx, k.ScalableQueue()).Val() > 0
			})
			s, code = inspectText(t, b, name)
			assert.Equal(t, 0, code)
			assert.Regexp(t, `(?m)^  kind: +fair lock \(queue engine: `+e.label+`\)`, s)
			assert.Regexp(t, `(?m)^holder: `+regexp.QuoteMeta(m.Owner())+`  holds 1  lease \S+ left$`, s)
			// this library's waiter, with an acquisition request: a
			// release grants it the lock (fairlock_notes or s:<owner>)
			assert.Regexp(t, `(?m)^  1  `+regexp.QuoteMeta(w.Owner())+` +\d\d:\d\d:\d\d\.\d{3}  +\S+ +granted$`, s)
			r, _ := inspectJSON(t, b, name)
			assert.Equal(t, []string{inspect.KindLock}, r.Kinds)
			assert.Equal(t, e.label, r.Engine)
		}
	})
}

// TestInspectTwoKinds: a name with keys of two kinds shows both.
func TestInspectTwoKinds(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		c := newClient(t, b)
		name := redistest.Prefix(t) + "both"
		m, err := reentrant.New(c, name)
		require.NoError(t, err)
		require.NoError(t, m.Lock(ctx))
		t.Cleanup(func() { _ = m.Unlock(context.Background()) })
		sem, err := semaphore.NewFair(c, name)
		require.NoError(t, err)
		require.NoError(t, sem.SetPermits(ctx, 2))

		s, code := inspectText(t, b, name)
		assert.Equal(t, 0, code)
		assert.Regexp(t, `(?m)^"`+regexp.QuoteMeta(name)+`" has keys of 2 kinds: lock, fair semaphore`, s)
		assert.Regexp(t, `(?m)^lock "`+regexp.QuoteMeta(name)+`"$`, s)
		assert.Regexp(t, `(?m)^holder: `+regexp.QuoteMeta(m.Owner())+`  holds 1`, s)
		assert.Regexp(t, `(?m)^fair semaphore "`+regexp.QuoteMeta(name)+`"$`, s)
		assert.Regexp(t, `(?m)^pool:   2 permits, 2 available \(0 held\)$`, s)
		r, _ := inspectJSON(t, b, name)
		assert.Equal(t, []string{inspect.KindLock, inspect.KindFairSemaphore}, r.Kinds)
	})
}

// TestInspectNoSuchLock: a name with no key of any kind is said to be so,
// with its own exit code, in text, JSON and --watch.
func TestInspectNoSuchLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		name := redistest.Prefix(t) + "windows"
		sem, err := semaphore.NewFair(newClient(t, b), name)
		require.NoError(t, err)
		require.NoError(t, sem.SetPermits(ctx, 1))
		misspelled := name[:len(name)-1]

		s, code := inspectText(t, b, misspelled)
		assert.Equal(t, 4, code)
		assert.Equal(t, `lock "`+misspelled+`": no such lock (no key of any kind this library writes)`,
			strings.Join(strings.Fields(s), " "))
		assert.NotContains(t, s, "holder:")

		r, code := inspectJSON(t, b, misspelled)
		assert.Equal(t, 4, code)
		assert.False(t, r.Found)
		assert.Empty(t, r.Kinds)

		out := &frameWriter{}
		var errb bytes.Buffer
		code = run([]string{"inspect", misspelled, "--redis", b.Addr, "--watch", "--count", "1"}, out, &errb)
		assert.Equal(t, 4, code, "stderr: %s", errb.String())
		assert.Contains(t, out.String(), "no such lock")
	})
}

// kindStates makes one live state of each kind other than the lock, each
// under its own name, through the public API; it returns name by kind.
func kindStates(t *testing.T, b *redistest.Backend) map[string]string {
	t.Helper()
	ctx := testCtx(t)
	c := newClient(t, b)
	p := redistest.Prefix(t)
	names := map[string]string{inspect.KindFairSemaphore: p + "fs", inspect.KindExpirableSemaphore: p + "es",
		inspect.KindRWLock: p + "rw", inspect.KindSeats: "{" + p + "venue}:1A"}
	fs, err := semaphore.NewFair(c, names[inspect.KindFairSemaphore])
	require.NoError(t, err)
	require.NoError(t, fs.SetPermits(ctx, 1))
	fp, err := fs.Acquire(ctx, 1, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fp.Release(context.Background()) })
	es, err := semaphore.NewExpirable(c, names[inspect.KindExpirableSemaphore])
	require.NoError(t, err)
	require.NoError(t, es.SetPermits(ctx, 2))
	ep, err := es.Acquire(ctx, 1, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ep.Release(context.Background()) })
	rw, err := rwlock.New(c, names[inspect.KindRWLock])
	require.NoError(t, err)
	require.NoError(t, rw.ReadLock().Lock(ctx))
	t.Cleanup(func() { _ = rw.ReadLock().Unlock(context.Background()) })
	st, err := multi.NewSeats(c, names[inspect.KindSeats], "{"+p+"venue}:1B")
	require.NoError(t, err)
	sh, err := st.Acquire(ctx, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sh.Release(context.Background()) })
	return names
}

// TestInspectKindsReadOnly records every command the inspector and one
// watch frame send for each kind: reads only.
func TestInspectKindsReadOnly(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		names := kindStates(t, b)
		allowed := map[string]bool{"hello": true, "client setinfo": true, "client maint_notifications": true,
			"multi": true, "exec": true, "type": true, "hgetall": true,
			"pttl": true, "lrange": true, "zrange": true, "get": true, "time": true, "scan": true}
		for kind, name := range names {
			rdb := b.Client(t)
			rec := &recorder{}
			rdb.AddHook(rec)
			f := inspect.ReadFrame(testCtx(t), rdb, name, 1, time.Now())
			require.Empty(t, f.Error, kind)
			assert.Equal(t, []string{kind}, f.Kinds)
			assert.True(t, f.OK, "%s: %+v", kind, f.Problems)
			require.NotNil(t, f.Latches, kind)
			assert.Positive(t, f.Latches.Found, "%s: the acquisition's latch", kind)
			for _, c := range rec.cmds {
				assert.True(t, allowed[c], "%s: a frame sent %s", kind, c)
			}
		}
	})
}

// TestInspectWatchKinds: --watch shows the kind and its latch keys (the
// fair semaphore's and the venue's have names of their own).
func TestInspectWatchKinds(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		names := kindStates(t, b)
		for kind, name := range names {
			out := &frameWriter{}
			var errb bytes.Buffer
			code := run([]string{"inspect", name, "--redis", b.Addr, "--watch", "--count", "1", "--json"}, out, &errb)
			require.Equal(t, 0, code, "%s: %s", kind, errb.String())
			var f inspect.Frame
			require.NoError(t, json.Unmarshal(out.buf.Bytes(), &f))
			assert.Equal(t, []string{kind}, f.Kinds)
			require.NotNil(t, f.Latches)
			require.NotEmpty(t, f.Latches.Keys, kind)
			l := f.Latches.Keys[0]
			assert.Equal(t, inspect.AcquireLatch, l.Kind, kind)
			assert.Regexp(t, `^held`, l.Value, kind)
			switch kind {
			case inspect.KindFairSemaphore:
				assert.Equal(t, wire.SemFairKeysFor(name).AcquireLatch(l.RequestID), l.Key)
			case inspect.KindSeats:
				assert.Equal(t, wire.SeatsKeysFor(wire.Venue(name)).AcquireLatch(l.RequestID), l.Key)
			default:
				assert.Equal(t, wire.KeysFor(name).AcquireLatch(l.RequestID), l.Key)
			}

			out = &frameWriter{}
			code = run([]string{"inspect", name, "--redis", b.Addr, "--watch", "--count", "1"}, out, &errb)
			require.Equal(t, 0, code, "%s: %s", kind, errb.String())
			assert.Regexp(t, `(?m)^  kind:   `, out.String())
			assert.Regexp(t, `(?m)^latches: 1 \(0 unlock, 1 acquire\)$`, out.String())
		}
	})
}

// TestInspectKindsInconsistencies breaks each kind's state by hand and
// checks that the inspector names what is wrong.
func TestInspectKindsInconsistencies(t *testing.T) {
	cases := []struct {
		kind   string
		name   string
		break_ func(ctx context.Context, rdb *redis.Client, name string)
		codes  []string
		exit   int
	}{
		{inspect.KindFairSemaphore, "lease deleted", func(ctx context.Context, rdb *redis.Client, name string) {
			rdb.Del(ctx, wire.SemFairKeysFor(name).Leases)
		}, []string{"holder-no-lease"}, 3},
		{inspect.KindFairSemaphore, "pool shrunk", func(ctx context.Context, rdb *redis.Client, name string) {
			rdb.Set(ctx, wire.SemFairKeysFor(name).Permits, "0", 0)
		}, []string{"over-pool"}, 0},
		{inspect.KindExpirableSemaphore, "pool not a count", func(ctx context.Context, rdb *redis.Client, name string) {
			rdb.Set(ctx, name, "many", 0)
		}, []string{"bad-pool"}, 3},
		{inspect.KindRWLock, "write mode without writer", func(ctx context.Context, rdb *redis.Client, name string) {
			rdb.HSet(ctx, name, "mode", "write")
		}, []string{"write-no-writer"}, 3},
		{inspect.KindSeats, "seat holders deleted", func(ctx context.Context, rdb *redis.Client, name string) {
			rdb.Del(ctx, wire.SeatsKeysFor(wire.Venue(name)).Seat)
		}, []string{"seat-count"}, 3},
	}
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, tc := range cases {
			t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
				names := kindStates(t, b)
				name := names[tc.kind]
				tc.break_(testCtx(t), b.Client(t), name)
				r, code := inspectJSON(t, b, name)
				assert.Equal(t, tc.exit, code)
				var got []string
				for _, p := range r.Problems {
					got = append(got, p.Code)
				}
				assert.ElementsMatch(t, tc.codes, got, "problems: %+v", r.Problems)
				s, _ := inspectText(t, b, name)
				for _, c := range tc.codes {
					assert.Contains(t, s, c+":")
				}
			})
		}
	})
}

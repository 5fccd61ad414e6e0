package multi_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fenced"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/multi"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/rwlock"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

func newClient(t testing.TB, rdb redis.UniversalClient, opts ...fairlock.Option) *fairlock.Client {
	t.Helper()
	c, err := fairlock.NewClient(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testCtx bounds a test: a wait that never ends fails the test instead of
// hanging it.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// kind makes a lock handle of one kind.
type kind struct {
	name string
	make func(t testing.TB, c *fairlock.Client, name string) multi.Member
}

var kinds = []kind{
	{"reentrant", func(t testing.TB, c *fairlock.Client, name string) multi.Member {
		m, err := reentrant.New(c, name)
		require.NoError(t, err)
		return m
	}},
	{"fair", func(t testing.TB, c *fairlock.Client, name string) multi.Member {
		m, err := fair.New(c, name)
		require.NoError(t, err)
		return m
	}},
	{"fenced", func(t testing.TB, c *fairlock.Client, name string) multi.Member {
		m, err := fenced.New(c, name)
		require.NoError(t, err)
		return m
	}},
	{"rwlock-write", func(t testing.TB, c *fairlock.Client, name string) multi.Member {
		rw, err := rwlock.New(c, name)
		require.NoError(t, err)
		return rw.WriteLock()
	}},
}

// handles makes one handle of kind k on each name.
func handles(t testing.TB, k kind, c *fairlock.Client, names []string) []multi.Member {
	out := make([]multi.Member, len(names))
	for i, n := range names {
		out[i] = k.make(t, c, n)
	}
	return out
}

func reversed[T any](s []T) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func newMulti(t testing.TB, ms ...multi.Member) *multi.MultiLock {
	t.Helper()
	l, err := multi.New(ms...)
	require.NoError(t, err)
	return l
}

// names returns n lock names under one test prefix, on different slots.
func names(t testing.TB, n int) []string {
	p := redistest.Prefix(t)
	out := make([]string, n)
	for i := range out {
		out[i] = p + string(rune('a'+i))
	}
	return out
}

// locked reports which of names are locked, seen through fresh reentrant
// handles of c.
func locked(t testing.TB, ctx context.Context, c *fairlock.Client, names []string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		m, err := reentrant.New(c, n)
		require.NoError(t, err)
		ok, err := m.IsLocked(ctx)
		require.NoError(t, err)
		if ok {
			out = append(out, n)
		}
	}
	return out
}

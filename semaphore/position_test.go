package semaphore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/semaphore"
)

// The acquisition script's position reply, request by request, against the
// arrival order: joins one by one, a give-up in the middle (its gap counts
// until the head passes it: the fair semaphore's queue is the scalable
// engine's) and at the tail, a join after them, a grant.
func TestFairPositionReplyFollowsArrivalOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		f, _ := newFair(t, b, 1)
		k := wire.SemFairKeysFor(f.Name())
		set := wire.SemFairDefault()
		arg := func(owner string) wire.SemArgs {
			return wire.SemArgs{Owner: owner, Permits: 1, LeaseMs: 60_000, WaitMs: 60_000, GraceMs: 5000, Queue: true, Position: true}
		}
		try := func(owner string) wire.SemAcquireResult {
			t.Helper()
			r, err := set.Acquire(ctx, rdb, k, arg(owner))
			require.NoError(t, err)
			return r
		}
		require.True(t, try("holder:1").Granted)
		owners := []string{"w:1", "w:2", "w:3", "w:4", "w:5"}
		for i, o := range owners {
			r := try(o)
			require.False(t, r.Granted)
			assert.Equal(t, wire.Ahead{Ahead: int64(i), Joined: true}, r.Ahead, "%s joins behind %d", o, i)
		}
		for i, o := range owners {
			assert.Equal(t, wire.Ahead{Ahead: int64(i)}, try(o).Ahead, "%s tries again", o)
		}
		for _, o := range []string{"w:2", "w:5"} { // from the middle, from the tail
			_, err := set.Leave(ctx, rdb, k, arg(o))
			require.NoError(t, err)
		}
		assert.Equal(t, int64(0), try("w:1").Ahead.Ahead)
		assert.Equal(t, int64(2), try("w:3").Ahead.Ahead, "w:2's gap counts until the head passes it")
		assert.Equal(t, int64(3), try("w:4").Ahead.Ahead)
		assert.Equal(t, wire.Ahead{Ahead: 4, Joined: true}, try("w:6").Ahead, "no gap at the tail")

		released, err := set.Release(ctx, rdb, k, wire.SemArgs{Owner: "holder:1"})
		require.NoError(t, err)
		require.True(t, released)
		require.True(t, try("w:1").Granted)
		for i, o := range []string{"w:3", "w:4", "w:6"} {
			assert.Equal(t, int64(i), try(o).Ahead.Ahead, "%s after the grant", o)
		}
		// without the flag: the plain reply
		a := arg("w:6")
		a.Position = false
		r, err := set.Acquire(ctx, rdb, k, a)
		require.NoError(t, err)
		assert.Equal(t, int64(-1), r.Ahead.Ahead)
		assert.Equal(t, 3, state(t, f).Queued, "w:3, w:4 and w:6 are queued (State reads the length in O(1))")
	})
}

// Through the API: requests queue one by one with a position callback; each
// one's first report is its arrival rank; as the permit passes from one to
// the next, each reports being the head before it is granted; no report
// goes up; an ETA appears once the queue moved.
func TestFairPositionCallback(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		f, _ := newFair(t, b, 1)
		first, err := f.Acquire(ctx, 1, 0)
		require.NoError(t, err)
		const n = 4
		var mu sync.Mutex
		reports := make([][]fairlock.Position, n)
		all := func(i int) []fairlock.Position {
			mu.Lock()
			defer mu.Unlock()
			return append([]fairlock.Position(nil), reports[i]...)
		}
		chs := make([]chan acquired, n)
		for i := range n {
			chs[i] = make(chan acquired, 1)
			go func() {
				p, err := f.AcquireWith(ctx, 1, semaphore.AcquireOptions{Wait: semaphore.Forever, Position: func(p fairlock.Position) {
					mu.Lock()
					reports[i] = append(reports[i], p)
					mu.Unlock()
				}})
				chs[i] <- acquired{p, err}
			}()
			eventually(t, "the first report", func() bool { return len(all(i)) > 0 })
			r := all(i)[0]
			assert.Equal(t, i, r.Ahead, "request %d joins behind %d", i, i)
			assert.True(t, r.Joined)
		}
		held := first
		for i := range n {
			// request i reports being the head while the permit is held
			eventually(t, "the head's report", func() bool {
				r := all(i)
				return r[len(r)-1].Ahead == 0
			})
			require.NoError(t, held.Release(ctx))
			held = got(t, chs[i])
		}
		require.NoError(t, held.Release(ctx))
		for i := range n {
			r := all(i)
			for j := 1; j < len(r); j++ {
				assert.False(t, r[j].Joined, "request %d: report %d says joined again", i, j)
				assert.LessOrEqual(t, r[j].Ahead, r[j-1].Ahead, "request %d: position went up: %v", i, r)
			}
			if i > 0 {
				assert.Positive(t, r[len(r)-1].ETA, "request %d saw the queue move", i)
			}
		}
	})
}

package lockstate_test

import (
	"context"
	"os"
	"testing"
	"time"

	_ "github.com/fairlock-go/fairlock/lua" // the script sources

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/lockstate"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/internal/wire"
	"github.com/fairlock-go/fairlock/model"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// queueUp runs set's waiting script once per owner, as Lock's first attempt:
// the first takes the free lock, the others queue with a slot of slotMs.
func queueUp(t *testing.T, rdb *redis.Client, set wire.FairSet, name string, slotMs int64, owners ...string) {
	t.Helper()
	for i, o := range owners {
		ok, _, err := set.TryLockWait(testCtx(t), rdb, wire.KeysFor(name), wire.Args{
			Owner: o, LeaseMs: 30_000, WaitMs: slotMs, NowMs: time.Now().UnixMilli(), GraceMs: 5000})
		require.NoError(t, err)
		require.Equal(t, i == 0, ok, "%s", o)
	}
}

func TestGraceMargin(t *testing.T) {
	assert.Equal(t, model.GraceMargin, int64(lockstate.GraceMarginMs))
}

func TestFreeLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		s, err := lockstate.Read(testCtx(t), b.Client(t), redistest.Prefix(t)+"seats")
		require.NoError(t, err)
		assert.False(t, s.Locked)
		owner, n := s.Holder()
		assert.Equal(t, "", owner)
		assert.Zero(t, n)
		assert.Zero(t, s.LeaseMs)
		assert.Empty(t, s.Queue)
		assert.Equal(t, "", s.Engine)
		assert.False(t, s.HasToken)
		assert.Equal(t, lockstate.Grace{}, s.Grace)
		assert.Empty(t, s.Problems)
		assert.True(t, s.OK)
	})
}

// engines are the fair lock's two engines, by the name State.Engine gives.
var engines = []struct {
	name string
	set  wire.FairSet
}{{lockstate.Redisson, wire.Default().Fair()}, {lockstate.Scalable, wire.ScalableDefault().Fair()}}

func TestBothEngines(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				rdb := b.Client(t)
				name := redistest.Prefix(t) + "{seats}:1"
				const slot = 120_000
				queueUp(t, rdb, e.set, name, slot, "h:1", "w:1", "w:2", "w:3")
				s, err := lockstate.Read(testCtx(t), rdb, name)
				require.NoError(t, err)
				assert.Equal(t, e.name, s.Engine)
				assert.True(t, s.Locked)
				owner, n := s.Holder()
				assert.Equal(t, "h:1", owner)
				assert.EqualValues(t, 1, n)
				assert.Equal(t, map[string]int64{"h:1": 1}, s.Holds())
				assert.Positive(t, s.LeaseMs)
				assert.LessOrEqual(t, s.LeaseMs, int64(30_000))
				assert.Equal(t, []string{"w:1", "w:2", "w:3"}, s.Owners())
				assert.True(t, s.Queued("w:2"))
				assert.False(t, s.Queued("h:1"))
				d := s.Deadlines()
				require.Len(t, d, 3)
				assert.EqualValues(t, slot, d["w:2"]-d["w:1"])
				assert.EqualValues(t, slot, d["w:3"]-d["w:2"])
				for i, w := range s.Queue {
					assert.Equal(t, i+1, w.Position)
					assert.Equal(t, w.DeadlineMs-s.NowMs, w.LeftMs)
				}
				assert.True(t, s.HasToken, "a take of the fair lock INCRs the token")
				assert.EqualValues(t, 1, s.Token)
				assert.Empty(t, s.Problems)
				assert.True(t, s.OK)
				assert.Equal(t, wire.KeysFor(name).Grace(), s.Keys.Grace)

				// The holder leaves: the head gets the grace.
				_, err = e.set.Unlock(testCtx(t), rdb, wire.KeysFor(name), wire.Args{Owner: "h:1", LeaseMs: 30_000,
					NowMs: time.Now().UnixMilli(), RequestID: "r1", LatchMs: 1000, GraceMs: 5000})
				require.NoError(t, err)
				s, err = lockstate.Read(testCtx(t), rdb, name)
				require.NoError(t, err)
				assert.False(t, s.Locked)
				assert.Equal(t, "w:1", s.Grace.Owner)
				assert.False(t, s.Grace.Second)
				assert.Positive(t, s.Grace.LeftMs)
				assert.LessOrEqual(t, s.Grace.LeftMs, int64(5000))
				assert.Equal(t, s.Grace.PTTLMs-lockstate.GraceMarginMs, s.Grace.LeftMs)
				assert.True(t, s.Has("free-with-queue"))
				assert.True(t, s.OK, "a warning only: %v", s.Problems)
			})
		})
	}
}

func TestProblems(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rdb := b.Client(t)
		name := redistest.Prefix(t) + "seats"
		k := wire.KeysFor(name)
		queueUp(t, rdb, wire.Default().Fair(), name, 60_000, "h:1", "w:1")
		require.NoError(t, rdb.HSet(ctx, k.Name, "other:1", "x").Err())
		require.NoError(t, rdb.ZAdd(ctx, k.Timeouts, redis.Z{Score: 1, Member: "ghost:1"}).Err())
		require.NoError(t, rdb.Set(ctx, k.Token(), "not a number", 0).Err())
		s, err := lockstate.Read(ctx, rdb, name)
		require.NoError(t, err)
		var codes []string
		for _, p := range s.Problems {
			codes = append(codes, p.Code)
		}
		assert.Equal(t, []string{"bad-hold-count", "many-holders", "deadline-not-queued"}, codes)
		assert.False(t, s.OK)
		assert.Equal(t, []lockstate.Holder{{Owner: "h:1", HoldCount: 1}, {Owner: "other:1", Raw: "x"}}, s.Holders)
		require.Len(t, s.Unqueued, 1)
		assert.Equal(t, lockstate.Waiter{Owner: "ghost:1", HasDeadline: true, DeadlineMs: 1, LeftMs: 1 - s.NowMs}, s.Unqueued[0])
		assert.Contains(t, s.Deadlines(), "ghost:1")
		assert.False(t, s.HasToken)

		require.NoError(t, rdb.Del(ctx, k.Queue).Err())
		require.NoError(t, rdb.Set(ctx, k.Queue, "x", 0).Err())
		s, err = lockstate.Read(ctx, rdb, name)
		require.NoError(t, err)
		assert.True(t, s.Has("wrong-type"))
		_, err = lockstate.Read(ctx, rdb, "a{b")
		assert.ErrorIs(t, err, wire.ErrInvalidName)
	})
}

// A waiter that joined with a handoff note (this library's client, with an
// acquisition request) is marked; one that joined without a request, or a
// Java client's (a version-4 id) on the Redisson engine, is not.
func TestHandoffNotes(t *testing.T) {
	const lib = "0000000c-0000-8000-8000-00000000000c:1" // version 8: this library's
	const java = "0000000d-0000-4000-8000-00000000000d:1"
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				rdb := b.Client(t)
				name := redistest.Prefix(t) + "{seats}:notes"
				queueUp(t, rdb, e.set, name, 60_000, "h:1")
				join := func(owner, req string) {
					a := wire.Args{Owner: owner, LeaseMs: 30_000, WaitMs: 60_000, NowMs: time.Now().UnixMilli(), GraceMs: 5000}
					if req != "" {
						a.AcquireID, a.LatchMs = req, 60_000
					}
					ok, _, err := e.set.TryLockWait(testCtx(t), rdb, wire.KeysFor(name), a)
					require.NoError(t, err)
					require.False(t, ok)
				}
				join(lib, "a1")
				join(java, "a2")
				join("0000000c-0000-8000-8000-00000000000c:2", "") // no request: no grant to wait for
				s, err := lockstate.Read(testCtx(t), rdb, name)
				require.NoError(t, err)
				require.Len(t, s.Queue, 3)
				assert.True(t, s.Queue[0].Handoff, "this library's waiter with a request")
				// The Redisson engine keeps notes only for version-8 ids
				// (Java's waiters read every message as a number); the
				// scalable engine has no Java waiters.
				assert.Equal(t, e.name == lockstate.Scalable, s.Queue[1].Handoff, "a version-4 id with a request")
				assert.False(t, s.Queue[2].Handoff, "a waiter without a request")
				assert.Equal(t, "fairlock_notes:"+name, s.Keys.Notes, "the name has a hash tag: kept as it is")
				assert.True(t, s.OK, "%v", s.Problems)
			})
		})
	}
}

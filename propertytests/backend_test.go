package propertytests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/model"
)

// A backend is a Redis the machines run the scripts on. Each rapid sequence
// gets a fresh run: its own lock name (and on miniredis its own server).
type backend interface {
	// start prepares one sequence: a client and a lock name no other
	// sequence uses.
	start(t *rapid.T) (rdb *redis.Client, lockName string, clock serverClock)
	// unit is the granularity of every duration the machines draw, in ms.
	unit() int64
	// tolerance is how much lower than the model a value that comes from
	// the server's clock (PTTL, and deadlines computed from it) may be,
	// exclusive: 0 means exact.
	tolerance() int64
}

// serverClock moves a run's server clock forward by d ms: keys whose
// expiry comes within d are gone afterwards, the others have d less to go.
type serverClock func(ctx context.Context, d int64) error

// miniBackend is miniredis: a new server per sequence, whose clock only
// moves by FastForward, so every value is compared exactly.
type miniBackend struct{}

func (miniBackend) start(t *rapid.T) (*redis.Client, string, serverClock) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatalf("miniredis: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close(); m.Close() })
	return rdb, "lock", func(_ context.Context, d int64) error {
		m.FastForward(time.Duration(d) * time.Millisecond)
		return nil
	}
}

func (miniBackend) unit() int64      { return 1 }
func (miniBackend) tolerance() int64 { return 0 }

// realBackend is a real redis-server shared by all sequences. Its clock
// cannot be moved, so the machines draw durations in units of realUnit and
// moving the clock by d rewrites every key's expiry to PTTL - d (deleting
// keys with PTTL <= d), atomically. Values read from the server's clock then
// lag the model only by the real time elapsed since they were set, which
// must stay below realUnit: a sequence takes milliseconds.
type realBackend struct {
	rdb *redis.Client
}

const realUnit = 10_000

func newRealBackend(t testing.TB) realBackend {
	b := redistest.Real(t)
	return realBackend{rdb: b.Client(t)}
}

var fastForwardScript = redis.NewScript(`
local d = tonumber(ARGV[1])
for _, k in ipairs(redis.call('keys', ARGV[2])) do
    local p = redis.call('pttl', k)
    if p > 0 then
        if p <= d then
            redis.call('del', k)
        else
            redis.call('pexpire', k, p - d)
        end
    end
end
return 0`)

func (b realBackend) start(t *rapid.T) (*redis.Client, string, serverClock) {
	var r [6]byte
	_, _ = rand.Read(r[:])
	name := "pt:" + hex.EncodeToString(r[:]) + ":lock"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := b.rdb.Keys(ctx, "*"+name+"*").Result()
		if len(keys) > 0 {
			_ = b.rdb.Del(ctx, keys...).Err()
		}
	})
	return b.rdb, name, func(ctx context.Context, d int64) error {
		return fastForwardScript.Run(ctx, b.rdb, nil, d, "*"+name+"*").Err()
	}
}

func (realBackend) unit() int64      { return realUnit }
func (realBackend) tolerance() int64 { return realUnit }

// dumpGrace reads the head grace key into l: the owner it names and when
// it expires (server clock); it must expire.
func dumpGrace(l *model.Lock, grace *redis.StringCmd, pttl *redis.DurationCmd, server int64) error {
	owner, err := grace.Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		return err
	}
	if pttl.Val() <= 0 {
		return fmt.Errorf("the head grace key %q has no expiry (%v)", owner, pttl.Val())
	}
	l.GraceSecond = strings.HasPrefix(owner, "+")
	l.GraceOwner, l.GraceEnd = strings.TrimPrefix(owner, "+"), server+pttl.Val().Milliseconds()
	return nil
}

// subscriber collects every message published on the lock's channels (the
// lock channel and every fair waiter channel) with one pattern subscription.
type subscriber struct {
	rdb  *redis.Client
	ps   *redis.PubSub
	sync string
	seq  int
}

func subscribe(t *rapid.T, rdb *redis.Client, names model.Names) *subscriber {
	ctx := context.Background()
	ps := rdb.PSubscribe(ctx, names.Channel+"*")
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("psubscribe: %v", err)
	}
	t.Cleanup(func() { _ = ps.Close() })
	return &subscriber{rdb: rdb, ps: ps, sync: names.Channel + "#sync"}
}

// drain returns the messages published since the last drain. Redis delivers
// a subscriber's messages in order, so publishing a marker and reading up
// to it collects everything published before.
func (s *subscriber) drain(ctx context.Context) ([]model.Message, error) {
	s.seq++
	marker := strconv.Itoa(s.seq)
	if err := s.rdb.Publish(ctx, s.sync, marker).Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got []model.Message
	for {
		m, err := s.ps.ReceiveMessage(ctx)
		if err != nil {
			return nil, fmt.Errorf("waiting for the pub/sub marker: %w", err)
		}
		if m.Channel == s.sync {
			if m.Payload == marker {
				return got, nil
			}
			continue
		}
		got = append(got, model.Message{Channel: m.Channel, Payload: m.Payload})
	}
}

// dump reads every key of the lock into a model.Lock, as of server time
// server (the model's clock, which the backend's matches up to tolerance).
// It fails on any key of the run that the lock's state does not explain.
// dumpNotes reads the Redisson engine's handoff notes ("fairlock_notes:
// {name}": owner -> "|lease|slot|latch ms|latch key", queue_redisson.lua)
// into l.Notes. The hash must expire (Java's scripts may prune a waiter and
// leave its entry) and hold entries only of queued owners of this library's
// clients (the fair scripts delete an entry when its owner leaves).
func dumpNotes(l *model.Lock, notes map[string]string, pttl time.Duration, server int64) error {
	if len(notes) == 0 {
		return nil
	}
	if pttl <= 0 {
		return fmt.Errorf("handoff notes %v without expiry", notes)
	}
	l.NotesEnd = server + pttl.Milliseconds()
	prefix := l.Names().AcquireLatchPrefix()
	for o, v := range notes {
		if !model.TakesNotes(o) || !slices.Contains(l.Queue, o) {
			return fmt.Errorf("handoff note of %s, which is not a queued waiter of this library's clients (queue %v)", o, l.Queue)
		}
		f := strings.SplitN(v, "|", 5)
		if len(f) != 5 || f[0] != "" || !strings.HasPrefix(f[4], prefix) {
			return fmt.Errorf("handoff note of %s: %q", o, v)
		}
		l.Notes[o] = model.Note{LeaseMs: mustInt(f[1]), SlotMs: mustInt(f[2]), LatchMs: mustInt(f[3]), RequestID: strings.TrimPrefix(f[4], prefix)}
	}
	return nil
}

func dump(ctx context.Context, rdb *redis.Client, names model.Names, server int64) (*model.Lock, error) {
	pipe := rdb.Pipeline()
	all := pipe.Keys(ctx, "*"+names.Lock+"*")
	holds := pipe.HGetAll(ctx, names.Lock)
	pttl := pipe.PTTL(ctx, names.Lock)
	queue := pipe.LRange(ctx, names.Queue, 0, -1)
	deadlines := pipe.ZRangeWithScores(ctx, names.Timeouts, 0, -1)
	queuePTTL := pipe.PTTL(ctx, names.Queue)
	timeoutsPTTL := pipe.PTTL(ctx, names.Timeouts)
	grace := pipe.Get(ctx, names.Grace)
	gracePTTL := pipe.PTTL(ctx, names.Grace)
	token := pipe.Get(ctx, names.Token)
	tokenPTTL := pipe.PTTL(ctx, names.Token)
	notes := pipe.HGetAll(ctx, names.Notes)
	notesPTTL := pipe.PTTL(ctx, names.Notes)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	l := model.New(names.Lock)
	for o, v := range holds.Val() {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("hold count of %s: %q", o, v)
		}
		l.Holds[o] = n
	}
	if len(l.Holds) > 0 {
		l.LeaseEnd = model.NoExpiry
		if p := pttl.Val(); p > 0 {
			l.LeaseEnd = server + p.Milliseconds()
		}
	}
	l.Queue = queue.Val()
	for _, z := range deadlines.Val() {
		if z.Score != math.Trunc(z.Score) {
			return nil, fmt.Errorf("deadline of %v is not whole: %v", z.Member, z.Score)
		}
		l.Deadlines[z.Member.(string)] = int64(z.Score)
	}
	for _, p := range []*redis.DurationCmd{queuePTTL, timeoutsPTTL} {
		if p.Val() > 0 {
			return nil, fmt.Errorf("%v: the fair lock's keys never expire", p.Args())
		}
	}
	if err := dumpGrace(l, grace, gracePTTL, server); err != nil {
		return nil, err
	}
	if err := dumpToken(l, token, tokenPTTL); err != nil {
		return nil, err
	}
	if err := dumpNotes(l, notes.Val(), notesPTTL.Val(), server); err != nil {
		return nil, err
	}

	var latchKeys, alatchKeys, stray []string
	for _, k := range all.Val() {
		switch {
		case k == names.Lock, k == names.Queue, k == names.Timeouts, k == names.Grace, k == names.Token, k == names.Notes:
		case strings.HasPrefix(k, names.LatchPrefix()):
			latchKeys = append(latchKeys, k)
		case strings.HasPrefix(k, names.AcquireLatchPrefix()):
			alatchKeys = append(alatchKeys, k)
		default:
			stray = append(stray, k)
		}
	}
	if len(stray) > 0 {
		return nil, fmt.Errorf("unexpected keys %v", stray)
	}
	if err := dumpAcquireLatches(ctx, rdb, l, names, alatchKeys, server); err != nil {
		return nil, err
	}
	if len(latchKeys) > 0 {
		slices.Sort(latchKeys)
		pipe := rdb.Pipeline()
		vals := make([]*redis.StringCmd, len(latchKeys))
		ttls := make([]*redis.DurationCmd, len(latchKeys))
		for i, k := range latchKeys {
			vals[i] = pipe.Get(ctx, k)
			ttls[i] = pipe.PTTL(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, err
		}
		for i, k := range latchKeys {
			id := strings.TrimPrefix(k, names.LatchPrefix())
			var r model.UnlockResult
			switch vals[i].Val() {
			case "0":
				r = model.StillHeld
			case "1":
				r = model.Released
			default:
				return nil, fmt.Errorf("latch %s holds %q", k, vals[i].Val())
			}
			if ttls[i].Val() <= 0 {
				return nil, fmt.Errorf("latch %s has no expiry", k)
			}
			l.Latches[id] = model.Latch{Result: r, ExpiresAt: server + ttls[i].Val().Milliseconds()}
		}
	}
	return l, nil
}

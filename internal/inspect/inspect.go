// Package inspect reads the state of one lock from Redis, read-only, and
// reports who holds it, who waits for it in which order with which deadline,
// and anything in that state that the scripts should never leave behind.
//
// Read reads every key of the lock in one MULTI/EXEC of read commands (TYPE,
// HGETALL, PTTL, LRANGE, ZRANGE WITHSCORES, TIME), so the report describes
// one instant of the server, and never writes.
package inspect

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/lua"
)

// Severity of a problem.
const (
	// Error: a state the scripts never leave behind (a bug, a crash in the
	// middle of a hand-written change, or someone editing the keys).
	Error = "error"
	// Warning: a state that is normal for a moment (a free lock whose head
	// has not taken it yet) but that is wrong if it lasts.
	Warning = "warning"
)

// Problem is one inconsistency found in a lock's state.
type Problem struct {
	Code     string `json:"code"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

// Holder is one owner in the lock hash.
type Holder struct {
	Owner     string `json:"owner"`
	HoldCount int64  `json:"hold_count"`
	// Raw is the stored value when it is not a positive integer.
	Raw string `json:"raw,omitempty"`
}

// Waiter is one queued owner.
type Waiter struct {
	Position    int    `json:"position"` // 1 is the head
	Owner       string `json:"owner"`
	HasDeadline bool   `json:"has_deadline"`
	// DeadlineMs is the waiter's deadline, Unix milliseconds on the
	// clock of the client that queued it (the zset score).
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	// Deadline is DeadlineMs as RFC 3339 UTC.
	Deadline string `json:"deadline,omitempty"`
	// LeftMs is DeadlineMs minus the inspector's clock; negative when
	// the deadline has passed; 0 when there is no deadline.
	LeftMs int64 `json:"left_ms"`
}

// Report is the state of one lock at one instant.
type Report struct {
	Name string `json:"name"`
	Keys struct {
		Lock          string `json:"lock"`
		Queue         string `json:"queue"`
		Timeouts      string `json:"timeouts"`
		ScalableQueue string `json:"scalable_queue"`
	} `json:"keys"`
	// Engine is "redisson" (queue list and timeout zset), "scalable"
	// (fair.Scalable's linked list), "both" (an error), or "" when no
	// queue key exists.
	Engine string `json:"engine"`
	// NowMs is the inspector's clock, Unix ms; RedisTimeMs the server's
	// (TIME), to show how far apart the two are.
	NowMs       int64 `json:"now_ms"`
	RedisTimeMs int64 `json:"redis_time_ms"`
	Locked      bool  `json:"locked"`
	// Holders is normally one owner; more is a problem.
	Holders []Holder `json:"holders"`
	// LeaseMs is the lock's PTTL: -1 for a lock with no expiry; 0 when
	// the lock is free.
	LeaseMs int64    `json:"lease_ms"`
	Queue   []Waiter `json:"queue"`
	// Unqueued are owners with a deadline in the timeout zset but not in
	// the queue list.
	Unqueued []Waiter  `json:"deadlines_not_queued"`
	Problems []Problem `json:"problems"`
	// OK is false when a problem of severity Error was found.
	OK bool `json:"ok"`
}

// Read reads the lock called name from rdb and analyses it. now is the
// inspector's clock (deadlines are client-clock instants). It sends only
// read commands, in one MULTI/EXEC.
func Read(ctx context.Context, rdb redis.Cmdable, name string, now time.Time) (*Report, error) {
	if err := lua.ValidateName(name); err != nil {
		return nil, err
	}
	k := lua.KeysFor(name)
	sq := k.ScalableQueue()
	r := &Report{Name: name, NowMs: now.UnixMilli(), Holders: []Holder{}, Queue: []Waiter{},
		Unqueued: []Waiter{}, Problems: []Problem{}}
	r.Keys.Lock, r.Keys.Queue, r.Keys.Timeouts, r.Keys.ScalableQueue = k.Name, k.Queue, k.Timeouts, sq

	keys := [4]string{k.Name, k.Queue, k.Timeouts, sq}
	want := [4]string{"hash", "list", "zset", "hash"}
	var (
		types    [4]*redis.StatusCmd
		hash     *redis.MapStringStringCmd
		pttl     *redis.Cmd
		list     *redis.StringSliceCmd
		zset     *redis.ZSliceCmd
		squeue   *redis.MapStringStringCmd
		redisNow *redis.TimeCmd
	)
	// One transaction of read commands: a consistent snapshot. A command
	// on a key of the wrong type fails on its own inside EXEC; the TYPE
	// replies say which keys those are, and their errors are ignored.
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			types[i] = p.Type(ctx, key)
		}
		hash = p.HGetAll(ctx, k.Name)
		pttl = p.Do(ctx, "pttl", k.Name)
		list = p.LRange(ctx, k.Queue, 0, -1)
		zset = p.ZRangeWithScores(ctx, k.Timeouts, 0, -1)
		squeue = p.HGetAll(ctx, sq)
		redisNow = p.Time(ctx)
		return nil
	})
	for _, t := range types {
		if t.Err() != nil {
			return nil, fmt.Errorf("read %s: %w", name, t.Err())
		}
	}
	if err != nil && !isWrongType(err) {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	var typeOK [4]bool
	for i, t := range types {
		typeOK[i] = t.Val() == "none" || t.Val() == want[i]
		if !typeOK[i] {
			r.problem(Error, "wrong-type", "key %s is a %s, not a %s", keys[i], t.Val(), want[i])
		}
	}
	if tm, err := redisNow.Result(); err == nil {
		r.RedisTimeMs = tm.UnixMilli()
	}

	// The holder.
	if typeOK[0] {
		owners := make([]string, 0, len(hash.Val()))
		for o := range hash.Val() {
			owners = append(owners, o)
		}
		sort.Strings(owners)
		for _, o := range owners {
			v := hash.Val()[o]
			h := Holder{Owner: o}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				h.Raw = v
				r.problem(Error, "bad-hold-count", "owner %s has hold count %q (not a positive integer)", o, v)
			} else {
				h.HoldCount = n
			}
			r.Holders = append(r.Holders, h)
		}
		r.Locked = len(owners) > 0
		if len(owners) > 1 {
			r.problem(Error, "many-holders", "%d owners hold the lock at once", len(owners))
		}
		if r.Locked {
			r.LeaseMs, _ = pttl.Int64()
			if r.LeaseMs == -1 {
				r.problem(Warning, "no-lease", "the lock has no expiry: only an unlock or a force-unlock frees it")
			}
		}
	}

	redissonQueued := (typeOK[1] && len(list.Val()) > 0) || (typeOK[2] && len(zset.Val()) > 0)
	scalableQueued := typeOK[3] && len(squeue.Val()) > 0
	switch {
	case redissonQueued && scalableQueued:
		r.Engine = "both"
		r.problem(Error, "mixed-engines", "both the Redisson queue keys and %s exist: two fair engines use one name", sq)
	case scalableQueued:
		r.Engine = "scalable"
	case redissonQueued:
		r.Engine = "redisson"
	}
	if redissonQueued && typeOK[1] && typeOK[2] {
		r.redissonQueue(list.Val(), zset.Val())
	}
	if scalableQueued {
		r.scalableQueue(squeue.Val())
	}
	r.checkQueue()
	r.OK = true
	for _, p := range r.Problems {
		if p.Severity == Error {
			r.OK = false
		}
	}
	return r, nil
}

func isWrongType(err error) bool { return strings.HasPrefix(err.Error(), "WRONGTYPE") }

func (r *Report) problem(sev, code, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Code: code, Severity: sev, Message: fmt.Sprintf(format, args...)})
}

func (r *Report) waiter(pos int, owner string, deadline int64, has bool) Waiter {
	w := Waiter{Position: pos, Owner: owner, HasDeadline: has}
	if has {
		w.DeadlineMs = deadline
		w.Deadline = time.UnixMilli(deadline).UTC().Format("2006-01-02T15:04:05.000Z")
		w.LeftMs = deadline - r.NowMs
	}
	return w
}

// redissonQueue reads the queue list and the timeout zset (fair_*.lua).
func (r *Report) redissonQueue(list []string, zset []redis.Z) {
	deadline := make(map[string]int64, len(zset))
	for _, z := range zset {
		deadline[z.Member.(string)] = int64(z.Score)
	}
	seen := make(map[string]int, len(list))
	for i, o := range list {
		d, has := deadline[o]
		r.Queue = append(r.Queue, r.waiter(i+1, o, d, has))
		seen[o]++
		if seen[o] == 2 {
			r.problem(Error, "duplicate", "%s is queued more than once", o)
		}
		if !has {
			if i == 0 {
				r.problem(Error, "head-no-deadline",
					"the head %s has no deadline (H1: Redisson would let it block the lock for ever; this library prunes it)", o)
			} else {
				r.problem(Error, "no-deadline", "waiter %d, %s, is queued but has no deadline", i+1, o)
			}
		}
	}
	for _, z := range zset {
		o := z.Member.(string)
		if seen[o] == 0 {
			r.Unqueued = append(r.Unqueued, r.waiter(0, o, int64(z.Score), true))
			r.problem(Error, "deadline-not-queued", "%s has a deadline but is not in the queue", o)
		}
	}
}

// scalableQueue reads fair.Scalable's linked list (scalable_common.lua): h
// and t the head and tail, hd and td their deadlines, n:<o> and p:<o> the
// links, d:<o> each deadline minus its predecessor's.
func (r *Report) scalableQueue(h map[string]string) {
	num := func(f string) (int64, bool) {
		n, err := strconv.ParseInt(h[f], 10, 64)
		return n, err == nil
	}
	head, tail := h["h"], h["t"]
	members := 0
	for f := range h {
		if strings.HasPrefix(f, "n:") {
			members++
		}
	}
	deadline, ok := num("hd")
	if head == "" || !ok {
		r.problem(Error, "scalable-no-head", "the scalable queue has no head or no head deadline")
		return
	}
	prev := ""
	for o := head; o != ""; {
		if len(r.Queue) > members {
			r.problem(Error, "scalable-cycle", "the scalable queue's links form a cycle")
			return
		}
		if len(r.Queue) > 0 {
			d, ok := num("d:" + o)
			if !ok {
				r.problem(Error, "no-deadline", "%s has no deadline delta in the scalable queue", o)
			}
			deadline += d
		}
		if p, ok := h["p:"+o]; !ok || p != prev {
			r.problem(Error, "scalable-link", "%s's predecessor link is %q, expected %q", o, h["p:"+o], prev)
		}
		r.Queue = append(r.Queue, r.waiter(len(r.Queue)+1, o, deadline, true))
		next, ok := h["n:"+o]
		if !ok {
			r.problem(Error, "scalable-link", "%s has no successor link", o)
			break
		}
		prev, o = o, next
	}
	if prev != tail {
		r.problem(Error, "scalable-link", "the walk from the head ends at %q, but the tail is %q", prev, tail)
	}
	if len(r.Queue) != members {
		r.problem(Error, "scalable-link", "%d owners have links but %d are reachable from the head", members, len(r.Queue))
	}
	if td, ok := num("td"); ok && len(r.Queue) > 0 && td != r.Queue[len(r.Queue)-1].DeadlineMs {
		r.problem(Error, "scalable-tail-deadline", "the tail deadline is %d but the deltas add up to %d", td, r.Queue[len(r.Queue)-1].DeadlineMs)
	}
}

// checkQueue flags what is wrong with the queue as a whole.
func (r *Report) checkQueue() {
	if len(r.Queue) == 0 {
		return
	}
	head := r.Queue[0]
	if head.HasDeadline && head.LeftMs <= 0 {
		r.problem(Warning, "stale-head",
			"the head's deadline passed %v ago: it is dead and the next attempt by anyone prunes it", ms(-head.LeftMs))
	}
	if !r.Locked {
		r.problem(Warning, "free-with-queue",
			"the lock is free but %d waiters are queued (normal for a moment while the head is woken; "+
				"the head has until its deadline to take it)", len(r.Queue))
	}
	last := int64(0)
	for _, w := range r.Queue {
		if !w.HasDeadline {
			continue
		}
		if w.DeadlineMs < last {
			r.problem(Error, "deadline-order",
				"waiter %d's deadline is earlier than the one ahead of it (deadlines must not decrease along the queue)", w.Position)
		}
		last = w.DeadlineMs
	}
	for _, h := range r.Holders {
		for _, w := range r.Queue {
			if w.Owner == h.Owner {
				r.problem(Warning, "holder-queued", "the holder %s is also queued (position %d)", h.Owner, w.Position)
			}
		}
	}
}

// ms renders a duration of milliseconds compactly.
func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

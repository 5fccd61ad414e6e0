package lockstate

import (
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// decode fills s from the replies, recording problems in the order the
// inspector reports them.
func (s *State) decode(snap *snapshot) {
	var typeOK [nKeys]bool
	for i, t := range snap.types {
		typeOK[i] = t.Val() == "none" || t.Val() == wantType[i]
		if !typeOK[i] {
			s.problem(Error, "wrong-type", "key %s is a %s, not a %s", snap.keys[i], t.Val(), wantType[i])
		}
	}
	if tm, err := snap.redisNow.Result(); err == nil {
		s.RedisTimeMs = tm.UnixMilli()
	}
	switch {
	case snap.hashIsRW:
		s.problem(Warning, "rwlock-hash",
			"the hash %s is a read-write lock's (shown as such): this name is used by two kinds", s.Keys.Lock)
	case typeOK[kLock]:
		s.holders(snap.hash.Val(), snap.pttl)
	}
	s.extras(snap)

	list, zset, squeue := snap.list.Val(), snap.zset.Val(), snap.squeue.Val()
	redissonQueued := (typeOK[kQueue] && len(list) > 0) || (typeOK[kTimeouts] && len(zset) > 0)
	scalableQueued := typeOK[kScalable] && len(squeue) > 0
	switch {
	case redissonQueued && scalableQueued:
		s.Engine = Both
		s.problem(Error, "mixed-engines", "both the Redisson queue keys and %s exist: two fair engines use one name",
			s.Keys.ScalableQueue)
	case scalableQueued:
		s.Engine = Scalable
	case redissonQueued:
		s.Engine = Redisson
	}
	if redissonQueued && typeOK[kQueue] && typeOK[kTimeouts] {
		s.redissonQueue(list, zset)
	}
	if scalableQueued {
		s.scalableQueue(squeue)
	}
	s.handoffNotes(snap, squeue)
	s.checkQueue()
}

// handoffNotes marks the waiters that joined with a handoff note
// (latch_common.lua's grant_note, "|lease|slot|latch ms|latch key"): on the
// Redisson engine in the notes hash (an entry may outlive its waiter when
// Java's scripts pruned it: not a problem, only the head's is read), on the
// scalable one after the join sequence in s:<owner>.
func (s *State) handoffNotes(snap *snapshot, squeue map[string]string) {
	var notes map[string]string
	if snap.notes != nil {
		notes = snap.notes.Val() // empty when the key is of another type
	}
	for i, w := range s.Queue {
		if s.Engine == Scalable {
			s.Queue[i].Handoff = joinNoteRE.MatchString(squeue["s:"+w.Owner])
		} else {
			s.Queue[i].Handoff = noteRE.MatchString(notes[w.Owner])
		}
	}
}

// noteRE is a handoff note (grant_note_read's pattern); joinNoteRE one
// after a join sequence (queue_scalable.lua's q_grant_note).
var (
	noteRE     = regexp.MustCompile(`^\|\d+\|\d+\|\d+\|.+$`)
	joinNoteRE = regexp.MustCompile(`^\d+\|\d+\|\d+\|\d+\|.+$`)
)

// holders reads the lock hash and its PTTL.
func (s *State) holders(hash map[string]string, pttl *redis.Cmd) {
	owners := make([]string, 0, len(hash))
	for o := range hash {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	for _, o := range owners {
		v := hash[o]
		h := Holder{Owner: o}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			h.Raw = v
			s.problem(Error, "bad-hold-count", "owner %s has hold count %q (not a positive integer)", o, v)
		} else {
			h.HoldCount = n
		}
		s.Holders = append(s.Holders, h)
	}
	s.Locked = len(owners) > 0
	if len(owners) > 1 {
		s.problem(Error, "many-holders", "%d owners hold the lock at once", len(owners))
	}
	if s.Locked {
		s.LeaseMs, _ = pttl.Int64()
		if s.LeaseMs == -1 {
			s.problem(Warning, "no-lease", "the lock has no expiry: only an unlock or a force-unlock frees it")
		}
	}
}

// extras reads the head grace and the fencing token. Neither is checked.
func (s *State) extras(snap *snapshot) {
	if owner, err := snap.grace.Result(); err == nil {
		pttl, _ := snap.gracePTTL.Int64()
		second := strings.HasPrefix(owner, "+")
		s.Grace = Grace{Owner: strings.TrimPrefix(owner, "+"), Second: second, PTTLMs: pttl, LeftMs: pttl - GraceMarginMs}
	}
	if n, err := snap.token.Int64(); err == nil {
		s.Token, s.HasToken = n, true
	}
}

func (s *State) waiter(pos int, owner string, deadline int64, has bool) Waiter {
	w := Waiter{Position: pos, Owner: owner, HasDeadline: has}
	if has {
		w.DeadlineMs = deadline
		w.LeftMs = deadline - s.NowMs
	}
	return w
}

// redissonQueue reads the queue list and the timeout zset (fair_*.lua).
func (s *State) redissonQueue(list []string, zset []redis.Z) {
	deadline := make(map[string]int64, len(zset))
	for _, z := range zset {
		deadline[z.Member.(string)] = int64(z.Score)
	}
	seen := make(map[string]int, len(list))
	for i, o := range list {
		d, has := deadline[o]
		s.Queue = append(s.Queue, s.waiter(i+1, o, d, has))
		seen[o]++
		if seen[o] == 2 {
			s.problem(Error, "duplicate", "%s is queued more than once", o)
		}
		if !has {
			if i == 0 {
				s.problem(Error, "head-no-deadline",
					"the head %s has no deadline (H1: Redisson would let it block the lock for ever; this library prunes it)", o)
			} else {
				s.problem(Error, "no-deadline", "waiter %d, %s, is queued but has no deadline", i+1, o)
			}
		}
	}
	for _, z := range zset {
		o := z.Member.(string)
		if seen[o] == 0 {
			s.Unqueued = append(s.Unqueued, s.waiter(0, o, int64(z.Score), true))
			s.problem(Error, "deadline-not-queued", "%s has a deadline but is not in the queue", o)
		}
	}
}

// scalableQueue reads fair.Scalable's linked list (queue_scalable.lua): h
// and t the head and tail, hd and td their deadlines, n:<o> and p:<o> the
// links, d:<o> each deadline minus its predecessor's. The join sequences
// (s:<o>, hs, ts) serve only a waiter's position and are not read here.
func (s *State) scalableQueue(h map[string]string) {
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
		s.problem(Error, "scalable-no-head", "the scalable queue has no head or no head deadline")
		return
	}
	prev := ""
	for o := head; o != ""; {
		if len(s.Queue) > members {
			s.problem(Error, "scalable-cycle", "the scalable queue's links form a cycle")
			return
		}
		if len(s.Queue) > 0 {
			d, ok := num("d:" + o)
			if !ok {
				s.problem(Error, "no-deadline", "%s has no deadline delta in the scalable queue", o)
			}
			deadline += d
		}
		if p, ok := h["p:"+o]; !ok || p != prev {
			s.problem(Error, "scalable-link", "%s's predecessor link is %q, expected %q", o, h["p:"+o], prev)
		}
		s.Queue = append(s.Queue, s.waiter(len(s.Queue)+1, o, deadline, true))
		next, ok := h["n:"+o]
		if !ok {
			s.problem(Error, "scalable-link", "%s has no successor link", o)
			break
		}
		prev, o = o, next
	}
	if prev != tail {
		s.problem(Error, "scalable-link", "the walk from the head ends at %q, but the tail is %q", prev, tail)
	}
	if len(s.Queue) != members {
		s.problem(Error, "scalable-link", "%d owners have links but %d are reachable from the head", members, len(s.Queue))
	}
	if td, ok := num("td"); ok && len(s.Queue) > 0 && td != s.Queue[len(s.Queue)-1].DeadlineMs {
		s.problem(Error, "scalable-tail-deadline", "the tail deadline is %d but the deltas add up to %d",
			td, s.Queue[len(s.Queue)-1].DeadlineMs)
	}
}

package faulttests

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The fencing checks (issue 13): holds of a fenced lock each make fenced
// writes (package fence) of a record "(token, holder, write id)" to one
// resource key, an append-only list, so the order in which Redis accepted
// them is the list's order. The promises, stated without the lock's code:
//
//  1. accept order is token order: the accepted tokens, in the order the
//     resource accepted them, never go down; equal tokens come from one
//     hold;
//  2. no two accepted writes with different tokens come from holds whose
//     believed-valid windows overlap;
//  3. the writer's view agrees with the resource: a write told "accepted"
//     is in the log, one told "rejected" is not, and a rejection names a
//     newer token than the writer's;
//  4. every hold's token is new (the fenced lock INCRs on every
//     acquisition): no two holds share one.

// FenceHold is one hold of the fenced lock with its token and its
// believed-valid window (as Window: from the acquisition returning to the
// earliest of the final Unlock's start, Done seen closed, the last
// ValidUntil sampled while held).
type FenceHold struct {
	Owner      string
	Client     int
	Token      int64
	Start, End time.Duration
}

// FenceWrite is one fenced write as its writer saw it.
type FenceWrite struct {
	ID       string // unique, in the record
	Token    int64
	Owner    string
	Sent     time.Duration
	Outcome  string // "accepted", "rejected", or "error: ..." (unknown)
	Last     int64  // the reply's newest token
	Returned time.Duration
}

// FenceEntry is one record of the resource's log, in accept order.
type FenceEntry struct {
	Token int64
	Owner string
	ID    string
}

// FenceHistory is a fencing run.
type FenceHistory struct {
	mu     sync.Mutex
	Holds  []FenceHold
	Writes []FenceWrite
	Log    []FenceEntry
}

func (h *FenceHistory) addHold(x FenceHold) {
	h.mu.Lock()
	h.Holds = append(h.Holds, x)
	h.mu.Unlock()
}

func (h *FenceHistory) addWrite(w FenceWrite) {
	h.mu.Lock()
	h.Writes = append(h.Writes, w)
	h.mu.Unlock()
}

// fenceRecord is the value a write appends: "token|owner|id".
func fenceRecord(token int64, owner, id string) string {
	return strconv.FormatInt(token, 10) + "|" + owner + "|" + id
}

func parseFenceRecord(s string) (FenceEntry, error) {
	parts := strings.SplitN(s, "|", 3)
	if len(parts) != 3 {
		return FenceEntry{}, fmt.Errorf("malformed record %q", s)
	}
	tok, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return FenceEntry{}, fmt.Errorf("malformed record %q", s)
	}
	return FenceEntry{Token: tok, Owner: parts[1], ID: parts[2]}, nil
}

// CheckFence verifies a fencing run.
func CheckFence(h *FenceHistory) []Violation {
	h.mu.Lock()
	defer h.mu.Unlock()
	var vs []Violation
	add := func(at time.Duration, format string, args ...any) {
		vs = append(vs, Violation{Check: "fence", At: at, Msg: fmt.Sprintf(format, args...)})
	}
	holdOf := map[int64]*FenceHold{}
	for i := range h.Holds {
		x := &h.Holds[i]
		if old, ok := holdOf[x.Token]; ok {
			add(x.Start, "two holds got token %d: %s (c%d) at %s and %s (c%d) at %s",
				x.Token, short(old.Owner), old.Client, ts(old.Start), short(x.Owner), x.Client, ts(x.Start))
			continue
		}
		holdOf[x.Token] = x
	}
	writeOf := map[string]*FenceWrite{}
	for i := range h.Writes {
		writeOf[h.Writes[i].ID] = &h.Writes[i]
	}

	// 1. Accept order is token order.
	inLog := map[string]bool{}
	for i, e := range h.Log {
		inLog[e.ID] = true
		at := time.Duration(0)
		if w := writeOf[e.ID]; w != nil {
			at = w.Sent
		}
		if i == 0 {
			continue
		}
		p := h.Log[i-1]
		switch {
		case e.Token < p.Token:
			add(at, "accept order is not token order: write %s (token %d, %s) accepted after write %s (token %d, %s)",
				e.ID, e.Token, short(e.Owner), p.ID, p.Token, short(p.Owner))
		case e.Token == p.Token && e.Owner != p.Owner:
			add(at, "token %d written by two owners: %s and %s", e.Token, short(p.Owner), short(e.Owner))
		}
	}

	// 2. No two accepted writes from overlapping holds.
	var tokens []int64
	seen := map[int64]bool{}
	for _, e := range h.Log {
		if !seen[e.Token] {
			seen[e.Token] = true
			tokens = append(tokens, e.Token)
		}
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	for i, a := range tokens {
		ha := holdOf[a]
		if ha == nil {
			add(0, "an accepted write has token %d, which no recorded hold got", a)
			continue
		}
		for _, b := range tokens[i+1:] {
			hb := holdOf[b]
			if hb == nil {
				continue
			}
			if overlaps(ha.Start, ha.End, hb.Start, hb.End) {
				add(max(ha.Start, hb.Start), "accepted writes from overlapping holds: token %d (%s, %s-%s) and token %d (%s, %s-%s)",
					a, short(ha.Owner), ts(ha.Start), ts(ha.End), b, short(hb.Owner), ts(hb.Start), ts(hb.End))
			}
		}
	}

	// 3. The writers' view agrees with the log.
	for _, w := range h.Writes {
		switch w.Outcome {
		case "accepted":
			if !inLog[w.ID] {
				add(w.Returned, "write %s (token %d) was told accepted but is not in the resource", w.ID, w.Token)
			}
		case "rejected":
			if inLog[w.ID] {
				add(w.Returned, "write %s (token %d) was told rejected but is in the resource", w.ID, w.Token)
			}
			if w.Last <= w.Token {
				add(w.Returned, "write %s (token %d) was rejected naming token %d, not a newer one", w.ID, w.Token, w.Last)
			}
		}
	}
	for _, e := range h.Log {
		if writeOf[e.ID] == nil {
			add(0, "the resource holds write %s (token %d) that nobody made", e.ID, e.Token)
		}
	}
	return vs
}

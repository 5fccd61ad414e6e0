package faulttests

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// Report checks the history and fails t with a readable account of the
// first violation: the seed that replays the run, the violation, the
// history of its lock around it, then a summary of the others.
func Report(t testing.TB, h *History, replay string) []Violation {
	t.Helper()
	vs := Check(h)
	t.Log(Summary(h))
	if path := os.Getenv("FAULT_HISTORY"); path != "" {
		if err := os.WriteFile(path, []byte(h.Timeline("", 0, Never, 0)), 0o644); err != nil {
			t.Logf("FAULT_HISTORY: %v", err)
		} else {
			t.Logf("the whole history is in %s", path)
		}
	}
	if len(vs) == 0 {
		return nil
	}
	count := map[string]int{}
	for _, v := range vs {
		count[v.Check]++
	}
	var kinds []string
	for k, n := range count {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(kinds)
	first := vs[0]
	var b strings.Builder
	fmt.Fprintf(&b, "%d violations (%s)\nreplay: %s\n\nfirst violation:\n  %s\n\nhistory of %s around it:\n%s",
		len(vs), strings.Join(kinds, ", "), replay, first, lockOr(first.Lock), h.Timeline(first.Lock, first.At-12*time.Second, first.At+3*time.Second, 70))
	if len(count) > 1 {
		fmt.Fprintf(&b, "\nfirst violation of each check:\n")
		seen := map[string]bool{}
		for _, v := range vs {
			if !seen[v.Check] {
				seen[v.Check] = true
				fmt.Fprintf(&b, "  %s\n", v)
			}
		}
	}
	if len(vs) > 1 {
		fmt.Fprintf(&b, "\nall violations (first 25):\n")
		for i, v := range vs {
			if i == 25 {
				break
			}
			fmt.Fprintf(&b, "  %s\n", v)
		}
	}
	t.Error(b.String())
	return vs
}

func lockOr(l string) string {
	if l == "" {
		return "every lock"
	}
	return l
}

// Summary is a few figures of a run.
func Summary(h *History) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := map[string]int{}
	acq, moved := 0, 0
	pos := map[LockKind]int{}
	for _, c := range h.Calls {
		if len(c.Positions) > 0 {
			pos[h.Locks[c.Lock]] += len(c.Positions)
		}
		for i := 1; i < len(c.Positions); i++ {
			if c.Positions[i].Ahead < c.Positions[i-1].Ahead {
				moved++
			}
		}
		op, _, _ := strings.Cut(c.Op, "[")
		ops[op]++
		if c.Acquired && c.Op != "ForceUnlock" {
			acq++
		}
	}
	kinds := map[FaultKind]int{}
	for _, f := range h.Faults {
		kinds[f.Kind]++
	}
	return fmt.Sprintf("%d calls %v, %d acquisitions, %d holds, %d queue joins, queue positions reported %v (%d moved up the queue), %d resource ops, faults %v, %d client closes",
		len(h.Calls), ops, acq, len(h.Windows), len(h.Joins), pos, moved, len(h.Ops), kinds, len(h.Closes))
}

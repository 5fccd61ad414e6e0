package watchdog

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Entries of another kind are renewed by that kind's function only, never
// in the same call as KindLock entries, and a kind with no function never
// confirms a renewal (nor reports a loss).
func TestKindsRenewSeparately(t *testing.T) {
	var mu sync.Mutex
	calls := map[string][][]string{}
	rec := func(kind string) RenewFunc {
		return func(_ context.Context, names, owners []string) ([]Status, error) {
			mu.Lock()
			calls[kind] = append(calls[kind], append([]string(nil), owners...))
			mu.Unlock()
			return all(Renewed, len(names)), nil
		}
	}
	w := New(rec("lock"), nil, 150*time.Millisecond, 100)
	defer w.Close()
	const rw Kind = 1
	w.SetRenew(rw, rec("rw"))
	plain, reader, orphan := newHolder(), newHolder(), newHolder()
	w.Add("a", "plain", plain)
	w.AddKind("a", "reader", rw, reader)
	w.AddKind("a", "orphan", 7, orphan)
	eventually(t, "both kinds renewed", func() bool { return plain.renewed.Load() > 0 && reader.renewed.Load() > 0 })
	mu.Lock()
	defer mu.Unlock()
	for kind, cs := range calls {
		for _, owners := range cs {
			for _, o := range owners {
				if (kind == "lock") != (o == "plain") {
					t.Fatalf("%s renewed by the %s function", o, kind)
				}
			}
		}
	}
	if orphan.renewed.Load() != 0 || orphan.lost.Load() != 0 {
		t.Fatalf("an entry of a kind with no function: renewed %d, lost %d", orphan.renewed.Load(), orphan.lost.Load())
	}
}

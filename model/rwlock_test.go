package model

import "testing"

// The issue-19 rules of the read-write model, step by step.
func TestRWStaleReaderAndOtherKind(t *testing.T) {
	l := NewRW("x")
	// R1 holds twice with short leases, R2 once with a long one.
	for _, a := range []struct {
		owner string
		lease int64
	}{{"r1", 10}, {"r1", 20}, {"r2", 100}} {
		if ok, _ := l.ReadAcquire(0, a.owner, a.lease); !ok {
			t.Fatalf("%s refused", a.owner)
		}
	}
	// At 30 both of R1's keys are gone; the hash lives on for R2.
	if l.Renew(30, "r1", 50) {
		t.Fatal("a late renewal revived r1, whose keys have all expired")
	}
	if _, ok := l.Timeouts[l.names.TimeoutKey("r1", 1)]; ok {
		t.Fatal("the late renewal re-created r1's key")
	}
	// R1's next acquisition is a new hold, not a third re-entry.
	if ok, _ := l.ReadAcquire(31, "r1", 10); !ok || l.Holds["r1"] != 1 {
		t.Fatalf("r1 re-acquired with count %d, want a new hold (1)", l.Holds["r1"])
	}
	// That hold runs out too; its unlock removes the field: not held.
	if r := l.ReadUnlock(45, "r1", "q1", 1000); r != NotHeld || l.Holds["r1"] != 0 {
		t.Fatalf("unlock of r1's stale field: %v, count %d", r, l.Holds["r1"])
	}
	if _, ok := l.Latches["q1"]; ok {
		t.Fatal("a stale field's removal stored a latch")
	}
	if r := l.ReadUnlock(46, "r2", "q2", 1000); r != Released || !l.free() {
		t.Fatalf("r2's unlock: %v, state %v", r, l)
	}

	// A writer with its own 10 ms read: after the read ran out, its last
	// write unlock frees the lock instead of leaving read mode.
	if ok, _ := l.WriteAcquire(100, "w:write", 1000); !ok {
		t.Fatal("writer refused")
	}
	if ok, _ := l.ReadAcquire(100, "w", 10); !ok {
		t.Fatal("the writer cannot read")
	}
	if r := l.WriteUnlock(200, "w:write", 1000, "q3", 1000); r != Released || !l.free() {
		t.Fatalf("write unlock with the writer's read run out: %v, state %v", r, l)
	}
	if ok, _ := l.WriteAcquire(300, "w:write", 1000); !ok {
		t.Fatal("writer refused")
	}
	if ok, _ := l.ReadAcquire(300, "w", 500); !ok {
		t.Fatal("the writer cannot read")
	}
	if r := l.WriteUnlock(400, "w:write", 1000, "q4", 1000); r != Released || l.Mode != "read" || l.LeaseEnd != 800 {
		t.Fatalf("write unlock with a live read: %v, state %v (want read mode until 800)", r, l)
	}
	if err := l.CheckReadLive(400, 0); err != nil {
		t.Fatal(err)
	}
	l.ForceUnlock(401, false)

	// A lock of another kind keeps both halves out.
	if !l.OtherLock(500, 100) {
		t.Fatal("the other kind is refused a free name")
	}
	if ok, ttl := l.ReadAcquire(510, "r1", 10); ok || ttl != 90 {
		t.Fatalf("reader beside another kind's holder: %v, ttl %d", ok, ttl)
	}
	if ok, _ := l.WriteAcquire(510, "w:write", 10); ok {
		t.Fatal("writer beside another kind's holder")
	}
	if err := l.CheckShape(); err != nil {
		t.Fatal(err)
	}
	if !l.OtherUnlock(520) || !l.free() {
		t.Fatal("the other kind's unlock")
	}
}

package core

import (
	"testing"
	"time"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// positionTrack turns the attempts' replies into reports: Joined from the
// script or after an unanswered attempt (for the rest of the call), and an
// ETA of (ahead+1) / the rate the queue moved over the recent reports,
// unknown (0) until it moved, measured again after a join.
func TestPositionTrackReports(t *testing.T) {
	var got []Position
	p := &positionTrack{fn: func(x Position) { got = append(got, x) }}
	t0 := time.Unix(1000, 0)
	read := func(sec int, ahead int64, joined bool) {
		p.have, p.ahead, p.at = true, wire.Ahead{Ahead: ahead, Joined: joined}, t0.Add(time.Duration(sec)*time.Second)
		p.report()
	}
	last := func() Position { return got[len(got)-1] }

	p.report() // nothing read: nothing reported
	if len(got) != 0 {
		t.Fatalf("reported without a reply: %v", got)
	}
	read(0, 5, true)
	if x := last(); x.Ahead != 5 || !x.Joined || x.ETA != 0 {
		t.Fatalf("first report %+v", x)
	}
	read(2, 5, false)
	if x := last(); x.Joined || x.ETA != 0 {
		t.Fatalf("the queue has not moved: %+v", x)
	}
	read(4, 3, false) // 2 ahead left in 4 s: 0.5 grants/s; 4 to go (3 ahead + the holder)
	if x := last(); x.ETA != 8*time.Second {
		t.Fatalf("ETA %v, want 8s", x.ETA)
	}
	p.report() // the same reply is not reported twice
	if len(got) != 3 {
		t.Fatalf("%d reports", len(got))
	}
	read(5, 9, true) // joined again: the rate is measured afresh
	if x := last(); !x.Joined || x.ETA != 0 {
		t.Fatalf("after a join: %+v", x)
	}
	for i := 1; i <= 10; i++ { // the rate is over the last few reports only
		read(5+i, 9, false)
	}
	read(16, 8, false) // 1 moved within the window
	if x := last(); x.ETA <= 0 || x.ETA > 9*8*time.Second {
		t.Fatalf("windowed ETA %v", x.ETA)
	}
	n := len(got)
	read(17, 9, false) // further back than the last report, not joined: an older reading (a note that crossed a reply)
	if len(got) != n {
		t.Fatalf("a reading further back without a join was reported: %+v", last())
	}
	read(17, 7, false)
	if x := last(); len(got) != n+1 || x.Ahead != 7 {
		t.Fatalf("after the older reading: %d reports, last %+v", len(got)-n, x)
	}
	p.lost = true      // an attempt went unanswered: every later report says Joined
	read(17, 8, false) // Joined now: it may have joined again, further back
	read(18, 7, false)
	if !got[len(got)-2].Joined || !last().Joined || got[len(got)-2].Ahead != 8 {
		t.Fatalf("after an unanswered attempt: %+v", got[len(got)-2:])
	}
	read(19, -1, false) // unknown
	if x := last(); x.Ahead != -1 || x.ETA != 0 {
		t.Fatalf("unknown position: %+v", x)
	}
}

package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fairlock-go/fairlock/internal/lockstate"
)

// WriteJSON writes r as an indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r for a person to read, in under 100 columns.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	r.writeText(&b, false, nil)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeText writes r to b: a section per kind found, or "no such lock".
// watch says "grace: none" when a fair lock has no grace key; extra, if
// not nil, writes more lines at the end (the watch's latches).
func (r *Report) writeText(b *strings.Builder, watch bool, extra func(*strings.Builder)) {
	if !r.Found {
		b.WriteString(wrap("", fmt.Sprintf("lock %q: no such lock (no key of any kind this library writes)", r.Name)))
		if r.Venue != "" {
			b.WriteString(wrap("  ", fmt.Sprintf("(its seat venue %q has state, but no holder or queue names this seat: "+
				"inspect %q shows the venue)", r.Venue, r.Venue)))
		}
	}
	if len(r.Kinds) > 1 {
		names := make([]string, len(r.Kinds))
		for i, k := range r.Kinds {
			names[i] = kindName[k]
		}
		b.WriteString(wrap("", fmt.Sprintf("%q has keys of %d kinds: %s (each shown below; one name should serve one kind)",
			r.Name, len(r.Kinds), strings.Join(names, ", "))))
	}
	for _, k := range r.Kinds {
		if len(r.Kinds) > 1 {
			b.WriteString("\n")
		}
		switch k {
		case KindLock:
			r.writeLock(b, watch)
		case KindRWLock:
			r.writeRW(b)
		case KindFairSemaphore:
			r.writeFairSem(b)
		case KindExpirableSemaphore:
			r.writeExpSem(b)
		case KindSeats:
			r.writeSeats(b)
		}
	}
	if extra != nil {
		extra(b)
	}
}

// kindName is each kind as the text names it.
var kindName = map[string]string{
	KindLock: "lock", KindRWLock: "read-write lock", KindFairSemaphore: "fair semaphore",
	KindExpirableSemaphore: "permit-expirable semaphore", KindSeats: "seat venue",
}

// header writes a section's first lines: what it is, its kind, its keys,
// the clocks.
func (r *Report) header(b *strings.Builder, title, kind, keys string) {
	b.WriteString(title + "\n")
	b.WriteString(wrap("  kind:   ", kind))
	b.WriteString(wrap("  keys:   ", keys))
	if r.RedisTimeMs != 0 {
		fmt.Fprintf(b, "  clocks: this machine %s, Redis %+dms from it\n", stamp(r.NowMs), r.RedisTimeMs-r.NowMs)
	}
}

func writeProblems(b *strings.Builder, ps []Problem) {
	if len(ps) == 0 {
		b.WriteString("problems: none\n")
		return
	}
	fmt.Fprintf(b, "problems: %d\n", len(ps))
	for _, p := range ps {
		b.WriteString(wrap(fmt.Sprintf("  %-8s", p.Severity), p.Code+": "+p.Message))
	}
}

func problemsOf(ps []lockstate.Problem) []Problem {
	out := make([]Problem, 0, len(ps))
	for _, p := range ps {
		out = append(out, Problem{Code: p.Code, Severity: p.Severity, Message: p.Message})
	}
	return out
}

// writeLock writes the lock's section: the reentrant, fenced or fair lock.
func (r *Report) writeLock(b *strings.Builder, watch bool) {
	keys := r.Keys.Lock + ", " + r.Keys.Queue + ", " + r.Keys.Timeouts
	if r.Engine == "redisson" || r.Engine == "both" {
		keys += ", " + r.Keys.Notes
	}
	if r.Engine == "scalable" || r.Engine == "both" {
		keys += ", " + r.Keys.ScalableQueue
	}
	if r.Engine != "" {
		keys += " (engine: " + r.Engine + ")"
	}
	kind := "reentrant lock (no queue, no fencing token counter)"
	switch {
	case r.Engine == "both":
		kind = "fair lock (queue keys of both engines: an error)"
	case r.Engine != "":
		kind = "fair lock (queue engine: " + r.Engine + ")"
	case r.Token != nil:
		kind = "fenced lock, or a fair lock with nobody queued (a fencing token counter exists)"
	}
	r.header(b, fmt.Sprintf("lock %q", r.Name), kind, keys)
	switch {
	case !r.Locked:
		b.WriteString("holder: none (the lock is free)\n")
	default:
		for _, h := range r.Holders {
			count := fmt.Sprint(h.HoldCount)
			if h.Raw != "" {
				count = fmt.Sprintf("%q", h.Raw)
			}
			fmt.Fprintf(b, "holder: %s  holds %s  lease %s\n", h.Owner, count, lease(r.LeaseMs))
		}
	}
	if len(r.Queue) == 0 {
		b.WriteString("queue:  empty\n")
	} else {
		fmt.Fprintf(b, "queue:  %d waiting, head first (deadlines on the queuing client's clock, UTC)\n", len(r.Queue))
		pw, ow := len("#"), len("owner")
		for _, q := range r.Queue {
			pw, ow = max(pw, len(fmt.Sprint(q.Position))), max(ow, len(q.Owner))
		}
		fmt.Fprintf(b, "  %*s  %-*s  %-12s  %-12s  %s\n", pw, "#", ow, "owner", "deadline", "left", "head gets the lock")
		for _, q := range r.Queue {
			fmt.Fprintf(b, "  %*d  %-*s  %-12s  %-12s  %s\n", pw, q.Position, ow, q.Owner, deadline(q), left(q), handoff(q))
		}
	}
	if r.Grace == nil && watch {
		b.WriteString("grace:  none (a head gets one while the lock is free)\n")
	}
	if g := r.Grace; g != nil {
		writeGrace(b, &lockstate.GraceState{Owner: g.Owner, Second: g.Second, LeftMs: g.LeftMs}, "the free lock")
	}
	if len(r.Unqueued) > 0 {
		fmt.Fprintf(b, "deadlines of owners not in the queue: %d\n", len(r.Unqueued))
		for _, q := range r.Unqueued {
			fmt.Fprintf(b, "  %s  %s  %s\n", q.Owner, q.Deadline, left(q))
		}
	}
	if r.Token != nil {
		fmt.Fprintf(b, "token:  %d\n", *r.Token)
	}
	writeProblems(b, r.lockProblems)
}

func writeGrace(b *strings.Builder, g *lockstate.GraceState, what string) {
	nth := "first"
	if g.Second {
		nth = "second, last"
	}
	if g.LeftMs > 0 {
		fmt.Fprintf(b, "grace:  %s may take %s, %s left (%s grace)\n", g.Owner, what, round(g.LeftMs), nth)
	} else {
		fmt.Fprintf(b, "grace:  %s, ran out %s ago (%s grace)\n", g.Owner, round(-g.LeftMs), nth)
	}
}

// maxReadLeases bounds the read holds' leases listed per reader.
const maxReadLeases = 6

// writeRW writes a read-write lock's section.
func (r *Report) writeRW(b *strings.Builder) {
	rw := r.RWLock
	r.header(b, fmt.Sprintf("read-write lock %q", r.Name), "read-write lock (rwlock.New; Redisson's RReadWriteLock)",
		rw.Keys.Hash+" (hash), "+rw.Keys.Timeout+" (a key per read hold)")
	fmt.Fprintf(b, "mode:   %s  lease %s\n", rw.Mode, lease(rw.LeaseMs))
	for _, write := range []bool{true, false} {
		for _, h := range rw.Holders {
			if h.Write != write {
				continue
			}
			count := fmt.Sprint(h.HoldCount)
			if h.Raw != "" {
				count = fmt.Sprintf("%q", h.Raw)
			}
			if write {
				fmt.Fprintf(b, "writer: %s  holds %s\n", h.Owner, count)
				continue
			}
			ls := make([]string, 0, len(h.ReadLeasesMs))
			for _, l := range h.ReadLeasesMs {
				switch l {
				case -2:
					ls = append(ls, "none")
				case -1:
					ls = append(ls, "no expiry")
				default:
					ls = append(ls, round(l))
				}
			}
			if len(ls) > maxReadLeases {
				ls = append(ls[:maxReadLeases], "...")
			}
			fmt.Fprintf(b, "reader: %s  holds %s", h.Owner, count)
			if len(ls) > 0 {
				b.WriteString("  leases " + strings.Join(ls, ", ") + " left")
			}
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(b, "queue:  none (a read-write lock has no queue: waiters retry when woken)\n")
	writeProblems(b, problemsOf(rw.Problems))
}

// writeFairSem writes a fair semaphore's section.
func (r *Report) writeFairSem(b *strings.Builder) {
	s := r.FairSemaphore
	k := s.Keys
	r.header(b, fmt.Sprintf("fair semaphore %q", r.Name), "fair semaphore (semaphore.NewFair)",
		strings.Join([]string{k.Holders, k.Leases, k.Permits, k.Queue, k.Wants, k.Grace, k.Token}, ", "))
	switch {
	case !s.PoolSet:
		b.WriteString("pool:   not set (acquisitions are refused until SetPermits)\n")
	case s.PoolRaw != "":
		fmt.Fprintf(b, "pool:   %q (not a count)\n", s.PoolRaw)
	default:
		fmt.Fprintf(b, "pool:   %s, %d available (%d held)\n", plural(s.Pool, "permit"), max(s.Available, 0), s.Held)
	}
	if len(s.Holders) == 0 {
		b.WriteString("holder: none (no permits held)\n")
	}
	for _, h := range s.Holders {
		fmt.Fprintf(b, "holder: %s  permits %s  lease %s\n", h.Owner, countOf(h), leaseOf(h))
	}
	if len(s.Queue) == 0 {
		b.WriteString("queue:  empty\n")
	} else {
		fmt.Fprintf(b, "queue:  %d waiting, head first (deadlines on the Redis server's clock, UTC)\n", len(s.Queue))
		pw, ow := len("#"), len("owner")
		for _, q := range s.Queue {
			pw, ow = max(pw, len(fmt.Sprint(q.Position))), max(ow, len(q.Owner))
		}
		fmt.Fprintf(b, "  %*s  %-*s  %4s  %-12s  %s\n", pw, "#", ow, "owner", "asks", "deadline", "left")
		for _, q := range s.Queue {
			w := Waiter{HasDeadline: true, DeadlineMs: q.DeadlineMs, LeftMs: q.LeftMs}
			fmt.Fprintf(b, "  %*d  %-*s  %4d  %-12s  %s\n", pw, q.Position, ow, q.Owner, q.Asks, deadline(w), left(w))
		}
	}
	if s.Grace != nil {
		writeGrace(b, s.Grace, "its permits")
	}
	if s.HasToken {
		fmt.Fprintf(b, "token:  %d\n", s.Token)
	}
	writeProblems(b, problemsOf(s.Problems))
}

// maxPermitLines bounds the permits listed.
const maxPermitLines = 50

// writeExpSem writes a permit-expirable semaphore's section.
func (r *Report) writeExpSem(b *strings.Builder) {
	s := r.ExpirableSemaphore
	k := s.Keys
	r.header(b, fmt.Sprintf("permit-expirable semaphore %q", r.Name),
		"permit-expirable semaphore (semaphore.NewExpirable; Redisson's RPermitExpirableSemaphore)",
		k.Pool+" (the pool), "+k.Timeouts+" (the permits), "+k.Token)
	switch {
	case s.TokenOnly:
		b.WriteString(wrap("pool:   ", "none: only the token counter "+k.Token+" is left (both semaphores use it)"))
	case !s.PoolSet:
		fmt.Fprintf(b, "pool:   not set; %d acquired\n", s.Acquired)
	case s.PoolRaw != "":
		fmt.Fprintf(b, "pool:   %q (not a count); %d acquired\n", s.PoolRaw, s.Acquired)
	default:
		line := fmt.Sprintf("%s: %d available, %d acquired", plural(s.Available+s.Acquired+s.Expired, "permit"),
			s.Available+s.Expired, s.Acquired)
		if s.Expired > 0 {
			line += fmt.Sprintf(" (%d of the available expired, given back by the next call)", s.Expired)
		}
		b.WriteString(wrap("pool:   ", line))
	}
	for i, p := range s.Permits {
		if i == maxPermitLines {
			fmt.Fprintf(b, "  ... and %d more\n", len(s.Permits)-i)
			break
		}
		switch {
		case p.NoExpiry:
			fmt.Fprintf(b, "permit: %s  lease none (no expiry)\n", p.ID)
		case p.LeaseMs > 0:
			fmt.Fprintf(b, "permit: %s  lease %s left\n", p.ID, round(p.LeaseMs))
		default:
			fmt.Fprintf(b, "permit: %s  expired %s ago\n", p.ID, round(-p.LeaseMs))
		}
	}
	b.WriteString(wrap("queue:  ", "none (not fair: waiters retry when woken on "+k.Channel+")"))
	if s.HasToken {
		fmt.Fprintf(b, "token:  %d\n", s.Token)
	}
	writeProblems(b, problemsOf(s.Problems))
}

// writeSeats writes a seat venue's section.
func (r *Report) writeSeats(b *strings.Builder) {
	s := r.Seats
	k := s.Keys
	kind := "seat venue (multi.NewSeats): the multi-seat hold's keys of venue {" + s.Venue + "}"
	if s.Seat != "" && s.Seat != s.Venue {
		kind += fmt.Sprintf("; %q is one of its seats", s.Seat)
	}
	r.header(b, fmt.Sprintf("seat venue %q", s.Venue), kind,
		strings.Join([]string{k.Holds, k.Leases, k.Seat, k.Req, k.Queue, k.Grace, k.Token}, ", "))
	if len(s.Holders) == 0 {
		b.WriteString("holder: none (no seat held)\n")
	}
	for _, h := range s.Holders {
		fmt.Fprintf(b, "holder: %s  seats %s  lease %s\n", h.Owner, countOf(h), leaseOf(h))
		if len(h.Seats) > 0 {
			b.WriteString(wrap("  ", strings.Join(h.Seats, ", ")))
		}
	}
	fmt.Fprintf(b, "seats:  %d held or queued (each queue head first)\n", len(s.Seats))
	for _, st := range s.Seats {
		b.WriteString("  " + st.Seat + "\n")
		if st.Holder != "" {
			b.WriteString("    holder: " + st.Holder + "\n")
		} else {
			b.WriteString("    holder: none (free)\n")
		}
		if len(st.Queue) == 0 {
			b.WriteString("    queue:  empty\n")
		} else {
			b.WriteString(wrap("    queue:  ", strings.Join(st.Queue, ", ")))
		}
	}
	switch len(s.Waiting) {
	case 0:
		b.WriteString("waiting: none\n")
	case 1:
		b.WriteString("waiting: 1 request\n")
	default:
		fmt.Fprintf(b, "waiting: %d requests\n", len(s.Waiting))
	}
	for _, w := range s.Waiting {
		b.WriteString("  " + w.Owner + "\n")
		b.WriteString(wrap("    asks: ", strings.Join(w.Seats, ", ")))
		if g := w.Grace; g != nil {
			var gb strings.Builder
			writeGrace(&gb, g, "its seats")
			b.WriteString("    " + gb.String())
		}
	}
	if s.HasToken {
		fmt.Fprintf(b, "token:  %d\n", s.Token)
	}
	writeProblems(b, problemsOf(s.Problems))
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func countOf(h lockstate.SemHolder) string {
	if h.Raw != "" {
		return fmt.Sprintf("%q", h.Raw)
	}
	return fmt.Sprint(h.Count)
}

func leaseOf(h lockstate.SemHolder) string {
	switch {
	case !h.HasLease:
		return "none (no lease entry)"
	case h.LeaseMs <= 0:
		return "ended " + round(-h.LeaseMs) + " ago"
	}
	return round(h.LeaseMs) + " left"
}

func stamp(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }

func lease(ms int64) string {
	if ms < 0 {
		return "none (no expiry)"
	}
	return round(ms) + " left"
}

func deadline(w Waiter) string {
	if !w.HasDeadline {
		return "(none)"
	}
	return time.UnixMilli(w.DeadlineMs).UTC().Format("15:04:05.000")
}

// handoff says how the waiter gets the lock once it is the head.
func handoff(w Waiter) string {
	if w.Handoff {
		return "granted"
	}
	return "takes it"
}

func left(w Waiter) string {
	if !w.HasDeadline {
		return "-"
	}
	if w.LeftMs <= 0 {
		return "passed " + round(-w.LeftMs) + " ago"
	}
	return round(w.LeftMs)
}

// round renders milliseconds at a precision a person reads: 4m59.8s, 850ms.
func round(n int64) string {
	d := time.Duration(n) * time.Millisecond
	if d >= time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.String()
}

// width is the column at which text is wrapped.
const width = 96

// wrap writes text after lead, wrapped at width, continuation lines indented
// as deep as lead.
func wrap(lead, text string) string {
	var b strings.Builder
	b.WriteString(lead)
	col := len(lead)
	indent := strings.Repeat(" ", len(lead))
	for i, word := range strings.Fields(text) {
		if i > 0 && col+1+len(word) > width {
			b.WriteString("\n" + indent)
			col = len(indent)
		} else if i > 0 {
			b.WriteString(" ")
			col++
		}
		b.WriteString(word)
		col += len(word)
	}
	b.WriteString("\n")
	return b.String()
}

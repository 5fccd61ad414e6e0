package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
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

// writeText writes r to b. watch says "grace: none" when there is no grace
// key; extra, if not nil, writes more lines before the problems.
func (r *Report) writeText(b *strings.Builder, watch bool, extra func(*strings.Builder)) {
	fmt.Fprintf(b, "lock %q\n", r.Name)
	keys := r.Keys.Lock + ", " + r.Keys.Queue + ", " + r.Keys.Timeouts
	if r.Engine == "scalable" || r.Engine == "both" {
		keys += ", " + r.Keys.ScalableQueue
	}
	if r.Engine != "" {
		keys += " (engine: " + r.Engine + ")"
	}
	b.WriteString(wrap("  keys:   ", keys))
	if r.RedisTimeMs != 0 {
		fmt.Fprintf(b, "  clocks: this machine %s, Redis %+dms from it\n", stamp(r.NowMs), r.RedisTimeMs-r.NowMs)
	}
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
		fmt.Fprintf(b, "  %*s  %-*s  %-12s  %s\n", pw, "#", ow, "owner", "deadline", "left")
		for _, q := range r.Queue {
			fmt.Fprintf(b, "  %*d  %-*s  %-12s  %s\n", pw, q.Position, ow, q.Owner, deadline(q), left(q))
		}
	}
	if r.Grace == nil && watch {
		b.WriteString("grace:  none (a head gets one while the lock is free)\n")
	}
	if g := r.Grace; g != nil {
		nth := "first"
		if g.Second {
			nth = "second, last"
		}
		if g.LeftMs > 0 {
			fmt.Fprintf(b, "grace:  %s may take the free lock, %s left (%s grace)\n", g.Owner, round(g.LeftMs), nth)
		} else {
			fmt.Fprintf(b, "grace:  %s, ran out %s ago (%s grace)\n", g.Owner, round(-g.LeftMs), nth)
		}
	}
	if len(r.Unqueued) > 0 {
		fmt.Fprintf(b, "deadlines of owners not in the queue: %d\n", len(r.Unqueued))
		for _, q := range r.Unqueued {
			fmt.Fprintf(b, "  %s  %s  %s\n", q.Owner, q.Deadline, left(q))
		}
	}
	if extra != nil {
		extra(b)
	}
	if len(r.Problems) == 0 {
		b.WriteString("problems: none\n")
	} else {
		fmt.Fprintf(b, "problems: %d\n", len(r.Problems))
		for _, p := range r.Problems {
			b.WriteString(wrap(fmt.Sprintf("  %-8s", p.Severity), p.Code+": "+p.Message))
		}
	}
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

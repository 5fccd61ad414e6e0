package demo

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fairlock-go/fairlock/fair"
)

// Header writes what the demo is about to do.
func Header(w io.Writer, c Config, redisDesc string) {
	if c.Multi > 0 {
		fmt.Fprintf(w, "Seat booking: %d clients x %d goroutines book %d seats (rows of %d), 1-%d adjacent seats\n"+
			"a booking, all or none, held ~%v per booking; an acquisition is given up after %v\n",
			c.Clients, c.Goroutines, c.Seats, RowWidth, c.Multi, c.Hold, cmp.Or(c.GiveUp, DefaultGiveUp))
	} else {
		fmt.Fprintf(w, "Seat booking: %d clients x %d goroutines book %d seats, lock held ~%v per booking\n",
			c.Clients, c.Goroutines, c.Seats, c.Hold)
	}
	if c.Engine == fair.Scalable { // (Validate: only with the fair lock)
		fmt.Fprintf(w, "The fair lock on the scalable engine (fair.WithEngine(fair.Scalable))\n")
	}
	fmt.Fprintf(w, "Redis: %s; key names contain %q\n", redisDesc, c.Prefix)
	fmt.Fprintf(w, "(deleted at the end; unlock and acquisition latches expire by themselves within 10s)\n\n")
}

// Report writes the comparison table of the results, side by side.
func Report(w io.Writer, rs []*Result, firstGrants int) {
	if len(rs) == 0 {
		return
	}
	if rs[0].Multi > 0 {
		reportMulti(w, rs)
		return
	}
	var b strings.Builder
	// Arrival against grant, for the first grants of each run.
	n := 0
	for _, r := range rs {
		n = max(n, min(firstGrants, len(r.Bookings)))
	}
	if n > 0 {
		fmt.Fprintf(&b, "\nFirst %d grants: which arrival got the lock\n", n)
		fmt.Fprintf(&b, "%7s", "")
		for _, r := range rs {
			fmt.Fprintf(&b, "   %-26s", r.Kind)
		}
		fmt.Fprintf(&b, "\n%7s", "grant")
		for range rs {
			fmt.Fprintf(&b, "   %7s %-7s %10s", "arrival", "who", "waited")
		}
		b.WriteString("\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "%7d", i+1)
			for _, r := range rs {
				if i >= len(r.Bookings) {
					fmt.Fprintf(&b, "   %26s", "")
					continue
				}
				k := r.Bookings[i]
				mark := " "
				if k.Arrival != i+1 {
					mark = "*"
				}
				fmt.Fprintf(&b, "   %6d%s %-7s %10s", k.Arrival, mark, k.Who, dur(k.Wait))
			}
			b.WriteString("\n")
		}
		b.WriteString("        (* arrival number differs from grant number)\n")
	}

	// The summary.
	b.WriteString("\n")
	row := func(label string, f func(r *Result) string) {
		fmt.Fprintf(&b, "%-30s", label)
		for _, r := range rs {
			fmt.Fprintf(&b, " %14s", f(r))
		}
		b.WriteString("\n")
	}
	row("", func(r *Result) string { return r.Kind })
	row("seats booked", func(r *Result) string { return fmt.Sprint(r.Booked) })
	row("double bookings", func(r *Result) string { return fmt.Sprint(r.DoubleBookings) })
	row("lock grants", func(r *Result) string { return fmt.Sprint(len(r.Bookings)) })
	row("fairness inversions (pairs)", func(r *Result) string {
		inv, pairs := r.Inversions()
		return fmt.Sprintf("%d/%d", inv, pairs)
	})
	row("grants out of turn", func(r *Result) string { return fmt.Sprint(r.OutOfTurn()) })
	row("seats per goroutine, min-max", func(r *Result) string {
		lo, hi := r.Booked, 0
		for _, s := range r.PerContender {
			lo, hi = min(lo, s), max(hi, s)
		}
		return fmt.Sprintf("%d-%d", lo, hi)
	})
	for _, p := range []float64{50, 90, 99, 100} {
		label := fmt.Sprintf("wait p%g", p)
		if p == 100 {
			label = "wait max"
		}
		row(label, func(r *Result) string { return dur(r.WaitPercentile(p)) })
	}
	row("elapsed", func(r *Result) string { return dur(r.Elapsed) })
	row("throughput (seats/s)", func(r *Result) string {
		if r.Elapsed <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", float64(r.Booked)/r.Elapsed.Seconds())
	})
	row("queue order checked (bad)", func(r *Result) string {
		if r.Kind != Fair {
			return "-"
		}
		return fmt.Sprintf("%d (%d)", r.QueueChecks, r.QueueMismatches)
	})
	if rs[0].Permits > 0 {
		row("booking windows (permits)", func(r *Result) string { return fmt.Sprint(r.Permits) })
		row("most permits held at once", func(r *Result) string { return fmt.Sprint(r.MaxHeld) })
	}
	row("lock keys left behind", func(r *Result) string { return fmt.Sprint(len(r.Leftover)) })
	b.WriteString(`
who:        c<client>g<goroutine>: c2g3 is goroutine 3 of client 2 (each client
            is one fairlock.Client, each goroutine books with its own handle).
arrival:    the order in which bookings' first lock attempts ran in Redis (taken
            one at a time, so exact); grant: the order the lock was granted.
lock grants: one per seat booked, plus one for each goroutine still waiting
            when the last seat sold: it gets the lock, finds no seat, and stops
            (so up to one more per goroutine than seats).
inversions: pairs of bookings granted in the opposite order of their arrival.
out of turn: grants made while an earlier arrival was still waiting.
queue order: after each queued arrival the fair queue was read and had to list
            waiters in arrival order, the newcomer last (or holding the lock:
            a release granted it meanwhile).
`)
	if rs[0].Permits > 0 {
		b.WriteString(`permits:    each booking holds one of the pool's permits (a booking window)
            for its hold; grant order is the order of the permits' fencing
            tokens, which the server draws as it grants.
`)
	}
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	io.WriteString(w, strings.Join(lines, "\n"))
}

// dur renders a duration with three significant figures or so.
func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
}

// reportMulti writes the table of a multi-seat run.
func reportMulti(w io.Writer, rs []*Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nEach booking wants 1-%d adjacent seats of a row (%d a row), all or none.\n\n", rs[0].Multi, RowWidth)
	row := func(label string, f func(r *Result) string) {
		fmt.Fprintf(&b, "%-32s", label)
		for _, r := range rs {
			fmt.Fprintf(&b, " %14s", f(r))
		}
		b.WriteString("\n")
	}
	row("", func(r *Result) string { return r.Kind })
	row("bookings done", func(r *Result) string { return fmt.Sprint(r.Done) })
	row("seats booked", func(r *Result) string { return fmt.Sprint(r.Booked) })
	row("double bookings", func(r *Result) string { return fmt.Sprint(r.DoubleBookings) })
	row("deadlocks/timeouts (gave up)", func(r *Result) string { return fmt.Sprint(r.Timeouts) })
	row("grants", func(r *Result) string { return fmt.Sprint(len(r.Bookings)) })
	row("grants finding a seat sold", func(r *Result) string { return fmt.Sprint(r.LostGrants()) })
	row("per-seat inversions (pairs)", func(r *Result) string {
		inv, pairs := r.SeatInversions()
		return fmt.Sprintf("%d/%d", inv, pairs)
	})
	row("seats per goroutine, min-max", func(r *Result) string {
		lo, hi := r.Booked, 0
		for _, s := range r.PerContender {
			lo, hi = min(lo, s), max(hi, s)
		}
		return fmt.Sprintf("%d-%d", lo, hi)
	})
	for _, p := range []float64{50, 99, 100} {
		label := fmt.Sprintf("wait p%g", p)
		if p == 100 {
			label = "wait max"
		}
		row(label, func(r *Result) string { return dur(r.WaitPercentile(p)) })
	}
	row("elapsed", func(r *Result) string { return dur(r.Elapsed) })
	row("throughput (seats/s)", func(r *Result) string {
		if r.Elapsed <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", float64(r.Booked)/r.Elapsed.Seconds())
	})
	row("lock keys left behind", func(r *Result) string { return fmt.Sprint(len(r.Leftover)) })
	if slices.ContainsFunc(rs, func(r *Result) bool { return r.Unseen > 0 }) {
		row("arrivals not seen in Redis", func(r *Result) string { return fmt.Sprint(r.Unseen) })
	}
	b.WriteString(`
seats:      multi.NewSeats, the fair multi-seat hold: one script joins every
            seat's queue; granted when it heads them all.
multilock:  multi.New over one reentrant lock per seat, taken in the
            canonical order (slot, name).
naive:      one reentrant lock per seat, taken in the buyer's order.
arrival:    the moment a booking's first lock script ran in Redis (taken one
            at a time, so exact); grant: the order holders entered.
inversions: pairs of grants naming a common seat, granted in the opposite
            order of their arrival.
double:     a seat whose holder record (HSETNX while held) or booking was
            already another's: two holders at once.
gave up:    acquisitions still waiting after --give-up; the buyer chose again.
grants:     every acquisition that got its seats, including those that then
            found a seat sold (the next row) and booked nothing.
`)
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	io.WriteString(w, strings.Join(lines, "\n"))
}

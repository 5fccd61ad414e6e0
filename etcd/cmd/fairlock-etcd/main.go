// Command fairlock-etcd demonstrates the etcd engine of fairlock.
//
//	fairlock-etcd demo [--etcd host:port] [--clients N] [--goroutines N] [--seats N] [--hold D] [--lock fairlock|etcd-mutex|both]
//
// The demo is the seat sale of `fairlock demo` on etcd: several clients,
// each with several goroutines, book numbered seats under one lock, first
// under fairlock's etcd fair lock (etcd.Client.NewMutex), then under etcd's
// own concurrency.Mutex. With no --etcd it starts an embedded one-member
// etcd on loopback, its data in a temporary directory, so no server is
// needed.
//
// Arrival order is exact: a waiter joins the queue of either lock by
// putting a key, and that key's create revision (etcd's total order of
// writes) is its arrival; the fair lock's fencing token is that revision,
// and concurrency.Mutex's IsOwner comparison carries it. Grants are numbered
// inside the critical section, so the grant order is exact too. A grant is
// out of order when an earlier grant went to a later arrival.
package main

import (
	"github.com/fairlock-go/fairlock/etcd/internal/embedded"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run1(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: fairlock-etcd demo [--etcd host:port] [--clients N] [--goroutines N] [--seats N] [--hold D] [--lock fairlock|etcd-mutex|both] [--fsync=false]")
}

// run1 is the command; it returns the exit status.
func run1(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "demo" {
		usage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c Config
	endpoint := fs.String("etcd", "", "etcd client endpoint host:port (default: an embedded etcd on loopback)")
	fs.IntVar(&c.Clients, "clients", 4, "etcd clients")
	fs.IntVar(&c.Goroutines, "goroutines", 4, "goroutines per client, each with its own lock handle")
	fs.IntVar(&c.Seats, "seats", 200, "seats to book")
	fs.DurationVar(&c.Hold, "hold", 2*time.Millisecond, "mean time the lock is held per booking")
	kind := fs.String("lock", "both", "fairlock, etcd-mutex or both")
	fsync := fs.Bool("fsync", true, "embedded etcd: fsync its log (as a real etcd does)")
	seed := fs.Uint64("seed", 1, "seed of the hold-time jitter")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	c.Seed = *seed
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fairlock-etcd: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected arguments %q", fs.Args())
	case c.Clients < 1 || c.Goroutines < 1 || c.Seats < 1:
		return bad("--clients, --goroutines and --seats must be at least 1")
	case c.Clients*c.Goroutines > 1000:
		return bad("--clients x --goroutines must be at most 1000")
	case c.Hold < 0:
		return bad("--hold must not be negative")
	}
	switch *kind {
	case "both":
		c.Kinds = []string{KindFair, KindEtcdMutex}
	case KindFair, KindEtcdMutex:
		c.Kinds = []string{*kind}
	default:
		return bad("--lock %q: must be %s, %s or both", *kind, KindFair, KindEtcdMutex)
	}
	desc := *endpoint
	if *endpoint == "" {
		e, err := embedded.Start(*fsync)
		if err != nil {
			return bad("embedded etcd: %v", err)
		}
		defer e.Close()
		c.Endpoint = e.Endpoint
		f := "fsync on"
		if !*fsync {
			f = "fsync off"
		}
		desc = fmt.Sprintf("embedded, one member at %s (%s), data in a temporary directory", e.Endpoint, f)
	} else {
		c.Endpoint = *endpoint
	}
	c.Prefix = NewPrefix()
	fmt.Fprintf(stdout, "Seat booking: %d clients x %d goroutines book %d seats, lock held ~%v per booking\n",
		c.Clients, c.Goroutines, c.Seats, c.Hold)
	fmt.Fprintf(stdout, "etcd: %s; keys under %q\n\n", desc, c.Prefix+"/")
	rs, err := Run(ctx, c, stdout)
	Report(stdout, rs)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "fairlock-etcd: interrupted")
			return 130
		}
		fmt.Fprintf(stderr, "fairlock-etcd: %v\n", err)
		return 1
	}
	status := 0
	for _, r := range rs {
		if v := r.Violations(c.Seats); len(v) > 0 {
			fmt.Fprintf(stderr, "fairlock-etcd: %s: %s\n", r.Kind, strings.Join(v, ", "))
			if r.Kind == KindFair {
				status = 1
			}
		}
	}
	return status
}

// Report writes the results side by side.
func Report(w io.Writer, rs []*Result) {
	if len(rs) == 0 {
		return
	}
	var b strings.Builder
	b.WriteString("\n")
	row := func(label string, f func(r *Result) string) {
		fmt.Fprintf(&b, "%-32s", label)
		for _, r := range rs {
			fmt.Fprintf(&b, " %14s", f(r))
		}
		b.WriteString("\n")
	}
	row("", func(r *Result) string { return r.Kind })
	row("seats booked", func(r *Result) string { return fmt.Sprint(r.Booked) })
	row("double bookings", func(r *Result) string { return fmt.Sprint(r.DoubleBookings) })
	row("overlapping holds", func(r *Result) string { return fmt.Sprint(r.Overlaps) })
	row("lock grants", func(r *Result) string { return fmt.Sprint(len(r.Bookings)) })
	row("grants out of arrival order", func(r *Result) string { return fmt.Sprint(r.OutOfOrder()) })
	for _, p := range []float64{50, 99, 100} {
		label := fmt.Sprintf("wait p%g", p)
		if p == 100 {
			label = "wait max"
		}
		row(label, func(r *Result) string { return dur(r.WaitPercentile(p)) })
	}
	row("elapsed", func(r *Result) string { return dur(r.Elapsed) })
	row("throughput (seats/s)", func(r *Result) string { return fmt.Sprintf("%.0f", r.SeatsPerSecond()) })
	row("keys left behind", func(r *Result) string { return fmt.Sprint(r.Leftover) })
	b.WriteString("\n(arrival: the create revision of the waiter's key; grant: numbered inside the lock)\n")
	fmt.Fprint(w, b.String())
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
}

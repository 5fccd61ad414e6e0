// Command fairlock shows the fair lock at work and looks inside a lock.
//
//	go run ./cmd/fairlock demo                      # seat booking on an embedded Redis
//	go run ./cmd/fairlock demo --redis 127.0.0.1:6379 --seats 500
//	go run ./cmd/fairlock demo --multi 4 --lock all  # 1-4 adjacent seats a booking
//	go run ./cmd/fairlock demo --svg chart.svg      # the chart's path ("" for none)
//	go run ./cmd/fairlock inspect seats --redis 127.0.0.1:6379 [--json]
//	go run ./cmd/fairlock inspect seats --redis 127.0.0.1:6379 --watch [--interval 500ms]
//	go run ./cmd/fairlock functions --redis 127.0.0.1:6379 [--prune]
//
// demo: clients book numbered seats under the fair lock and then under the
// reentrant (unfair) lock, and it compares arrival order with grant order,
// waits and throughput, and writes an SVG chart of arrival rank against
// grant rank and of the waits (--svg, default fairlock-demo.svg; --svg ""
// writes none; not with --multi). Without --redis it runs on an embedded miniredis;
// with --redis the name of every key it makes contains a random
// "fairlock-demo:<hex>:" prefix, its data keys are deleted at the end, the
// lock's keys are gone once the lock is released, and the unlock latches
// expire within 10 s. It never flushes.
//
// inspect: reads everything the library keeps under NAME and says which
// kind it found: a lock (reentrant, fenced, or fair with either queue
// engine), a read-write lock, a fair semaphore, a permit-expirable
// semaphore (Redisson's RPermitExpirableSemaphore keys), or a seat venue
// of the multi-seat hold (NAME a seat of it, or the venue's hash tag);
// each kind found is shown, when a name has keys of several. Per kind: the
// holders with their hold counts, permits or seats and the lease left;
// the queue in order with each waiter's deadline (and ask); the head
// grace; the pool and the permits available; the fencing token counter;
// and any inconsistency in that state. A name with no key of any kind is
// "no such lock" (exit 4). It sends only read commands. With --watch it
// reads the name again every --interval (1s) and prints each frame, with
// the unlock, acquisition and release latch keys (a bounded SCAN MATCH),
// until interrupted or --count frames: on a terminal it redraws the
// screen, else it prints the frames one after the other under a line with
// the frame's time; with --json, one JSON object a line. A Redis error is
// shown in its frame and the watch goes on.
//
// functions: lists the Redis function libraries the library loaded on the
// server (fairlock_<sha1>, one per script, on Redis 7 and later) and says
// which of them this build's scripts use; --prune deletes the others,
// which earlier (or later) versions loaded and which stay on the server
// until deleted. A client of another version that still runs loads its
// own again at its next call. Given a node of a Redis Cluster, it reads
// (and prunes) every primary's libraries.
//
// Exit codes: 0 done; 1 an error (such as an unreachable Redis); 2 bad
// usage; 3 inspect found an inconsistency of severity error; 4 inspect
// found no such lock (no key of any kind under NAME); 130 interrupted
// (Ctrl-C).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/cmd/fairlock/internal/demo"
	"github.com/fairlock-go/fairlock/cmd/fairlock/internal/inspect"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/wire"
)

const usage = `fairlock: demo and inspector of the fairlock Redis locks

Usage:
  fairlock [demo] [flags]         book seats under the fair lock, then the
                                  reentrant lock, and compare the two
  fairlock inspect NAME [flags]   show what is kept under NAME, and which
                                  kind it is: lock (reentrant, fenced, fair),
                                  read-write lock, fair semaphore, permit-
                                  expirable semaphore, seat venue (NAME a
                                  seat or the venue's tag); its holders,
                                  leases, queue and deadlines, pool and free
                                  permits, head grace, token, inconsistencies
                                  (read-only; "no such lock": exit 4)
  fairlock functions [flags]      list the Redis function libraries the
                                  library loaded (fairlock_<sha1>, Redis 7+)
                                  and which this build uses
  fairlock help                   this text

demo flags:
  --clients N      clients (each its own connection pool)     (default 4)
  --goroutines N   goroutines per client, one handle each     (default 4)
  --seats N        seats to book                              (default 200)
  --hold D         mean time the lock is held per booking     (default 2ms)
  --lock KIND      fair, reentrant or both                    (default both)
                   (with --permits: fair-semaphore, semaphore or both)
  --engine E       the fair lock's engine: redisson (Redisson's keys, Java
                   clients can share the lock) or scalable (O(1) per
                   operation, Go clients only)           (default redisson)
  --permits N      N booking windows: each booking holds one permit of a
                   semaphore of N, the fair one then Redisson's (unfair)
  --multi N        each booking wants 1-N adjacent seats of a row (N <= 10),
                   all or none: the fair multi-seat hold, then a MultiLock
                   of per-seat locks (--lock seats, multilock, naive, both
                   or all; naive: per-seat locks in the buyer's order)
  --give-up D      with --multi: an acquisition still waiting after D is
                   given up and counted (ends deadlocks) (default 2s)
  --redis ADDR     host:port or redis:// URL of a Redis to use
                   (default: an embedded miniredis)
  --seed N         seed of the hold-time jitter               (default 1)
  --grants N       rows of the arrival/grant table            (default 16)
  --svg PATH       write a chart (arrival vs grant order, waits) to PATH,
                   for a browser; "" for none  (default fairlock-demo.svg)
                   (not with --multi)
  -q               no progress lines
  --stale-writer   instead: a booker paused past its lease writes late
                   and the fencing token rejects its write

inspect flags:
  --redis ADDR     host:port or redis:// URL (required)
  --json           print a JSON document instead of text
                   (with --watch: one JSON object a frame, a line each)
  --watch          read and print NAME again every interval, with its
                   latch keys, until Ctrl-C (exit 130);
                   a terminal is redrawn, else frames follow each other
                   under a "=== frame N at TIME ===" line; a Redis error
                   is shown in its frame and the watch goes on (a Redis
                   unreachable at the start is exit 1)
  --interval D     time between frames, 10ms to 1h             (default 1s)
  --count N        stop after N frames, with the exit code of the last
                   (0, 1 Redis error, 3 inconsistency, 4 no such lock)
                   (default 0: never)

functions flags:
  --redis ADDR     host:port or redis:// URL (required); a node of a
                   cluster: every primary is read
  --prune          delete the libraries this build does not use (other
                   versions'; a running client of one loads its own
                   again at its next call)

Exit codes: 0 done, 1 error (e.g. Redis unreachable), 2 bad usage,
3 inspect found an inconsistency, 4 inspect found no such lock (no key
of any kind under NAME), 130 interrupted.
`

// connectTimeout bounds reaching Redis before anything else is done.
const connectTimeout = 3 * time.Second

func main() {
	// go-redis logs each failed dial to stderr; the program reports one
	// line of its own instead.
	redis.SetLogger(quietLog{})
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type quietLog struct{}

func (quietLog) Printf(context.Context, string, ...any) {}

// run is the program: it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runCtx(ctx, args, stdout, stderr)
}

// runCtx is run with the context that Ctrl-C cancels.
func runCtx(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "demo"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "inspect":
		return runInspect(ctx, args, stdout, stderr)
	case "functions":
		return runFunctions(ctx, args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "fairlock: unknown command %q\n\n%s", cmd, usage)
	return 2
}

// newFlags makes a flag set that reports errors (and -h) with the usage.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fairlock "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, "\n"+usage) }
	return fs
}

// usageError returns the report of a bad use of command name: the message,
// then the usage; it returns exit code 2.
func usageError(name string, stderr io.Writer) func(format string, a ...any) int {
	return func(format string, a ...any) int {
		fmt.Fprintf(stderr, "fairlock "+name+": "+format+"\n\n%s", append(a, usage)...)
		return 2
	}
}

// parse parses flags that may come before and after positional arguments,
// and returns the positional ones. The exit code is 0 for -h, else 2.
func parse(fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, 0, false
			}
			return nil, 2, false
		}
		if fs.NArg() == 0 {
			return pos, 0, true
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// redisOptions reads --redis: host:port or a redis:// or rediss:// URL.
func redisOptions(addr string) (*redis.Options, error) {
	var o *redis.Options
	if strings.Contains(addr, "://") {
		var err error
		if o, err = redis.ParseURL(addr); err != nil {
			return nil, err
		}
	} else {
		if !strings.Contains(addr, ":") {
			return nil, fmt.Errorf("%q is not host:port", addr)
		}
		o = &redis.Options{Addr: addr}
	}
	o.DialTimeout = connectTimeout
	return o, nil
}

// ping checks that Redis answers within connectTimeout.
func ping(ctx context.Context, o *redis.Options) error {
	po := *o
	po.MaxRetries = -1 // one dial, bounded by the dial timeout
	c := redis.NewClient(&po)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot reach Redis at %s: %w", o.Addr, err)
	}
	return nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", stderr)
	c := demo.Config{}
	fs.IntVar(&c.Clients, "clients", 4, "")
	fs.IntVar(&c.Goroutines, "goroutines", 4, "")
	fs.IntVar(&c.Seats, "seats", 200, "")
	fs.DurationVar(&c.Hold, "hold", 2*time.Millisecond, "")
	kind := fs.String("lock", "both", "")
	engine := fs.String("engine", "redisson", "")
	addr := fs.String("redis", "", "")
	fs.Uint64Var(&c.Seed, "seed", 1, "")
	grants := fs.Int("grants", 16, "")
	svgPath := fs.String("svg", DefaultSVG, "")
	quiet := fs.Bool("q", false, "")
	stale := fs.Bool("stale-writer", false, "")
	fs.IntVar(&c.Permits, "permits", 0, "")
	fs.IntVar(&c.Multi, "multi", 0, "")
	fs.DurationVar(&c.GiveUp, "give-up", demo.DefaultGiveUp, "")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	bad := usageError("demo", stderr)
	if len(pos) > 0 {
		return bad("unexpected argument %q", pos[0])
	}
	switch {
	case c.Multi > 0 && *kind == "both":
		c.Kinds = []string{demo.SeatsHold, demo.MultiLock}
	case c.Multi > 0 && *kind == "all":
		c.Kinds = []string{demo.SeatsHold, demo.MultiLock, demo.Naive}
	case c.Multi > 0 && (*kind == demo.SeatsHold || *kind == demo.MultiLock || *kind == demo.Naive):
		c.Kinds = []string{*kind}
	case c.Multi > 0:
		return bad("--lock %q with --multi: must be %s, %s, %s, both or all", *kind, demo.SeatsHold, demo.MultiLock, demo.Naive)
	case *kind == "both" && c.Permits > 0:
		c.Kinds = []string{demo.FairSemaphore, demo.Semaphore}
	case *kind == "both":
		c.Kinds = []string{demo.Fair, demo.Reentrant}
	case c.Permits > 0 && (*kind == demo.FairSemaphore || *kind == demo.Semaphore):
		c.Kinds = []string{*kind}
	case c.Permits > 0:
		return bad("--lock %q with --permits: must be %s, %s or both", *kind, demo.FairSemaphore, demo.Semaphore)
	case *kind == demo.Fair || *kind == demo.Reentrant:
		c.Kinds = []string{*kind}
	default:
		return bad("--lock %q: must be fair, reentrant or both", *kind)
	}
	switch *engine {
	case "redisson":
	case "scalable":
		c.Engine = fair.Scalable
	default:
		return bad("--engine %q: must be redisson or scalable", *engine)
	}
	if *stale && flagSet(fs, "engine") {
		return bad("--engine with --stale-writer: the stale-writer demo has a lock of its own")
	}
	if *grants < 0 {
		return bad("--grants %d: must be 0 or more", *grants)
	}
	// Sizes are checked before anything is started or sent.
	c.Prefix = demo.RandomPrefix()
	if err := c.Validate(); err != nil {
		return bad("%v", err)
	}
	desc := ""
	var mini *miniredis.Miniredis
	if *addr == "" {
		srv, err := miniredis.Run()
		if err != nil {
			fmt.Fprintf(stderr, "fairlock demo: start embedded Redis: %v\n", err)
			return 1
		}
		defer srv.Close()
		mini = srv
		c.Redis = &redis.Options{Addr: srv.Addr()}
		desc = "embedded miniredis (" + srv.Addr() + ")"
	} else {
		o, err := redisOptions(*addr)
		if err != nil {
			return bad("--redis: %v", err)
		}
		c.Redis = o
		desc = o.Addr
	}
	if err := ping(ctx, c.Redis); err != nil {
		if ctx.Err() != nil {
			return interrupted(stderr)
		}
		fmt.Fprintf(stderr, "fairlock demo: %v\n", err)
		return 1
	}
	if *stale {
		return runStale(ctx, c, mini, desc, stdout, stderr)
	}
	if !*quiet {
		c.Progress = stdout
	}
	demo.Header(stdout, c, desc)
	results, err := demo.Run(ctx, c)
	if ctx.Err() != nil {
		return interrupted(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fairlock demo: %v\n", err)
		return 1
	}
	demo.Report(stdout, results, *grants)
	if *svgPath != "" && c.Multi == 0 {
		if err := writeChart(*svgPath, results, c, desc); err != nil {
			fmt.Fprintf(stderr, "fairlock demo: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nChart (arrival vs grant order, waits) written to %s: open it in a browser.\n", *svgPath)
	} else if *svgPath != "" && flagSet(fs, "svg") {
		fmt.Fprintf(stdout, "\nNo chart with --multi: its grant numbers order only bookings that share a seat.\n")
	}
	for _, r := range results {
		if r.Permits > 0 && r.MaxHeld > r.Permits {
			fmt.Fprintf(stderr, "fairlock demo: the %s run held %d permits at once, of a pool of %d\n", r.Kind, r.MaxHeld, r.Permits)
			return 1
		}
		if inv, _ := r.SeatInversions(); r.Kind == demo.SeatsHold && inv > 0 {
			fmt.Fprintf(stderr, "fairlock demo: the %s run granted %d pairs out of arrival order on a common seat\n", r.Kind, inv)
			return 1
		}
		if r.DoubleBookings > 0 || r.QueueMismatches > 0 {
			fmt.Fprintf(stderr, "fairlock demo: the %s lock run found %d double bookings and %d queue-order mismatches\n",
				r.Kind, r.DoubleBookings, r.QueueMismatches)
			return 1
		}
	}
	return 0
}

// flagSet tells whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// DefaultSVG is where demo writes its chart unless --svg says otherwise.
const DefaultSVG = "fairlock-demo.svg"

// writeChart writes the SVG chart of results to path.
func writeChart(path string, results []*demo.Result, c demo.Config, desc string) error {
	if strings.HasPrefix(desc, "embedded miniredis") {
		desc = "embedded miniredis" // not its random port
	}
	sub := fmt.Sprintf("%d clients x %d goroutines book %d seats, lock held ~%v per booking; Redis: %s",
		c.Clients, c.Goroutines, c.Seats, c.Hold, desc)
	if c.Permits > 0 {
		sub = fmt.Sprintf("%d clients x %d goroutines book %d seats through %d windows (permits), held ~%v; Redis: %s",
			c.Clients, c.Goroutines, c.Seats, c.Permits, c.Hold, desc)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	if err := demo.WriteSVG(f, results, demo.ChartInfo{Subtitle: sub}); err != nil {
		f.Close()
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	return nil
}

// runStale is demo --stale-writer: exit 1 unless the late write was
// rejected and the seat kept the fresh booking.
func runStale(ctx context.Context, c demo.Config, mini *miniredis.Miniredis, desc string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "Redis: %s; key names contain %q\n\n", desc, c.Prefix)
	r, err := demo.RunStale(ctx, demo.StaleConfig{Redis: c.Redis, Prefix: c.Prefix, Mini: mini})
	if ctx.Err() != nil {
		return interrupted(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fairlock demo: %v\n", err)
		return 1
	}
	demo.ReportStale(stdout, r)
	if a, ok := r.Step("A"); !ok || a.Result.Accepted || r.FinalHolder != "B" {
		fmt.Fprintln(stderr, "fairlock demo: the stale write was not rejected")
		return 1
	}
	return 0
}

func interrupted(stderr io.Writer) int {
	fmt.Fprintln(stderr, "fairlock: interrupted: waits cancelled, held locks released, stopped")
	return 130
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inspect", stderr)
	addr := fs.String("redis", "", "")
	asJSON := fs.Bool("json", false, "")
	watch := fs.Bool("watch", false, "")
	interval := fs.Duration("interval", time.Second, "")
	count := fs.Int("count", 0, "")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	bad := usageError("inspect", stderr)
	switch {
	case len(pos) == 0:
		return bad("missing the lock NAME")
	case len(pos) > 1:
		return bad("one lock NAME expected, got %d arguments", len(pos))
	case *addr == "":
		return bad("--redis host:port is required")
	case !*watch && (flagSet(fs, "interval") || flagSet(fs, "count")):
		return bad("--interval and --count go with --watch")
	case *interval < minInterval || *interval > maxInterval:
		return bad("--interval %v: must be from %v to %v", *interval, minInterval, maxInterval)
	case *count < 0:
		return bad("--count %d: must be 0 (until interrupted) or more", *count)
	}
	name := pos[0]
	if err := wire.ValidateName(name); err != nil {
		fmt.Fprintf(stderr, "fairlock inspect: %v\n", err)
		return 2
	}
	o, err := redisOptions(*addr)
	if err != nil {
		return bad("--redis: %v", err)
	}
	if err := ping(ctx, o); err != nil {
		if *watch && ctx.Err() != nil {
			return watchInterrupted(stderr)
		}
		fmt.Fprintf(stderr, "fairlock inspect: %v\n", err)
		return 1
	}
	if *watch {
		// A frame must not hang on a Redis that went away: one retry,
		// one dial a try (the next frame tries again), and each frame's
		// reads are bounded (frameTimeout).
		o.MaxRetries, o.DialerRetries = 1, 1
		rdb := redis.NewClient(o)
		defer rdb.Close()
		return watchLock(ctx, rdb, name, watchConfig{interval: *interval, count: *count,
			json: *asJSON, terminal: isTerminal(stdout), addr: o.Addr}, stdout, stderr)
	}
	rdb := redis.NewClient(o)
	defer rdb.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := inspect.Read(rctx, rdb, name, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "fairlock inspect: %v\n", err)
		return 1
	}
	if *asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fairlock inspect: %v\n", err)
		return 1
	}
	return reportCode(rep)
}

// reportCode is inspect's exit code for a report: 4 no such lock, 3 an
// inconsistency of severity error, else 0.
func reportCode(r *inspect.Report) int {
	switch {
	case !r.Found:
		return exitNoSuchLock
	case !r.OK:
		return 3
	}
	return 0
}

// exitNoSuchLock is inspect's exit code for a name with no key of any kind.
const exitNoSuchLock = 4

// Bounds of inspect --interval: faster would only load Redis (each frame is
// a transaction and a SCAN), slower is no longer a live view.
const (
	minInterval = 10 * time.Millisecond
	maxInterval = time.Hour
)

// frameTimeout bounds the reads of one frame of inspect --watch.
const frameTimeout = 5 * time.Second

type watchConfig struct {
	interval time.Duration
	count    int // frames; 0 for until interrupted
	json     bool
	terminal bool // clear the screen between frames
	addr     string
}

// clearScreen moves the cursor home and clears a terminal.
const clearScreen = "\x1b[H\x1b[2J"

// watchLock is inspect --watch: it reads and prints the lock every
// interval. It returns 130 when interrupted; after c.count frames, the
// exit code inspect would give for the last one (0, 1 for a Redis error, 3
// for an inconsistency of severity error).
func watchLock(ctx context.Context, rdb *redis.Client, name string, c watchConfig, stdout, stderr io.Writer) int {
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		fctx, cancel := context.WithTimeout(ctx, frameTimeout)
		f := inspect.ReadFrame(fctx, rdb, name, n, time.Now())
		cancel()
		if ctx.Err() != nil {
			return watchInterrupted(stderr)
		}
		var err error
		switch {
		case c.json:
			err = f.WriteNDJSON(stdout)
		case c.terminal:
			head := fmt.Sprintf("%sfairlock inspect --watch  %s  every %v  frame %d  %s  (Ctrl-C to stop)",
				clearScreen, c.addr, c.interval, n, f.Time[11:23]+" UTC")
			err = f.WriteText(stdout, head)
		default:
			sep := ""
			if n > 1 {
				sep = "\n"
			}
			err = f.WriteText(stdout, fmt.Sprintf("%s=== frame %d at %s ===", sep, n, f.Time))
		}
		if err != nil {
			fmt.Fprintf(stderr, "fairlock inspect: %v\n", err)
			return 1
		}
		if c.count > 0 && n >= c.count {
			if f.Error != "" {
				return 1
			}
			return reportCode(f.Report)
		}
		select {
		case <-ctx.Done():
			return watchInterrupted(stderr)
		case <-tick.C:
		}
	}
}

func watchInterrupted(stderr io.Writer) int {
	fmt.Fprintln(stderr, "fairlock inspect: interrupted: stopped watching")
	return 130
}

// isTerminal tells whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

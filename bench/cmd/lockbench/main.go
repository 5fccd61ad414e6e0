// Command lockbench benchmarks this project's locks against redsync,
// bsm/redislock and rueidislock, and against the floor of one Redis, and
// prints markdown tables (medians over rounds, with min and max), ending
// with issue 23's targets judged on the run, as a table to paste into
// docs/benchmarks.md.
//
//	cd bench && go run ./cmd/lockbench                 # everything, 5 rounds
//	cd bench && go run ./cmd/lockbench --quick         # a smoke run of seconds
//	cd bench && go run ./cmd/lockbench --only floor,uncontended --rounds 3
//	cd bench && go run ./cmd/lockbench --redis 127.0.0.1:6379
//	cd bench && go run ./cmd/lockbench --only semaphore --rounds 7   # issue 21: the fair semaphore against the fair lock
//	cd bench && go run ./cmd/lockbench --only seats --rounds 9       # issue 22: a fair 4-seat hold against one fair lock
//
// Without --redis it starts its own redis-server on a free 127.0.0.1 port
// (no persistence), killed at exit. With --redis it touches only keys under
// its own random "lockbench:<hex>:" namespace, deletes them at the end and
// never flushes; the SLOWLOG figures are then left out, and the Redis CPU
// figures include whatever else that server does.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/fairlock-go/fairlock/bench/runner"
)

func main() {
	var (
		redisAddr = flag.String("redis", "", "host:port of an existing Redis (default: start a redis-server on a free loopback port)")
		rounds    = flag.Int("rounds", 5, "repetitions of every scenario, interleaved across libraries")
		drainR    = flag.Int("drain-rounds", 0, "cap on the drain scenario's rounds (default: --rounds)")
		sizes     = flag.String("sizes", "", "comma-separated fair-queue drain sizes (default 100,1000,10000; with --quick 5,20)")
		semSizes  = flag.String("sem-sizes", "", "comma-separated queue sizes of the semaphore scenario's Redis work per grant (default 10,100,1000; with --quick 4,8)")
		quick     = flag.Bool("quick", false, "tiny sizes: a smoke run that takes seconds")
		only      = flag.String("only", "", "comma-separated scenarios: "+strings.Join(runner.Scenarios, ","))
		libs      = flag.String("libs", "", "comma-separated libraries (default: all)")
		quiet     = flag.Bool("q", false, "no progress lines on stderr")
	)
	flag.Parse()
	cfg := runner.Config{Redis: *redisAddr, Rounds: *rounds, DrainRounds: *drainR, Quick: *quick, Log: os.Stderr}
	if *quiet {
		cfg.Log = nil
	}
	cfg.Sizes = numbers("sizes", *sizes)
	cfg.SemSizes = numbers("sem-sizes", *semSizes)
	cfg.Only = splitList(*only)
	cfg.Libs = splitList(*libs)
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := runner.Run(ctx, cfg)
	if res != nil {
		fmt.Printf("Command: `cd bench && go run ./cmd/lockbench %s`\n\n", strings.Join(os.Args[1:], " "))
		res.Markdown(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
	if len(res.Errors) > 0 {
		os.Exit(1)
	}
}

// numbers parses a comma-separated list of numbers given to --flag (exit 2
// when one is not a number).
func numbers(flagName, list string) []int {
	var out []int
	for _, s := range splitList(list) {
		n, err := strconv.Atoi(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lockbench: --%s: %q is not a number\n", flagName, s)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// Command pacedscript measures what a Lua script costs Redis when Redis
// wakes for it, as a lock's release does (one call every few ms), not back
// to back as redis-benchmark runs it: each script (a file, loaded with
// SCRIPT LOAD and called with EVALSHA, or "fcall:NAME", a function of a
// library loaded beforehand) is called once per turn, the scripts taking
// turns, with a pause before each call; the figure is Redis's own duration
// of the call (SLOWLOG with a threshold of 0, reset before each call), so
// a script that sends commands of its own is measured with SLOWLOG's cost
// for each of them too.
//
//	go run ./cmd/pacedscript --redis 127.0.0.1:6455 return1.lua prelude.lua fcall:name
//	go run ./cmd/pacedscript --print main:fair_unlock.lua > fair_unlock.lua
//
// --print writes a script as the library composes it ("main" for the
// reentrant, fenced, read-write and Redisson-engine fair sets; "scalable",
// "semfair", "seats").
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
	_ "github.com/fairlock-go/fairlock/lua"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "host:port of a Redis you may reconfigure (SLOWLOG)")
	gap := flag.Duration("gap", 5*time.Millisecond, "pause before each call")
	n := flag.Int("n", 150, "calls per script")
	show := flag.String("print", "", "set:file: print that composed script and exit")
	flag.Parse()
	if *show != "" {
		set, file, _ := strings.Cut(*show, ":")
		src := map[string]func(string) string{"main": wire.Source, "scalable": wire.ScalableSource,
			"semfair": wire.SemFairSource, "seats": wire.SeatsSource}[set]
		if src == nil {
			fmt.Fprintln(os.Stderr, "pacedscript: --print set is main, scalable, semfair or seats")
			os.Exit(2)
		}
		fmt.Print(src(file))
		return
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()
	names := flag.Args()
	shas := make([]string, len(names))
	for i, f := range names {
		if strings.HasPrefix(f, "fcall:") {
			shas[i] = f
			continue
		}
		b, err := os.ReadFile(f)
		if err == nil {
			shas[i], err = rdb.ScriptLoad(ctx, string(b)).Result()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "pacedscript:", err)
			os.Exit(1)
		}
	}
	was, err := rdb.ConfigGet(ctx, "slowlog-log-slower-than").Result()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pacedscript:", err)
		os.Exit(1)
	}
	defer rdb.ConfigSet(ctx, "slowlog-log-slower-than", was["slowlog-log-slower-than"])
	rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	d := make([][]int64, len(names))
	for range *n {
		for i, sha := range shas {
			time.Sleep(*gap)
			rdb.SlowLogReset(ctx)
			if f, ok := strings.CutPrefix(sha, "fcall:"); ok {
				rdb.FCall(ctx, f, []string{"pacedscript{p}"})
			} else {
				rdb.EvalSha(ctx, sha, []string{"pacedscript{p}"})
			}
			l, _ := rdb.SlowLogGet(ctx, 100).Result()
			for _, e := range l {
				if c := strings.ToLower(e.Args[0]); c == "evalsha" || c == "fcall" {
					d[i] = append(d[i], e.Duration.Microseconds())
				}
			}
		}
	}
	for i := range d {
		if len(d[i]) == 0 {
			fmt.Printf("%-30s no calls logged\n", names[i])
			continue
		}
		slices.Sort(d[i])
		fmt.Printf("%-30s median %d µs  p10 %d  p90 %d  (n=%d)\n", names[i], d[i][len(d[i])/2], d[i][len(d[i])/10], d[i][len(d[i])*9/10], len(d[i]))
	}
}

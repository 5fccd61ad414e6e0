// Command alternate measures issue 33's strict alternation of two clients
// against the chain floor of the same server, in one run: the waiter is in
// Lock (a context with a deadline) 2 ms before the holder's Unlock (a
// context.WithTimeout); a handoff is from the Unlock call to the waiter's
// Lock return. The floor is a script that publishes, the delivery to a
// subscriber on another connection, and that subscriber's script. Kinds
// take turns in chunks, so that a slow spell hits all alike; each round
// prints every kind's median and its ratio to the round's floor.
//
//	go run ./cmd/alternate --redis 127.0.0.1:6379 --rounds 5 --n 200
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/reentrant"
)

type locker interface {
	Lock(context.Context) error
	Unlock(context.Context) error
}

func main() {
	addr := flag.String("redis", "", "host:port of a Redis (this or --cluster is required)")
	cluster := flag.String("cluster", "", "comma-separated host:port seeds of a Redis Cluster: the locks' clients are *redis.ClusterClient, and the floor runs on the primary of its key's slot")
	rounds := flag.Int("rounds", 5, "rounds")
	n := flag.Int("n", 200, "handoffs per kind per round")
	only := flag.String("kinds", "", "comma-separated kinds (default: reentrant,fair,scalable)")
	chunk := flag.Int("chunk", 50, "handoffs per turn of a kind")
	cpu := flag.String("cpuprofile", "", "write a CPU profile of this process to the file")
	evalsha := flag.Bool("evalsha", false, "also run each kind over clients made WithFunctions(false) (\"<kind>/evalsha\": the scripts sent with EVALSHA, not as Redis Functions), taking turns with the others")
	flag.BoolVar(&background, "background", false, "call Lock and Unlock with context.Background (no deadline: the library runs its calls inline, no worker hop) instead of a context.WithTimeout")
	flag.Parse()
	if *cpu != "" {
		f, err := os.Create(*cpu)
		if err != nil {
			panic(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			panic(err)
		}
		defer pprof.StopCPUProfile()
	}
	if (*addr == "") == (*cluster == "") {
		fmt.Fprintln(os.Stderr, "one of --redis and --cluster is required")
		os.Exit(2)
	}
	ctx := context.Background()
	mk := func(opts ...fairlock.Option) (redis.UniversalClient, *fairlock.Client) {
		var rdb redis.UniversalClient
		if *cluster != "" {
			rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*cluster, ",")})
		} else {
			rdb = redis.NewClient(&redis.Options{Addr: *addr})
		}
		fl, err := fairlock.NewClient(rdb, opts...)
		if err != nil {
			panic(err)
		}
		return rdb, fl
	}
	u1, c1 := mk()
	u2, c2 := mk()
	defer u1.Close()
	defer u2.Close()
	defer c1.Close()
	defer c2.Close()
	prefix := fmt.Sprintf("alt%d:", time.Now().UnixNano())
	// The floor's keys share a hash tag, so that on a cluster they are
	// one slot's, served by the node client of its primary.
	floorCh := "{" + prefix + "floor}"
	r1, r2 := asClient(ctx, u1, floorCh), asClient(ctx, u2, floorCh)
	type kind struct {
		name string
		x, y locker
	}
	var kinds []kind
	add := func(suffix string, c1, c2 *fairlock.Client) {
		a, _ := reentrant.New(c1, prefix+"re"+suffix)
		b, _ := reentrant.New(c2, prefix+"re"+suffix)
		kinds = append(kinds, kind{"reentrant" + suffix, a, b})
		f1, _ := fair.New(c1, prefix+"fr"+suffix)
		f2, _ := fair.New(c2, prefix+"fr"+suffix)
		kinds = append(kinds, kind{"fair" + suffix, f1, f2})
		s1, _ := fair.New(c1, prefix+"fs"+suffix, fair.WithEngine(fair.Scalable))
		s2, _ := fair.New(c2, prefix+"fs"+suffix, fair.WithEngine(fair.Scalable))
		kinds = append(kinds, kind{"scalable" + suffix, s1, s2})
	}
	add("", c1, c2)
	if *evalsha {
		r3, c3 := mk(fairlock.WithFunctions(false))
		r4, c4 := mk(fairlock.WithFunctions(false))
		defer r3.Close()
		defer r4.Close()
		defer c3.Close()
		defer c4.Close()
		add("/evalsha", c3, c4)
	}
	if *only != "" {
		var ks []kind
		for _, k := range kinds {
			if slices.Contains(strings.Split(*only, ","), strings.TrimSuffix(k.name, "/evalsha")) {
				ks = append(ks, k)
			}
		}
		kinds = ks
	}
	all := map[string][]float64{}
	for r := 0; r < *rounds; r++ {
		lat := map[string][]time.Duration{}
		for c := 0; c < max(1, *n / *chunk); c++ {
			lat["floor"] = append(lat["floor"], floor(ctx, r1, r2, floorCh, *chunk)...)
			for _, k := range kinds {
				lat[k.name] = append(lat[k.name], alternate(ctx, k.x, k.y, *chunk)...)
			}
		}
		fl := median(lat["floor"])
		fmt.Printf("round %d: floor %.1fµs", r+1, us(fl))
		for _, k := range kinds {
			m := median(lat[k.name])
			all[k.name] = append(all[k.name], float64(m)/float64(fl))
			fmt.Printf("  %s %.1fµs (%.2fx)", k.name, us(m), float64(m)/float64(fl))
		}
		fmt.Println()
	}
	fmt.Print("median ratio to floor:")
	for _, k := range kinds {
		v := all[k.name]
		slices.Sort(v)
		fmt.Printf("  %s %.2f", k.name, v[len(v)/2])
	}
	fmt.Println()
}

// asClient is u itself, or on a cluster the client of the primary that
// serves key.
func asClient(ctx context.Context, u redis.UniversalClient, key string) *redis.Client {
	if cc, ok := u.(*redis.ClusterClient); ok {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			panic(err)
		}
		return c
	}
	return u.(*redis.Client)
}

// background: Lock and Unlock get a context that never ends (--background).
var background bool

// opCtx is the context of one Lock or Unlock: with a timeout (as users call
// the library), or --background's.
func opCtx(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if background {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func alternate(ctx context.Context, x, y locker, n int) []time.Duration {
	hs := [2]locker{x, y}
	if err := hs[0].Lock(ctx); err != nil {
		panic(err)
	}
	holder := 0
	got := make(chan time.Time, 1)
	var lat []time.Duration
	for i := 0; i < n; i++ {
		w := 1 - holder
		go func() {
			lctx, cancel := opCtx(ctx, 10*time.Second)
			defer cancel()
			if err := hs[w].Lock(lctx); err != nil {
				panic(err)
			}
			got <- time.Now()
		}()
		time.Sleep(2 * time.Millisecond)
		uctx, cancel := opCtx(ctx, 5*time.Second)
		t0 := time.Now()
		if err := hs[holder].Unlock(uctx); err != nil {
			panic(err)
		}
		cancel()
		lat = append(lat, (<-got).Sub(t0))
		holder = w
	}
	uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = hs[holder].Unlock(uctx)
	return lat
}

var (
	pub  = redis.NewScript("redis.call('del', KEYS[1]); return redis.call('publish', KEYS[2], '0')")
	take = redis.NewScript("return redis.call('set', KEYS[1], ARGV[1], 'px', 30000)")
)

func floor(ctx context.Context, r1, r2 *redis.Client, ch string, n int) []time.Duration {
	ps := r2.Subscribe(ctx, ch)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		panic(err)
	}
	_ = pub.Load(ctx, r1).Err()
	_ = take.Load(ctx, r2).Err()
	got := make(chan time.Time, 1)
	go func() {
		for {
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				return
			}
			_ = take.EvalSha(ctx, r2, []string{ch + "k"}, "x").Err()
			got <- time.Now()
		}
	}()
	var lat []time.Duration
	for i := 0; i < n; i++ {
		time.Sleep(2 * time.Millisecond)
		t0 := time.Now()
		_ = pub.EvalSha(ctx, r1, []string{ch + "k", ch}).Err()
		lat = append(lat, (<-got).Sub(t0))
	}
	return lat
}

package runner

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// The handoff chain floor's two scripts: the least a lock's release and a
// woken waiter's acquisition can be. The release is unlock-like: it deletes
// the lock key and publishes on the lock's channel in one script; the
// acquisition sets the key if absent, with a lease.
var (
	chainRelease = redis.NewScript(`redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1`)
	chainAcquire = redis.NewScript(`if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', 30000) then return 1 end
return 0`)
)

// chainRig measures FloorChain: the releasing goroutine runs chainRelease
// (EVALSHA on its own connection); a goroutine subscribed on another
// connection receives the message and runs chainAcquire (EVALSHA on a third
// connection). A sample is from just before the release's call to just
// after the acquisition's reply, on one monotonic clock. The rig stays open
// across chunks, so that chunks can be interleaved with the libraries'
// handoff runs.
type chainRig struct {
	pub, acq, sub *redis.Client
	ps            *redis.PubSub
	keys          []string
	got           chan chainDone
	cancel        context.CancelFunc
	done          chan struct{}
}

func openChain(ctx context.Context, e *env, t *target) (*chainRig, error) {
	c := &chainRig{pub: e.goredis(), acq: e.goredis(), sub: redis.NewClient(&redis.Options{Addr: t.addr}),
		got: make(chan chainDone, 1), done: make(chan struct{})}
	lock := e.prefix + "chain"
	ch := "lockbench:chain:" + randomPrefix()
	c.keys = []string{lock, ch}
	fail := func(err error) (*chainRig, error) {
		_ = c.pub.Close()
		_ = c.acq.Close()
		_ = c.sub.Close()
		return nil, err
	}
	if err := chainRelease.Load(ctx, c.pub).Err(); err != nil {
		return fail(err)
	}
	if err := chainAcquire.Load(ctx, c.acq).Err(); err != nil {
		return fail(err)
	}
	c.ps = c.sub.Subscribe(ctx, ch)
	if _, err := c.ps.Receive(ctx); err != nil { // the subscription confirmation
		_ = c.ps.Close()
		return fail(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	acqKeys := []string{lock}
	go func() {
		defer close(c.done)
		for {
			if _, err := c.ps.ReceiveMessage(rctx); err != nil {
				return
			}
			err := chainAcquire.EvalSha(rctx, c.acq, acqKeys, "holder").Err()
			c.got <- chainDone{time.Now(), err} // stamped here, before any hop back
		}
	}()
	return c, nil
}

type chainDone struct {
	at  time.Time
	err error
}

// measure takes n samples.
func (c *chainRig) measure(ctx context.Context, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := chainRelease.EvalSha(ctx, c.pub, c.keys, "0").Err(); err != nil {
			return lat, err
		}
		select {
		case d := <-c.got:
			if d.err != nil {
				return lat, d.err
			}
			lat = append(lat, d.at.Sub(t0))
		case <-time.After(5 * time.Second):
			return lat, fmt.Errorf("no handoff: %w", errTimeout)
		}
	}
	return lat, nil
}

func (c *chainRig) close() {
	c.cancel()
	_ = c.ps.Close()
	<-c.done
	_ = c.pub.Close()
	_ = c.acq.Close()
	_ = c.sub.Close()
}

// addChain records one round's chain samples.
func (r *Results) addChain(lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	fr := row(r.Floor, FloorChain)
	fr.med.add(durPercentile(lat, 50))
	fr.p99.add(durPercentile(lat, 99))
	fr.allocs.add(math.NaN())
	fr.rtt.add(2)
	fr.server.add(math.NaN())
}

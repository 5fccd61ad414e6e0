package pubsub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// batchMax is the most channels sent in one (S)SUBSCRIBE.
	batchMax = 256
)

// Sharded makes the hub use SSUBSCRIBE (the scripts must then publish with
// SPUBLISH). slot maps a channel to its cluster hash slot.
func Sharded(on bool, slot func(string) int) Option {
	return func(h *Hub) {
		h.slotFn = slot
		if on {
			h.mode.Store(modeSharded)
		} else {
			h.mode.Store(modeClassic)
		}
	}
}

// AutoSharded makes the hub decide at first use, as Redisson's
// shardedSubscriptionMode AUTO does: sharded when the client is a
// *redis.ClusterClient and the server knows PUBSUB SHARDNUMSUB (Redis 7+),
// classic otherwise.
func AutoSharded(slot func(string) int) Option {
	return func(h *Hub) {
		h.slotFn = slot
		h.mode.Store(modeAuto)
	}
}

const (
	modeClassic int32 = iota
	modeSharded
	modeAuto
)

// probeRetry is how long after a failed probe (Redis unreachable) the next
// one may be sent; until then the hub reports classic pub/sub.
const probeRetry = time.Second

// Sharded reports whether the hub uses sharded pub/sub, so the scripts
// publish to match (SPUBLISH). In auto mode the first call decides, with a
// probe of at most 2 s; while Redis cannot be reached it reports false and
// probes again at most once a second.
func (h *Hub) Sharded() bool {
	on, _ := h.decide(context.Background())
	return on
}

// decide returns the mode, probing in auto mode; err is the probe's error
// while undecided.
func (h *Hub) decide(ctx context.Context) (bool, error) {
	switch h.mode.Load() {
	case modeSharded:
		return true, nil
	case modeClassic:
		return false, nil
	}
	h.probeMu.Lock()
	defer h.probeMu.Unlock()
	if m := h.mode.Load(); m != modeAuto {
		return m == modeSharded, nil
	}
	if h.cluster == nil {
		h.mode.Store(modeClassic)
		return false, nil
	}
	if !h.probeAt.IsZero() && time.Since(h.probeAt) < probeRetry {
		return false, errors.New("pubsub: cannot tell whether the cluster has sharded pub/sub (Redis unreachable)")
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := h.cluster.Do(pctx, "pubsub", "shardnumsub").Err()
	var re redis.Error
	switch {
	case err == nil:
		h.mode.Store(modeSharded)
		return true, nil
	case errors.As(err, &re): // an unknown subcommand: before Redis 7
		h.mode.Store(modeClassic)
		return false, nil
	}
	h.probeAt = time.Now()
	return false, fmt.Errorf("pubsub: probing for sharded pub/sub: %w", err)
}

func (h *Hub) isSharded() bool { return h.mode.Load() == modeSharded }

// shardKey is the connection a channel belongs on: its primary's address
// in a sharded cluster, else "".
func (h *Hub) shardKey(ctx context.Context, channel string) (string, error) {
	if !h.isSharded() || h.cluster == nil {
		return "", nil
	}
	node, err := h.cluster.MasterForKey(ctx, channel)
	if err != nil {
		return "", err
	}
	return node.Options().Addr, nil
}

// groups splits channels into commands: at most batchMax each, and in
// sharded mode one slot each (a command across slots is refused).
func (h *Hub) groups(chs []string, sharded bool) [][]string {
	var out [][]string
	add := func(g []string) {
		for len(g) > batchMax {
			out = append(out, g[:batchMax])
			g = g[batchMax:]
		}
		if len(g) > 0 {
			out = append(out, g)
		}
	}
	switch {
	case len(chs) == 0:
	case !sharded:
		add(chs)
	case h.slotFn == nil:
		for _, ch := range chs {
			out = append(out, []string{ch})
		}
	default:
		bySlot := map[int][]string{}
		var order []int
		for _, ch := range chs {
			s := h.slotFn(ch)
			if _, ok := bySlot[s]; !ok {
				order = append(order, s)
			}
			bySlot[s] = append(bySlot[s], ch)
		}
		for _, s := range order {
			add(bySlot[s])
		}
	}
	return out
}

// movedSlot parses a "MOVED <slot> <addr>" error reply.
func movedSlot(err error) (int, string, bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return 0, "", false
	}
	f := strings.Fields(re.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return 0, "", false
	}
	slot, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, "", false
	}
	return slot, f[2], true
}

// refusedLocked marks the subscriptions of c in slot that are still
// unconfirmed as refused: the manager moves them.
func (h *Hub) refusedLocked(c *conn, slot int) {
	for ch, e := range c.unconf {
		if h.slotFn(ch) == slot {
			delete(c.unconf, ch)
			if e.gen == c.gen {
				c.moving[ch] = true
			}
		}
	}
	c.wake()
}

// droppedLocked handles an SUNSUBSCRIBE reply: ours, or the server's
// notice that the channel's slot left the node.
func (h *Hub) droppedLocked(c *conn, channel string) {
	if u, ok := c.unsent[channel]; ok {
		if u.n <= 1 {
			delete(c.unsent, channel)
		} else {
			u.n--
			c.unsent[channel] = u
		}
		return
	}
	e := c.subs[channel]
	if e == nil || e.gen != c.gen {
		return
	}
	if _, ok := c.moving[channel]; !ok {
		c.moving[channel] = false
	}
	delete(c.unconf, channel)
	c.wake()
}

// relocate moves the channels in c.moving to the connection of the primary
// that serves them now, and wakes their waiters: a message published while
// the slot moved went to the other node. A channel refused with MOVED whose
// primary, in our view, is still c's means c was opened to the wrong node
// (with a stale view): c is rebuilt. h.mu is held; relocate releases it.
func (h *Hub) relocate(c *conn) {
	moves := maps.Clone(c.moving)
	clear(c.moving)
	refused := false
	for _, r := range moves {
		refused = refused || r
	}
	h.mu.Unlock()

	// Reload the slot map and give the reload a moment; this also keeps a
	// refusal loop (our view still stale) from spinning. A slot that moves
	// drops its channels one SUNSUBSCRIBE at a time: one reload serves the
	// whole burst, and refusals always wait.
	if refused || time.Since(c.lastReload) > 200*time.Millisecond {
		if h.cluster != nil {
			h.cluster.ReloadState(h.stop)
		}
		h.sleep(50 * time.Millisecond)
		c.lastReload = time.Now()
	}
	keys := make(map[string]string, len(moves))
	for ch := range moves {
		ctx, cancel := context.WithTimeout(h.stop, 2*time.Second)
		if key, err := h.shardKey(ctx, ch); err == nil {
			keys[ch] = key
		}
		cancel()
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	for ch, ref := range moves {
		e := c.subs[ch]
		if e == nil {
			continue // gone, or moved already
		}
		key, ok := keys[ch]
		if !ok {
			key = c.key
		}
		switch {
		case key != c.key:
			h.rehomeLocked(e, h.connLocked(key))
		case ref:
			c.broken = true
		default:
			h.rehomeLocked(e, c) // dropped here, still served here: again
		}
	}
}

// rehomeLocked subscribes e on nc (perhaps its own connection again) and
// wakes its waiters to re-check. The server no longer holds e's
// subscription on its old connection. h.mu is held.
func (h *Hub) rehomeLocked(e *entry, nc *conn) {
	old := e.c
	delete(old.subs, e.channel)
	delete(old.todo, e.channel)
	delete(old.unconf, e.channel)
	delete(old.moving, e.channel)
	e.c, e.gen = nc, 0
	nc.subs[e.channel] = e
	nc.todo[e.channel] = struct{}{}
	unconfirmLocked(e)
	wakeSettled(e)
	nc.wake()
}

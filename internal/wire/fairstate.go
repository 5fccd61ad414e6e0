package wire

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// FairStateHolder is one owner of the lock hash.
type FairStateHolder struct {
	Owner string
	Count int64 // 0 when the stored value is not a number
}

// FairStateReply is fair_state.lua's reply.
type FairStateReply struct {
	Holders  []FairStateHolder
	PTTLMs   int64 // -2: the lock is free; -1: no expiry
	Token    int64
	HasToken bool
	Engine   string // "redisson", "scalable", "both" or ""
	Length   int64
	Waiters  []string
}

// FairState runs fair_state.lua: a read of the fair lock k (either engine)
// listing at most first waiters. It writes nothing.
func (s *Scripts) FairState(ctx context.Context, rdb redis.Scripter, k Keys, first int) (FairStateReply, error) {
	var r FairStateReply
	v, err := s.call(ctx, rdb, FileFairState,
		[]string{k.Name, k.Queue, k.Timeouts, k.ScalableQueue(), k.Token()}, first).Slice()
	if err != nil {
		return r, err
	}
	bad := func() (FairStateReply, error) {
		return FairStateReply{}, fmt.Errorf("lua: unexpected fair_state reply %v", v)
	}
	if len(v) != 6 {
		return bad()
	}
	hs, ok1 := v[0].([]any)
	pttl, ok2 := v[1].(int64)
	tok, ok3 := v[2].(string)
	eng, ok4 := v[3].(string)
	n, ok5 := v[4].(int64)
	ws, ok6 := v[5].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return bad()
	}
	for i := 0; i+1 < len(hs); i += 2 {
		o, _ := hs[i].(string)
		c, _ := hs[i+1].(string)
		cn, _ := strconv.ParseInt(c, 10, 64)
		r.Holders = append(r.Holders, FairStateHolder{Owner: o, Count: cn})
	}
	r.PTTLMs, r.Engine, r.Length = pttl, eng, n
	if t, err := strconv.ParseInt(tok, 10, 64); err == nil {
		r.Token, r.HasToken = t, true
	}
	for _, w := range ws {
		if o, ok := w.(string); ok {
			r.Waiters = append(r.Waiters, o)
		}
	}
	return r, nil
}

package propertytests

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/model"
)

// dumpToken reads the fencing token key into l.Token: an integer that
// never expires, or absent (0).
func dumpToken(l *model.Lock, token *redis.StringCmd, pttl *redis.DurationCmd) error {
	v, err := token.Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("the token key holds %q", v)
	}
	if pttl.Val() > 0 {
		return fmt.Errorf("the token key expires (%v): it must not", pttl.Val())
	}
	l.Token = n
	return nil
}

// dumpAcquireLatches reads the acquisition latches: "held", "held:<token>",
// "void" or "void:held", each with an expiry.
func dumpAcquireLatches(ctx context.Context, rdb *redis.Client, l *model.Lock, names model.Names, keys []string, server int64) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := rdb.Pipeline()
	vals := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		vals[i] = pipe.Get(ctx, k)
		ttls[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return err
	}
	for i, k := range keys {
		v := vals[i].Val()
		la := model.AcquireLatch{State: v}
		if tok, ok := strings.CutPrefix(v, "held:"); ok {
			n, err := strconv.ParseInt(tok, 10, 64)
			if err != nil {
				return fmt.Errorf("acquisition latch %s holds %q", k, v)
			}
			la = model.AcquireLatch{State: model.LatchHeld, Token: n}
		}
		if tok, ok := strings.CutPrefix(v, "granted:"); ok {
			n, err := strconv.ParseInt(tok, 10, 64)
			if err != nil {
				return fmt.Errorf("acquisition latch %s holds %q", k, v)
			}
			la = model.AcquireLatch{State: model.LatchGranted, Token: n}
		}
		switch la.State {
		case model.LatchHeld, model.LatchVoid, model.LatchVoidHeld, model.LatchGranted:
		default:
			return fmt.Errorf("acquisition latch %s holds %q", k, v)
		}
		if ttls[i].Val() <= 0 {
			return fmt.Errorf("acquisition latch %s has no expiry", k)
		}
		la.ExpiresAt = server + ttls[i].Val().Milliseconds()
		l.AcquireLatches[strings.TrimPrefix(k, names.AcquireLatchPrefix())] = la
	}
	return nil
}

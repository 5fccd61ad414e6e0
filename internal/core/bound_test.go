package core

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The outage budget's default is the longer of two head graces and the
// watchdog lease; a negative budget stays off; an explicit one is kept.
func TestOutageBudgetDefault(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{}, 30 * time.Second},
		{Config{HeadGrace: 20 * time.Second}, 40 * time.Second},
		{Config{Lease: 3 * time.Second, HeadGrace: 2 * time.Second}, 4 * time.Second},
		{Config{Lease: 3 * time.Second, HeadGrace: -1}, 3 * time.Second},
		{Config{OutageBudget: -1}, -1},
		{Config{OutageBudget: time.Second}, time.Second},
	} {
		cfg := c.cfg
		if err := cfg.fill(); err != nil {
			t.Fatal(err)
		}
		if cfg.OutageBudget != c.want {
			t.Errorf("%+v: budget %v, want %v", c.cfg, cfg.OutageBudget, c.want)
		}
	}
}

// The attempt timeout is the client's read (or write) timeout, at most 3 s,
// and 3 s when the client has none.
func TestAttemptTimeout(t *testing.T) {
	for _, c := range []struct {
		opt  redis.Options
		want time.Duration
	}{
		{redis.Options{}, 3 * time.Second}, // go-redis's default read timeout is 5 s
		{redis.Options{ReadTimeout: time.Second}, time.Second},
		{redis.Options{ReadTimeout: time.Second, WriteTimeout: 2 * time.Second}, 2 * time.Second},
		{redis.Options{ReadTimeout: -1}, 3 * time.Second},
		{redis.Options{ReadTimeout: -2}, 3 * time.Second},
		{redis.Options{ReadTimeout: 10 * time.Second}, 3 * time.Second},
	} {
		rdb := redis.NewClient(&c.opt)
		if got := attemptTimeout(rdb); got != c.want {
			t.Errorf("read %v write %v: attempt timeout %v, want %v", c.opt.ReadTimeout, c.opt.WriteTimeout, got, c.want)
		}
		_ = rdb.Close()
	}
}

package core_test

import (
	"testing"
	"time"

	_ "github.com/fairlock-go/fairlock/lua" // the script sources

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// What a test injects when it makes a client is what the client uses: the
// wall clock the fair scripts read, shifted while the client runs, and the
// script set.
func TestInjectedClockAndScripts(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	var clock core.SkewedClock
	scripts := wire.Edit(nil)
	cfg := core.Config{}
	core.WithWallClock(clock.UnixMilli)(&cfg)
	core.WithScripts(scripts)(&cfg)
	s, err := core.NewSession(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Scripts() != scripts {
		t.Error("the session does not run the injected scripts")
	}
	for _, d := range []time.Duration{time.Hour, -time.Hour, 0} {
		clock.Set(d)
		off := time.Duration(s.WallMs()-time.Now().UnixMilli()) * time.Millisecond
		if off < d-time.Second || off > d+time.Second {
			t.Errorf("skew %v: the session's wall clock is off by %v", d, off)
		}
	}
	plain, err := core.NewSession(rdb, core.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if plain.Scripts() != wire.Default() {
		t.Error("a client made without scripts does not run wire.Default()")
	}
}

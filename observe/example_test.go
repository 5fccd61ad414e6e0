package observe_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/observe"
	"github.com/fairlock-go/fairlock/reentrant"
)

// Log every lock event with log/slog. The steps of a normal life (wait
// started, granted, released) are logged at Debug, so a logger at the
// default level (Info) shows only what went wrong: give it a Debug level to
// see them all, as here. (The example drops the time and the owner id,
// which change from run to run, and the durations.)
func ExampleNewSlog() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "owner", "duration":
				return slog.Attr{}
			}
			return a
		},
	}))
	client, err := fairlock.NewClient(rdb, fairlock.WithObserver(observe.NewSlog(logger)))
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	m, _ := reentrant.New(client, "report:daily")
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	client.Close() // delivers the events before it returns
	// Output:
	// level=DEBUG msg="fairlock granted" lock=report:daily kind=reentrant waited=false reentry=false
	// level=DEBUG msg="fairlock released" lock=report:daily kind=reentrant
}

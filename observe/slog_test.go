package observe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/observe"
	"github.com/fairlock-go/fairlock/reentrant"
)

// The slog observer logs each event with the lock's name as an attribute,
// at the documented levels.
func TestSlog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	c, err := fairlock.NewClient(rdb, fairlock.WithObserver(observe.NewSlog(l)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, _ := reentrant.New(c, "slog-lock")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // delivers the events; the hold ends as closed
		t.Fatal(err)
	}
	var got []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		got = append(got, rec)
	}
	want := []struct{ msg, level string }{
		{"fairlock granted", "DEBUG"}, {"fairlock released", "DEBUG"},
		{"fairlock granted", "DEBUG"}, {"fairlock lost", "INFO"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i, w := range want {
		r := got[i]
		if r["msg"] != w.msg || r["level"] != w.level || r["lock"] != "slog-lock" || r["owner"] != m.Owner() || r["kind"] != "reentrant" {
			t.Errorf("record %d: %v, want %s at %s for slog-lock", i, r, w.msg, w.level)
		}
	}
	if _, ok := got[3]["error"]; !ok {
		t.Errorf("the loss has no error: %v", got[3])
	}
}

// Events below the logger's level cost no record; a loss is a warning.
func TestSlogLevels(t *testing.T) {
	var buf bytes.Buffer
	o := observe.NewSlog(slog.New(slog.NewTextHandler(&buf, nil))) // Info
	o.Observe(fairlock.Event{Kind: fairlock.Granted, Name: "x"})
	if buf.Len() != 0 {
		t.Errorf("a grant logged at Info: %s", buf.String())
	}
	o.Observe(fairlock.Event{Kind: fairlock.Lost, Name: "x", Err: fairlock.ErrLost})
	o.Observe(fairlock.Event{Kind: fairlock.EventsDropped, Dropped: 3})
	for _, s := range []string{"level=WARN msg=\"fairlock lost\" lock=x", "dropped=3"} {
		if !bytes.Contains(buf.Bytes(), []byte(s)) {
			t.Errorf("no %q in %s", s, buf.String())
		}
	}
}

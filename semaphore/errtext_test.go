package semaphore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/semaphore"
)

// An error reads as one sentence: one line, the fairlock: prefix, the
// script's complaint said once, and still matching its sentinel.
func TestErrorTextIsOneSentence(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	c, err := fairlock.NewClient(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := semaphore.NewFair(c, "unset")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Acquire(context.Background(), 1, 0)
	if !errors.Is(err, semaphore.ErrNotSet) {
		t.Fatalf("acquire on an unset pool: %v, want ErrNotSet", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || strings.Count(msg, "permits not set") != 1 {
		t.Errorf("acquire on an unset pool: %q: want one line saying it once", msg)
	}
	for _, name := range []string{"", "a{b"} {
		_, err = semaphore.NewFair(c, name)
		if !errors.Is(err, fairlock.ErrInvalidName) || !strings.HasPrefix(err.Error(), "fairlock: ") {
			t.Errorf("NewFair(%q): %v: want ErrInvalidName with the fairlock: prefix", name, err)
		}
	}
}

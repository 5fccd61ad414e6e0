package fairlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/multi"
	"github.com/fairlock-go/fairlock/reentrant"
	"github.com/fairlock-go/fairlock/rwlock"
	"github.com/fairlock-go/fairlock/semaphore"
)

// Typical failures, across packages, read as one sentence: one line, one
// "fairlock: " prefix, the name the user gave (never an internal key), and
// errors.Is still matches what they are.
func TestErrorStrings(t *testing.T) {
	b := redistest.Mini(t)
	c, err := fairlock.NewClient(b.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type tc struct {
		what string
		err  error
		is   error
		want string // the whole message, or its start when it ends with "..."
	}
	var cases []tc
	add := func(what string, err, is error, want string) { cases = append(cases, tc{what, err, is, want}) }

	_, err = semaphore.NewFair(c, "")
	add("NewFair empty name", err, fairlock.ErrInvalidName, "fairlock: invalid lock name: empty")
	_, err = semaphore.NewExpirable(c, "")
	add("NewExpirable empty name", err, fairlock.ErrInvalidName, "fairlock: invalid lock name: empty")
	_, err = reentrant.New(c, "")
	add("reentrant empty name", err, fairlock.ErrInvalidName, "fairlock: invalid lock name: empty")
	_, err = multi.NewSeats(c, "a", "")
	add("NewSeats empty name", err, fairlock.ErrInvalidName, "fairlock: seats: invalid lock name: empty")

	f, _ := semaphore.NewFair(c, "bad:sem")
	_, err = f.Acquire(ctx, 1, 0)
	add("acquire on an unset pool", err, semaphore.ErrNotSet, `fairlock: acquire "bad:sem": semaphore permits not set`)
	_, err = f.TryAcquire(ctx, 1, 0, 0)
	add("try-acquire on an unset pool", err, semaphore.ErrNotSet, `fairlock: acquire "bad:sem": semaphore permits not set`)
	if err := f.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_, err = f.Acquire(ctx, 3, 0)
	add("more permits than the pool", err, semaphore.ErrTooMany, `fairlock: acquire "bad:sem": semaphore asked for 3 permits, the pool has 1`)
	_, err = f.Acquire(ctx, 0, 0)
	add("zero permits", err, fairlock.ErrInvalidValue, `fairlock: invalid argument: semaphore "bad:sem": 0 permits asked (at least 1)`)

	r, _ := reentrant.New(c, "r")
	add("non-owner unlock", r.Unlock(ctx), fairlock.ErrNotHeld, `fairlock: lock not held: "r" by ...`)
	fm, _ := fair.New(c, "f")
	add("fair non-owner unlock", fm.Unlock(ctx), fairlock.ErrNotHeld, `fairlock: lock not held: "f" by ...`)
	rw, _ := rwlock.New(c, "rw")
	add("write half non-owner unlock", rw.WriteLock().Unlock(ctx), fairlock.ErrNotHeld, `fairlock: lock not held: "rw" by ...`)

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	add("lock on a closed client", r.Lock(ctx), fairlock.ErrClosed, `fairlock: acquire "r": client closed`)
	_, err = f.Acquire(ctx, 1, 0)
	add("semaphore on a closed client", err, fairlock.ErrClosed, `fairlock: acquire "bad:sem": client closed`)
	add("unlock on a closed client", r.Unlock(ctx), fairlock.ErrClosed, `fairlock: unlock "r": client closed`)

	for _, tc := range cases {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.what)
			continue
		}
		msg := tc.err.Error()
		if !errors.Is(tc.err, tc.is) {
			t.Errorf("%s: %q does not match %v", tc.what, msg, tc.is)
		}
		if prefix, ok := strings.CutSuffix(tc.want, "..."); ok {
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("%s: %q, want %q", tc.what, msg, tc.want)
			}
		} else if msg != tc.want {
			t.Errorf("%s: %q, want %q", tc.what, msg, tc.want)
		}
		if strings.Contains(msg, "\n") || strings.Count(msg, "fairlock:") != 1 || strings.Contains(msg, "fairlock_") {
			t.Errorf("%s: %q is not one line with one prefix and no internal key", tc.what, msg)
		}
	}
}

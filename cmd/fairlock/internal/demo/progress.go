package demo

import (
	"fmt"
	"strings"
	"time"
)

// progress prints a line every ProgressEvery until the returned stop is
// called, which prints the last one.
func (r *run) progress(start time.Time) (stop func()) {
	if r.c.Progress == nil {
		return func() {}
	}
	line := func(end bool) {
		r.mu.Lock()
		booked := r.result.Booked
		r.mu.Unlock()
		state := fmt.Sprintf("%3d waiting", r.waiting.Load())
		if end {
			state = "done"
		}
		fmt.Fprintf(r.c.Progress, "%-10s %s %*d/%d seats  %6.2fs  %s\n", r.kind, bar(booked, r.c.Seats, 20),
			len(fmt.Sprint(r.c.Seats)), booked, r.c.Seats, time.Since(start).Seconds(), state)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(r.c.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				line(false)
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		line(true)
	}
}

func bar(n, of, width int) string {
	full := 0
	if of > 0 {
		full = n * width / of
	}
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}

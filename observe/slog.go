// Package observe has ready-made fairlock observers (fairlock.WithObserver):
// NewSlog logs each event with log/slog.
package observe

import (
	"context"
	"errors"
	"log/slog"

	"github.com/fairlock-go/fairlock"
)

// Slog is an observer that logs every event to a slog.Logger: the message
// is "fairlock " followed by the event's kind, the attributes are lock
// (the lock's name), owner, kind (the lock kind), and, when they apply,
// duration, waited, reentry, error and dropped.
//
// Levels: the steps of a normal life (wait started, granted, released) are
// Debug; a wait that ended without the lock is Info, or Warn with an error;
// a lost hold, a failed renewal, the long-wait and long-hold alerts and
// dropped events are Warn. A hold ended by Close is Info.
type Slog struct {
	l *slog.Logger
}

// NewSlog makes a Slog logging to l (nil: slog.Default()).
func NewSlog(l *slog.Logger) *Slog {
	if l == nil {
		l = slog.Default()
	}
	return &Slog{l: l}
}

// Observe logs e.
func (s *Slog) Observe(e fairlock.Event) {
	level := slog.LevelDebug
	switch e.Kind {
	case fairlock.WaitEnded:
		level = slog.LevelInfo
		if e.Err != nil {
			level = slog.LevelWarn
		}
	case fairlock.Lost:
		level = slog.LevelWarn
		if errors.Is(e.Err, fairlock.ErrClosed) {
			level = slog.LevelInfo
		}
	case fairlock.RenewFailed, fairlock.LongWait, fairlock.LongHold, fairlock.EventsDropped:
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !s.l.Enabled(ctx, level) {
		return
	}
	if e.Kind == fairlock.EventsDropped {
		s.l.LogAttrs(ctx, level, "fairlock "+e.Kind.String(), slog.Uint64("dropped", e.Dropped))
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs, slog.String("lock", e.Name), slog.String("owner", e.Owner), slog.String("kind", e.LockKind))
	switch e.Kind {
	case fairlock.WaitStarted:
		if e.Ahead >= 0 {
			attrs = append(attrs, slog.Int("ahead", e.Ahead))
		}
	case fairlock.Granted:
		attrs = append(attrs, slog.Duration("duration", e.Duration), slog.Bool("waited", e.Waited), slog.Bool("reentry", e.Reentry))
		if e.Handoff > 0 {
			attrs = append(attrs, slog.Duration("handoff", e.Handoff))
		}
	default:
		attrs = append(attrs, slog.Duration("duration", e.Duration))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	s.l.LogAttrs(ctx, level, "fairlock "+e.Kind.String(), attrs...)
}

package core

import (
	"fmt"
	"time"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// LockConfig is what the options of a lock's New set (fairlock.LockOption).
type LockConfig struct {
	ThreadID int64         // the thread part of the owner id; 0: a fresh one
	Slot     time.Duration // the fair lock's default wait slot; 0: the session's
	SlotSet  bool          // Slot was given (it must then be at least 1 ms)
	Engine   int           // the fair lock's engine (fair.Engine)
	Invalid  error         // the first option given an out-of-range value; NewLock refuses it
}

// EngineMaker builds a lock's engine once its keys and options are known.
type EngineMaker func(s *Session, k wire.Keys, cfg LockConfig) (Engine, error)

var wrapPlain, wrapFenced func(*Mutex) any

// RegisterHandles lets package fairlock tell core how to wrap a Mutex in its
// public handles (fairlock.Handle, fairlock.FencedHandle) without exporting
// the wrapping to users.
func RegisterHandles(plain, fenced func(*Mutex) any) { wrapPlain, wrapFenced = plain, fenced }

// NewLock is the preamble of every lock package's New: it applies the
// options (refusing a nil one), checks them, and returns the public handle
// H (fairlock.Handle or fairlock.FencedHandle) over a new Mutex, and the
// Mutex.
func NewLock[H any, O ~func(*LockConfig)](client any, name string, opts []O, e EngineMaker) (H, *Mutex, error) {
	var zero H
	var cfg LockConfig
	for i, f := range opts {
		if f == nil {
			return zero, nil, fmt.Errorf("%w: option %d is nil", ErrInvalidValue, i)
		}
		f(&cfg)
	}
	if cfg.Invalid != nil {
		return zero, nil, cfg.Invalid
	}
	if cfg.SlotSet && cfg.Slot < time.Millisecond {
		return zero, nil, fmt.Errorf("%w: fair.WithWaitSlot(%v): the wait slot must be at least 1ms", ErrInvalidValue, cfg.Slot)
	}
	s := Of(client)
	m, err := newMutex(s, name, cfg.ThreadID)
	if err != nil {
		return zero, nil, err
	}
	if m.E, err = e(s, m.Keys, cfg); err != nil {
		return zero, nil, err
	}
	if q, ok := m.E.(interface{ Queued() bool }); ok {
		m.Queue = q.Queued()
	}
	m.Slot = cfg.Slot
	if h, ok := wrapPlain(m).(H); ok {
		return h, m, nil
	}
	return wrapFenced(m).(H), m, nil
}

// New is NewLock for a lock type L that only wraps its handle: wrap makes
// the L of a new handle H and its Mutex.
func New[H, L any, O ~func(*LockConfig)](client any, name string, opts []O, e EngineMaker, wrap func(H, *Mutex) L) (L, error) {
	h, m, err := NewLock[H](client, name, opts, e)
	if err != nil {
		var zero L
		return zero, err
	}
	return wrap(h, m), nil
}

// MakeReentrant is the reentrant lock's EngineMaker.
func MakeReentrant(s *Session, k wire.Keys, _ LockConfig) (Engine, error) {
	return ReentrantEngine{S: s, K: k}, nil
}

package core

import (
	"context"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// ReentrantEngine is the reentrant lock's Engine: acquire.lua, unlock.lua
// and force_unlock.lua on the lock hash, waiters woken on the lock's
// channel, no queue. The fenced lock embeds it with its own Try.
type ReentrantEngine struct {
	S *Session
	K wire.Keys
}

// Try runs acquire.lua.
func (e ReentrantEngine) Try(ctx context.Context, a wire.Args, _ bool) (bool, int64, error) {
	return e.S.Scripts().Acquire(ctx, e.S.RDB, e.K, a)
}

// GiveUp: there is no queue to leave.
func (e ReentrantEngine) GiveUp(context.Context, wire.Args) error { return nil }

// Unlock runs unlock.lua.
func (e ReentrantEngine) Unlock(ctx context.Context, a wire.Args) (wire.UnlockResult, error) {
	return e.S.Scripts().Unlock(ctx, e.S.RDB, e.K, a)
}

// ForceUnlock runs force_unlock.lua.
func (e ReentrantEngine) ForceUnlock(ctx context.Context, a wire.Args) (bool, error) {
	return e.S.Scripts().ForceUnlock(ctx, e.S.RDB, e.K, a)
}

// WakeChannel is the lock's channel, whoever the owner.
func (e ReentrantEngine) WakeChannel(string) string { return e.K.Channel }

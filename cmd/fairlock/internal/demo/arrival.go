package demo

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/internal/wire"
)

// arrivalHook watches one go-redis client for the first lock attempt of
// owners that are arriving: the EVALSHA (or EVAL) of the kind's acquire
// script with the owner among its arguments.
//
// A semaphore's owner id is made per acquisition, so its arrivals are
// matched by the context of the call instead (arrivalKey).
type arrivalHook struct {
	sha     string
	byCtx   bool // match by the call's context, not by an argument
	mu      sync.Mutex
	pending map[string]func(acquired bool)
}

// arrivalKey is the context key of a semaphore arrival: the contender's
// label (permitLocker.Owner).
type arrivalKey struct{}

func newArrivalHook(kind string, engine fair.Engine, scripts *wire.Scripts, semFair *wire.SemFairScripts) *arrivalHook {
	file := wire.FileAcquire
	switch kind {
	case SeatsHold, brokenOneLock, brokenPolling:
		return &arrivalHook{sha: wire.SeatsDefault().Script(wire.FileSeatsAcquire).Hash(), byCtx: true,
			pending: map[string]func(bool){}}
	case MultiLock, Naive:
		// per-seat reentrant locks: the first acquire.lua of the booking
		if scripts == nil {
			scripts = wire.Default()
		}
		return &arrivalHook{sha: scripts.Script(file).Hash(), byCtx: true, pending: map[string]func(bool){}}
	case Fair:
		file = wire.FileFairTryLockWait
		if engine == fair.Scalable {
			return &arrivalHook{sha: wire.ScalableDefault().Script(file).Hash(), pending: map[string]func(bool){}}
		}
	case Semaphore:
		file = wire.FileSemAcquire
	case FairSemaphore:
		// the fair semaphore's scripts are a set of their own
		if semFair == nil {
			semFair = wire.SemFairDefault()
		}
		return &arrivalHook{sha: semFair.Script(wire.FileSemFairAcquire).Hash(), byCtx: true,
			pending: map[string]func(bool){}}
	}
	if scripts == nil {
		scripts = wire.Default()
	}
	return &arrivalHook{sha: scripts.Script(file).Hash(), byCtx: isSemaphore(kind), pending: map[string]func(bool){}}
}

func (h *arrivalHook) expect(owner string, f func(acquired bool)) {
	h.mu.Lock()
	h.pending[owner] = f
	h.mu.Unlock()
}

func (h *arrivalHook) forget(owner string) {
	h.mu.Lock()
	delete(h.pending, owner)
	h.mu.Unlock()
}

func (h *arrivalHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *arrivalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *arrivalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if sha, isScript := wire.ScriptCall(cmd); !isScript || sha != h.sha {
			return err
		}
		if wire.NotRun(err) {
			return err // not run: the library sends it again (EVAL, FCALL or EVALSHA)
		}
		h.mu.Lock()
		var f func(bool)
		if h.byCtx {
			if s, ok := ctx.Value(arrivalKey{}).(string); ok {
				f = h.pending[s]
				delete(h.pending, s)
			}
		} else {
			for _, a := range args[2:] {
				if s, ok := a.(string); ok {
					if f = h.pending[s]; f != nil {
						delete(h.pending, s)
						break
					}
				}
			}
		}
		h.mu.Unlock()
		if f != nil {
			acquired := false
			if c, ok := cmd.(*redis.Cmd); ok {
				v, rerr := c.Result()
				tok, _ := v.([]any)
				if h.byCtx {
					// the semaphores reply {1, token} to a grant (the
					// permit-expirable one {1, token, kept})
					acquired = len(tok) >= 2 && tok[0] == int64(1)
				} else {
					// a fair grant with its fencing token: {-1, token}
					acquired = v == "OK" || errors.Is(rerr, redis.Nil) || len(tok) == 2 && tok[1] != int64(-1)
				}
			}
			f(acquired)
		}
		return err
	}
}

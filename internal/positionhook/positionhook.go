// Package positionhook adapts a user's queue-position callback, which takes
// the root package's fairlock.Position, to the one the wait loop in
// internal/core calls (core.Position, the same fields). The lock, semaphore
// and seat packages share it.
package positionhook

import (
	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
)

// ToCore hands the wait loop's position reports to f, the caller's
// callback (nil: none).
func ToCore(f func(fairlock.Position)) func(core.Position) {
	if f == nil {
		return nil
	}
	return func(p core.Position) { f(fairlock.Position(p)) }
}

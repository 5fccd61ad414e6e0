package semaphore

import (
	"github.com/fairlock-go/fairlock"
	"github.com/fairlock-go/fairlock/internal/core"
)

// corePosition hands the wait loop's position reports to f, the caller's
// callback (nil: none).
func corePosition(f func(fairlock.Position)) func(core.Position) {
	if f == nil {
		return nil
	}
	return func(p core.Position) { f(fairlock.Position(p)) }
}

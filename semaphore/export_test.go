package semaphore

import "github.com/fairlock-go/fairlock/internal/wire"

// UseFairScripts makes every Fair run s until the returned restore is
// called (tests only: not safe beside other tests using Fair).
func UseFairScripts(s *wire.SemFairScripts) (restore func()) {
	old := fairScripts
	fairScripts = func() *wire.SemFairScripts { return s }
	return func() { fairScripts = old }
}

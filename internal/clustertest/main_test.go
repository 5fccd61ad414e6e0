// Package clustertest runs the locks against a real Redis Cluster (3
// primaries, 3 replicas) and a Sentinel setup, started by the tests.
package clustertest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// TestMain stops the servers the tests started, then checks that no
// goroutine (hub readers, watchdogs) outlived its client.
func TestMain(m *testing.M) {
	code := redistest.Main(m) // stops the shared single server
	redistest.StopShared()
	if replicated.s != nil {
		replicated.s.Stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Package clustertest runs the locks against a real Redis Cluster (3
// primaries, 3 replicas) and a Sentinel setup, started by the tests.
package clustertest

import (
	"os"
	"testing"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	if replicated.s != nil {
		replicated.s.Stop()
	}
	os.Exit(code)
}

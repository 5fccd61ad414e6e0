package propertytests

import (
	"os"
	"testing"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// TestMain stops the redis-server the tests may have started.
func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

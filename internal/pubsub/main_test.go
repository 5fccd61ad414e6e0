package pubsub_test

import (
	"os"
	"testing"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

package faulttests

import (
	"os"
	"testing"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

package redistest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// MainLeakCheck is Main plus a goroutine-leak check after all tests passed:
// every Client, watchdog and subscription the tests made must be gone.
func MainLeakCheck(m *testing.M) int {
	code := Main(m)
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goroutine leak:", err)
		return 1
	}
	return 0
}

package fairlocktest_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// TestMain fails the run when a goroutine outlives the tests and examples:
// every Client, go-redis client and miniredis a test double made must be
// gone once its test's cleanups ran.
func TestMain(m *testing.M) { os.Exit(redistest.MainLeakCheck(m)) }

// fakeT is the part of testing.TB that the package and the Example use, so
// that an Example (which has no *testing.T) can run a user's test body the
// way go test runs a TestXxx: on its own goroutine, Fatal ending it, then
// the cleanups in reverse order. Methods it does not implement panic (nil
// embedded TB).
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	failed   bool
	log      strings.Builder
}

func (t *fakeT) Helper() {}

func (t *fakeT) Name() string { return "fakeT" }

func (t *fakeT) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *fakeT) Logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(&t.log, format+"\n", args...)
}

func (t *fakeT) Log(args ...any) { t.Logf("%s", fmt.Sprint(args...)) }

func (t *fakeT) Errorf(format string, args ...any) {
	t.Logf(format, args...)
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *fakeT) Error(args ...any) { t.Errorf("%s", fmt.Sprint(args...)) }

func (t *fakeT) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	runtime.Goexit()
}

func (t *fakeT) Fatal(args ...any) { t.Fatalf("%s", fmt.Sprint(args...)) }

func (t *fakeT) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// runAsTest runs test as go test runs a test function and returns the fake
// T, after its cleanups ran. A failed test's log is printed (an Example
// then shows why its output is wrong).
func runAsTest(test func(t testing.TB)) *fakeT {
	t := runQuiet(test)
	if t.Failed() {
		fmt.Print(t.log.String())
	}
	return t
}

// runQuiet is runAsTest without printing the log.
func runQuiet(test func(t testing.TB)) *fakeT {
	t := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		test(t)
	}()
	<-done
	t.mu.Lock()
	cleanups := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	return t
}

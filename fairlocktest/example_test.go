package fairlocktest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fairlock-go/fairlock/fair"
	"github.com/fairlock-go/fairlock/fairlocktest"
)

// A unit test of your own code gets a real fairlock.Client on an embedded
// Redis in one line. In your package it is a TestXxx(t *testing.T); here
// the test body runs under a stand-in for *testing.T.
func Example() {
	test := func(t testing.TB) {
		c := fairlocktest.New(t) // closed, with its Redis, when the test ends
		ctx := context.Background()

		m, err := fair.New(c, "account:42")
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		other, _ := fair.New(c, "account:42") // another owner of the same lock
		ok, _ := other.TryLock(ctx)
		fmt.Println("another owner gets it while held:", ok)

		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		ok, _ = other.TryLock(ctx)
		fmt.Println("another owner gets it after Unlock:", ok)
		_ = other.Unlock(ctx)
	}
	runAsTest(test) // go test does this for a test function
	// Output:
	// another owner gets it while held: false
	// another owner gets it after Unlock: true
}

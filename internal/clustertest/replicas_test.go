package clustertest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/core"
	"github.com/fairlock-go/fairlock/internal/redistest"
	"github.com/fairlock-go/fairlock/reentrant"
)

// A lock taken while its slot is migrating. The acquisition script has more
// than one key (the lock and its acquisition latch), and Redis refuses a
// multi-key command during a migration when its keys are not all on one side
// (TRYAGAIN), so the Lock waits, retrying, until the migration ends; then it
// runs on the new primary, and so does the replica confirmation (the confirm
// script + WAIT). The lock is released afterwards and the slot moved back.
func TestReplicaAckDuringMigration(t *testing.T) {
	cl := redistest.SharedCluster(t)
	cc := cl.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, cc) // replica acknowledgement on by default
	name := redistest.Prefix(t) + "ask"
	slot := core.Slot(name)
	src, err := cl.PrimaryOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	prims, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dst := prims[0]
	if dst == src {
		dst = prims[1]
	}
	// Another key in the slot, as an earlier test sharing the cluster may
	// have left (a latch lives 10 s): SETSLOT NODE refuses to give a slot
	// away while its node still holds keys of it, so the migration must
	// move them first, as a real resharding does.
	srcC := redis.NewClient(&redis.Options{Addr: src})
	defer srcC.Close()
	if err := srcC.Set(ctx, "{"+name+"}:leftover", "x", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	mig, err := newMigration(ctx, cl, slot, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer mig.close()
	if err := mig.begin(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := reentrant.New(c, name)
	if err != nil {
		t.Fatal(err)
	}
	waits := func() int64 { return commandCalls(ctx, t, mig.dstC, "wait") }
	before := waits()
	got := make(chan error, 1)
	go func() { got <- m.Lock(ctx) }()
	select {
	case err := <-got:
		t.Fatalf("Lock returned during the migration: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := mig.finish(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock after the migration: %v", err)
	}
	if after := waits(); after <= before {
		t.Errorf("no WAIT ran on the new primary (%d before, %d after)", before, after)
	}
	if n := mig.dstC.Exists(ctx, name).Val(); n != 1 {
		t.Fatalf("the lock is not on the new primary")
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	back, err := newMigration(ctx, cl, slot, src)
	if err != nil {
		t.Fatal(err)
	}
	defer back.close()
	if err := back.begin(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := back.moveKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if err := back.finish(ctx); err != nil {
		t.Fatal(err)
	}
}

// commandCalls reads how many times a command ran on a server, from INFO
// commandstats.
func commandCalls(ctx context.Context, t *testing.T, c *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			return n
		}
	}
	return 0
}

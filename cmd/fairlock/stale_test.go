package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fairlock-go/fairlock/internal/redistest"
)

// demo --stale-writer, on the embedded Redis and on a real one: the table
// shows the paused booker's late write rejected, the fresh one kept, and no
// key of the run is left behind.
func TestDemoStaleWriter(t *testing.T) {
	redistest.Long(t)
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"demo", "--stale-writer"}, &out, &errb), "stderr: %s\n%s", errb.String(), out.String())
	assert.Regexp(t, `(?m)^A +1 .*REJECTED: token 1 < 2 already seen$`, out.String())
	assert.Regexp(t, `(?m)^B +2 .*accepted \(fence now 2\)$`, out.String())
	assert.Contains(t, out.String(), "is booked by B (token 2)")

	b := redistest.Real(t)
	out.Reset()
	errb.Reset()
	require.Equal(t, 0, run([]string{"demo", "--stale-writer", "--redis", b.Addr}, &out, &errb), "stderr: %s", errb.String())
	assert.Contains(t, out.String(), "REJECTED")
	rdb := b.Client(t)
	keys, err := rdb.Keys(t.Context(), "*fairlock-demo:*stale*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		assert.Regexp(t, `^(redisson_unlock_latch|fairlock_acquire_latch):`, k, "left behind: %s", k)
	}
	seats, _ := rdb.Keys(t.Context(), "*fairlock-demo:*seat:12A*").Result()
	assert.Empty(t, seats)
}

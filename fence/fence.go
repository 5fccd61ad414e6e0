// Package fence is the resource side of fencing tokens: it makes a write to
// a Redis key that is applied only if the writer's token is not older than
// the newest token already seen for that key, atomically (one script, one
// hash slot), and records the new newest token.
//
// A lease lock cannot stop a holder that was paused past its lease (a GC
// pause, SIGSTOP, a stalled connection) from writing after another owner
// took the lock; a token from the lock (fenced.Mutex.LockAndGetToken,
// fair.Mutex.LockAndGetToken) checked here can. Each lock acquisition gets a
// larger token than every earlier one, so once the resource has seen the new
// holder's token, the old holder's late write is refused.
//
// Equal tokens are accepted: one holder may write twice with its token. A
// token strictly less than the fence is rejected. The fence of key lives in
// "fairlock_fence:{key}" (or "fairlock_fence:key" when key has its own hash
// tag, so that both hash to one cluster slot) and never expires.
//
// The same rule in SQL, with the fence kept in the row:
//
//	UPDATE seats SET holder = $1, fence = $2 WHERE seat = $3 AND fence <= $2
//
// One row updated: accepted (the row now carries the token). Zero rows: the
// row's fence is newer than $2, strictly greater, so a later holder has
// written already and this writer's lock is over. (The issue's
// "WHERE fence < $token" is the strict form: it refuses a holder's second
// write with its own token.)
package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed fence_write.lua
var source string

var script = redis.NewScript(source)

// Errors for bad input, checked before anything is sent.
var (
	ErrInvalidToken = errors.New("fence: token must be positive")
	ErrInvalidKey   = errors.New("fence: invalid resource key")
	ErrInvalidValue = errors.New("fence: invalid argument")
)

// Result is the outcome of a fenced write.
type Result struct {
	// Accepted reports whether the write was applied.
	Accepted bool
	// Last is the newest token seen for the resource after the call: the
	// writer's token when accepted, the newer token that refused it when
	// not.
	Last int64
}

func (r Result) String() string {
	if r.Accepted {
		return fmt.Sprintf("accepted (token %d)", r.Last)
	}
	return fmt.Sprintf("rejected (newer token %d seen)", r.Last)
}

// prefix names fence keys.
const prefix = "fairlock_fence"

// Key returns the fence key of the resource key: "fairlock_fence:" + key
// when key has a Redis hash tag (a '{' followed later by a '}' with
// something between), keeping its slot; else "fairlock_fence:{key}", whose
// tag is the whole key, so again the key's slot. A key with no tag but a
// '}' cannot be wrapped that way (the '}' would end the tag early) and is
// refused with ErrInvalidKey, as is the empty key.
func Key(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return prefix + ":" + key, nil
		}
	}
	if strings.IndexByte(key, '}') >= 0 {
		return "", fmt.Errorf("%w: %q has a '}' but no hash tag: its fence could not share its slot", ErrInvalidKey, key)
	}
	return prefix + ":{" + key + "}", nil
}

// Op is a write to make under a fence.
type Op struct {
	cmd  string
	args []any
}

// Set is SET key value.
func Set(value string) Op { return Op{cmd: "set", args: []any{value}} }

// HSet is HSET key field value [field value ...]; pairs alternate fields and
// values.
func HSet(field, value string, pairs ...string) Op {
	args := []any{field, value}
	for _, p := range pairs {
		args = append(args, p)
	}
	return Op{cmd: "hset", args: args}
}

// RPush is RPUSH key value [value ...]: an append-only log of the accepted
// writes, in the order the resource accepted them.
func RPush(value string, more ...string) Op {
	args := []any{value}
	for _, v := range more {
		args = append(args, v)
	}
	return Op{cmd: "rpush", args: args}
}

// Write applies op to key if token is not older than the newest token seen
// for key (see the package doc), atomically, and records token as the
// newest. A rejected write changes nothing and is not an error.
func Write(ctx context.Context, rdb redis.Scripter, key string, token int64, op Op) (Result, error) {
	switch {
	case ctx == nil:
		return Result{}, fmt.Errorf("%w: nil context", ErrInvalidValue)
	case isNil(rdb):
		return Result{}, fmt.Errorf("%w: nil client", ErrInvalidValue)
	case token <= 0:
		return Result{}, fmt.Errorf("%w: %d", ErrInvalidToken, token)
	case op.cmd == "":
		return Result{}, fmt.Errorf("%w: empty write (use Set, HSet or RPush)", ErrInvalidValue)
	case op.cmd == "hset" && len(op.args)%2 != 0:
		return Result{}, fmt.Errorf("%w: HSet needs field value pairs", ErrInvalidValue)
	}
	fk, err := Key(key)
	if err != nil {
		return Result{}, err
	}
	args := append([]any{token, op.cmd}, op.args...)
	v, err := script.Run(ctx, rdb, []string{key, fk}, args...).Int64Slice()
	if err != nil {
		return Result{}, fmt.Errorf("fence: write %q: %w", key, err)
	}
	if len(v) != 2 {
		return Result{}, fmt.Errorf("fence: write %q: unexpected reply %v", key, v)
	}
	return Result{Accepted: v[0] == 1, Last: v[1]}, nil
}

// Last reads the newest token seen for key: 0 when none.
func Last(ctx context.Context, rdb redis.Cmdable, key string) (int64, error) {
	if ctx == nil {
		return 0, fmt.Errorf("%w: nil context", ErrInvalidValue)
	}
	if isNil(rdb) {
		return 0, fmt.Errorf("%w: nil client", ErrInvalidValue)
	}
	fk, err := Key(key)
	if err != nil {
		return 0, err
	}
	n, err := rdb.Get(ctx, fk).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fence: last %q: %w", key, err)
	}
	return n, nil
}

// isNil reports a nil client, also one typed as a nil pointer.
func isNil(c any) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

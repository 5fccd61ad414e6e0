package core

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// transientPrefixes are the Redis error replies that say "not now" rather
// than "never": nothing ran (or the server is between roles), and the same
// command can succeed once the server has recovered.
//
//	LOADING      a restarted server still loading its data set
//	TRYAGAIN     a multi-key command during a slot migration
//	CLUSTERDOWN  a cluster without a majority, or with a slot uncovered
//	READONLY     a primary demoted to a replica during a failover
//	MASTERDOWN   a replica that lost its primary (replica-serve-stale-data no)
//	BUSY         another script running past busy-reply-threshold
//	NOREPLICAS   min-replicas-to-write not met for now
//	MASTERDOWN and NOREPLICAS are refused before anything ran, like the rest.
var transientPrefixes = []string{"LOADING", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "MASTERDOWN", "BUSY ", "NOREPLICAS"}

// transient reports an error after which the same Redis call may succeed
// if sent again: a network failure (timeout, reset, refused or broken
// connection, EOF, go-redis's pool timeout) or one of transientPrefixes.
// Not transient: context errors (the caller's wait is over), ErrUnavailable
// (a call's bound ran out: bound.go), a closed go-redis client, script errors and wrong key types (no retry can help).
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, ErrClosed) || errors.Is(err, ErrUnavailable) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range transientPrefixes {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "connection pool timeout")
}

// permanent reports a Redis error reply that no retry can change (a script
// error, a key of another type).
func permanent(err error) bool { return isScriptError(err) && !transient(err) }

package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Token reads the lock's fencing token key (GET "redisson_lock_token:{name}"):
// the last token any acquisition got, 0 when the key does not exist (no
// token was ever issued on this name). An error when the key holds something
// other than an integer.
func (m *Mutex) Token(ctx context.Context) (int64, error) {
	if ctx == nil {
		return 0, errNilCtx
	}
	key := m.Keys.Token()
	s, err := call(ctx, func(ctx context.Context) (string, error) { return m.S.RDB.Get(ctx, key).Result() })
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fairlock: token %q: %w", key, err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fairlock: token %q holds %q, not an integer", key, s)
	}
	return n, nil
}

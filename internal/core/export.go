package core

import "context"

// Call runs f bounded by ctx, as every lock call does (see call): for lock
// packages outside core that read lock state with their own commands.
func Call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if ctx == nil {
		var zero T
		return zero, errNilCtx
	}
	return call(ctx, f)
}

module github.com/fairlock-go/fairlock/faulttests

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/fairlock-go/fairlock v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// The fault suite tests this repository itself; it is a module of its own so
// that its dependencies (porcupine) never become the library's. Nobody
// requires this module, so the replace is never seen by a consumer.
replace github.com/fairlock-go/fairlock => ../

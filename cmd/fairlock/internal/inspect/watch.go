package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairlock-go/fairlock/internal/wire"
)

// Latch kinds.
const (
	// UnlockLatch: redisson_unlock_latch:{name}:<request-id> (the locks'
	// and the permit-expirable semaphore's releases).
	UnlockLatch = "unlock"
	// AcquireLatch: fairlock_acquire_latch:{name}:<request-id> (the locks,
	// the permit-expirable semaphore), fairlock_sem_acquire_latch:{name}:
	// (the fair semaphore), fairlock_seats_acquire_latch:{venue}: (seats).
	AcquireLatch = "acquire"
	// ReleaseLatch: fairlock_sem_release_latch:{name}:<request-id> (the
	// fair semaphore), fairlock_seats_release_latch:{venue}: (seats).
	ReleaseLatch = "release"
)

// Latch is one unlock or acquisition latch key of the lock: it makes the
// copies of one request (retries, late duplicates) count once.
type Latch struct {
	Kind      string `json:"kind"`
	Key       string `json:"key"`
	RequestID string `json:"request_id"`
	// Value is the latch's state: "0" or "1" (the unlock's reply), or
	// "held", "held:<token>", "void", "void:held" (acquisitions).
	Value string `json:"value"`
	// TTLMs is the key's PTTL: -1 for no expiry.
	TTLMs int64 `json:"ttl_ms"`
}

// Latches are the latch keys found by one bounded SCAN.
type Latches struct {
	Keys []Latch `json:"keys"`
	// Found is how many latch keys the scan found, Unlock and Acquire
	// how many of each kind; more than len(Keys) when only the newest
	// MaxLatches are listed.
	Found   int `json:"found"`
	Unlock  int `json:"unlock"`
	Acquire int `json:"acquire"`
	Release int `json:"release"`
	// Partial is true when the scan stopped after its bound before it
	// had gone through the whole keyspace: there may be more.
	Partial bool `json:"partial,omitempty"`
}

// Bounds of the latch scan: SCAN calls per read and keys per call (a hint
// to Redis), latch keys whose state and PTTL are read, and latch keys
// listed (the newest: the most time left).
const (
	MaxScanCalls = 64
	ScanCount    = 1000
	maxLatchRead = 200
	MaxLatches   = 10
)

// globEscape escapes the characters SCAN MATCH gives a meaning to.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\^`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ReadLatches lists the latch keys kept under name with SCAN MATCH (never
// KEYS), at most MaxScanCalls calls a pattern, and lists the newest
// MaxLatches found, with their state and PTTL: the lock's unlock and
// acquisition latches (also the permit-expirable semaphore's), the fair
// semaphore's acquisition and release latches, and, when kinds has
// KindSeats, the venue's. It sends only read commands.
func ReadLatches(ctx context.Context, rdb redis.Cmdable, name string, kinds ...string) (*Latches, error) {
	k, fk := wire.KeysFor(name), wire.SemFairKeysFor(name)
	prefixes := map[string]string{k.Latch(""): UnlockLatch, k.AcquireLatch(""): AcquireLatch,
		fk.AcquireLatch(""): AcquireLatch, fk.ReleaseLatch(""): ReleaseLatch}
	if slices.Contains(kinds, KindSeats) {
		sk := wire.SeatsKeysFor(wire.Venue(name))
		prefixes[sk.AcquireLatch("")] = AcquireLatch
		prefixes[sk.ReleaseLatch("")] = ReleaseLatch
	}
	// Every prefix ends in "_latch:<a tag>:": one scan per tail.
	tails := map[string]bool{}
	for p := range prefixes {
		tails[p[strings.Index(p, "_latch:"):]] = true
	}
	found := map[string]bool{}
	partial := false
	for tail := range tails {
		pattern := "*" + globEscape(tail) + "*"
		var cursor uint64
		calls := 0
		for {
			keys, next, err := rdb.Scan(ctx, cursor, pattern, ScanCount).Result()
			if err != nil {
				return nil, fmt.Errorf("scan latches: %w", err)
			}
			calls++
			for _, key := range keys {
				for p := range prefixes {
					if strings.HasPrefix(key, p) {
						found[key] = true
					}
				}
			}
			cursor = next
			if cursor == 0 || calls >= MaxScanCalls {
				break
			}
		}
		partial = partial || cursor != 0
	}
	kindOf := func(key string) (string, string) {
		for p, kind := range prefixes {
			if strings.HasPrefix(key, p) {
				return kind, p
			}
		}
		return "", ""
	}
	l := &Latches{Keys: []Latch{}, Found: len(found), Partial: partial}
	keys := make([]string, 0, len(found))
	for key := range found {
		keys = append(keys, key)
		switch kind, _ := kindOf(key); kind {
		case UnlockLatch:
			l.Unlock++
		case AcquireLatch:
			l.Acquire++
		default:
			l.Release++
		}
	}
	sort.Strings(keys)
	if len(keys) > maxLatchRead {
		keys = keys[:maxLatchRead]
	}
	if len(keys) == 0 {
		return l, nil
	}
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			gets[i] = p.Get(ctx, key)
			ttls[i] = p.PTTL(ctx, key)
		}
		return nil
	})
	if err != nil && err != redis.Nil && !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		return nil, fmt.Errorf("read latches: %w", err)
	}
	for i, key := range keys {
		v, err := gets[i].Result()
		if err == redis.Nil {
			continue // expired since the scan
		}
		if err != nil {
			v = "(" + err.Error() + ")"
		}
		ttl := int64(-1)
		if d, err := ttls[i].Result(); err == nil && d >= 0 {
			ttl = d.Milliseconds()
		}
		kind, p := kindOf(key)
		l.Keys = append(l.Keys, Latch{Kind: kind, Key: key, RequestID: strings.TrimPrefix(key, p), Value: v, TTLMs: ttl})
	}
	// Newest first: the most time left (no expiry counts as the most).
	left := func(x Latch) int64 {
		if x.TTLMs < 0 {
			return 1 << 62
		}
		return x.TTLMs
	}
	sort.SliceStable(l.Keys, func(i, j int) bool { return left(l.Keys[i]) > left(l.Keys[j]) })
	if len(l.Keys) > MaxLatches {
		l.Keys = l.Keys[:MaxLatches]
	}
	return l, nil
}

// Frame is one refresh of inspect --watch: the lock's state and its
// latches at one instant, or the error that kept them from being read.
type Frame struct {
	Frame int    `json:"frame"` // 1 is the first
	Time  string `json:"time"`  // RFC 3339 UTC, the inspector's clock
	Name  string `json:"name"`
	// Error is why the state could not be read (Redis down, a timeout):
	// then the frame has no state, and the watch goes on.
	Error string `json:"error,omitempty"`
	*Report
	Latches *Latches `json:"latches,omitempty"`
	// LatchError is why the latches could not be listed.
	LatchError string `json:"latch_error,omitempty"`
}

// ReadFrame reads frame number n of the lock called name. A Redis error
// is put in the frame, never returned.
func ReadFrame(ctx context.Context, rdb redis.Cmdable, name string, n int, now time.Time) *Frame {
	f := &Frame{Frame: n, Time: now.UTC().Format("2006-01-02T15:04:05.000Z"), Name: name}
	r, err := Read(ctx, rdb, name, now)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	f.Report = r
	if l, err := ReadLatches(ctx, rdb, name, r.Kinds...); err != nil {
		f.LatchError = err.Error()
	} else {
		f.Latches = l
	}
	return f
}

// WriteNDJSON writes f as one line of JSON.
func (f *Frame) WriteNDJSON(w io.Writer) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteText writes f for a person: header is its first line (the frame's
// time and number, or a terminal's title line), then the lock's state, its
// latches, or the error. It is written with one Write.
func (f *Frame) WriteText(w io.Writer, header string) error {
	var b strings.Builder
	b.WriteString(header + "\n")
	if f.Error != "" {
		fmt.Fprintf(&b, "lock %q\n", f.Name)
		b.WriteString(wrap("ERROR:  ", "cannot read the lock: "+f.Error+" (still watching)"))
		_, err := io.WriteString(w, b.String())
		return err
	}
	f.Report.writeText(&b, true, func(b *strings.Builder) { f.writeLatches(b) })
	_, err := io.WriteString(w, b.String())
	return err
}

// writeLatches writes the frame's latch lines.
func (f *Frame) writeLatches(b *strings.Builder) {
	switch {
	case f.LatchError != "":
		b.WriteString(wrap("latches: ", "ERROR "+f.LatchError))
	case f.Latches == nil || f.Latches.Found == 0:
		s := "latches: none"
		if f.Latches != nil && f.Latches.Partial {
			s += fmt.Sprintf(" found (scan stopped after %d calls: there may be some)", MaxScanCalls)
		}
		b.WriteString(s + "\n")
	default:
		l := f.Latches
		fmt.Fprintf(b, "latches: %d (%d unlock, %d acquire", l.Found, l.Unlock, l.Acquire)
		if l.Release > 0 {
			fmt.Fprintf(b, ", %d release", l.Release)
		}
		b.WriteString(")")
		if l.Partial {
			fmt.Fprintf(b, ", scan stopped after %d calls: maybe more", MaxScanCalls)
		}
		if l.Found > len(l.Keys) {
			fmt.Fprintf(b, "; the newest %d:", len(l.Keys))
		}
		b.WriteString("\n")
		iw, vw := len("request id"), len("state")
		for _, x := range l.Keys {
			iw, vw = max(iw, len(x.RequestID)), max(vw, len(x.Value))
		}
		fmt.Fprintf(b, "  %-7s  %-*s  %-*s  %s\n", "kind", iw, "request id", vw, "state", "expires in")
		for _, x := range l.Keys {
			ttl := "never"
			if x.TTLMs >= 0 {
				ttl = round(x.TTLMs)
			}
			fmt.Fprintf(b, "  %-7s  %-*s  %-*s  %s\n", x.Kind, iw, x.RequestID, vw, x.Value, ttl)
		}
	}
}

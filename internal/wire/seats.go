package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The fair multi-seat hold (not in Redisson; our own wire format, issue
// 22): a request for a set of seats of one venue (the names' common hash
// tag) joins the queue of every seat in one script and is granted all its
// seats at once when it heads all its queues and the seats are free. Each
// seats_*.lua header states its KEYS, ARGV and replies; seats_common.lua
// states the keys and the rules. The wrappers below are the only Go code
// that knows their order.

// Script files of the multi-seat hold.
const (
	FileSeatsAcquire   = "seats_acquire.lua"
	FileSeatsRelease   = "seats_release.lua"
	FileSeatsLeave     = "seats_leave.lua"
	FileSeatsAbandon   = "seats_abandon.lua"
	FileSeatsRenew     = "seats_renew.lua"
	fileSeatsCommon    = "seats_common.lua"
	seatsHoldsPrefix   = "fairlock_seats"
	seatsLeasePrefix   = "fairlock_seats_lease"
	seatsSeatPrefix    = "fairlock_seats_seat"
	seatsReqPrefix     = "fairlock_seats_req"
	seatsQueuePrefix   = "fairlock_seats_queue"
	seatsGracePrefix   = "fairlock_seats_grace"
	seatsTokenPrefix   = "fairlock_seats_token"
	seatsChannelPrefix = "fairlock_seats__channel"
	seatsALatchPrefix  = "fairlock_seats_acquire_latch"
	seatsRLatchPrefix  = "fairlock_seats_release_latch"
)

// SeatsMax is the most seats one request may name.
const SeatsMax = 64

// SeatsFiles lists the multi-seat hold's scripts, in a fixed order.
var SeatsFiles = []string{FileSeatsAcquire, FileSeatsRelease, FileSeatsLeave, FileSeatsAbandon, FileSeatsRenew}

// Venue is the venue of a seat name: its hash tag (the text between the
// first '{' and the first '}' after it, when not empty, as Redis Cluster
// reads it), or the whole name when it has none.
func Venue(name string) string {
	if open := strings.IndexByte(name, '{'); open >= 0 {
		if end := strings.IndexByte(name[open+1:], '}'); end > 0 {
			return name[open+1 : open+1+end]
		}
	}
	return name
}

// SeatsKeys are the keys and channels of one venue, all carrying its hash
// tag (one cluster slot).
type SeatsKeys struct {
	Venue   string // the hash tag
	Holds   string // fairlock_seats:{T}: holder -> number of seats held
	Leases  string // fairlock_seats_lease:{T}: holder -> lease end, server clock, Unix ms
	Seat    string // fairlock_seats_seat:{T}: seat -> holder
	Req     string // fairlock_seats_req:{T}: owner -> its seats (JSON array), queued or holding
	Queue   string // fairlock_seats_queue:{T}: every seat's queue (see seats_common.lua)
	Grace   string // fairlock_seats_grace:{T}: ready waiter -> grace end ("+" for the second)
	Token   string // fairlock_seats_token:{T}: fencing token counter
	Channel string // fairlock_seats__channel:{T}; a waiter listens on Channel + ":" + owner
}

// SeatsKeysFor returns the keys of venue (a hash tag, see Venue).
func SeatsKeysFor(venue string) SeatsKeys {
	p := func(prefix string) string { return prefix + ":{" + venue + "}" }
	return SeatsKeys{Venue: venue, Holds: p(seatsHoldsPrefix), Leases: p(seatsLeasePrefix), Seat: p(seatsSeatPrefix),
		Req: p(seatsReqPrefix), Queue: p(seatsQueuePrefix), Grace: p(seatsGracePrefix), Token: p(seatsTokenPrefix),
		Channel: p(seatsChannelPrefix)}
}

// AcquireLatch is the latch key of one acquisition request.
func (k SeatsKeys) AcquireLatch(id string) string {
	return seatsALatchPrefix + ":{" + k.Venue + "}:" + id
}

// ReleaseLatch is the latch key of one release call.
func (k SeatsKeys) ReleaseLatch(id string) string {
	return seatsRLatchPrefix + ":{" + k.Venue + "}:" + id
}

// WaiterChannel is the channel owner's wake-ups are published on.
func (k SeatsKeys) WaiterChannel(owner string) string { return k.Channel + ":" + owner }

func (k SeatsKeys) common(extra ...string) []string {
	return append([]string{k.Holds, k.Leases, k.Seat, k.Req, k.Queue, k.Grace, k.Token, k.Channel}, extra...)
}

// SeatsSource returns the text of a seats script as it is sent to Redis:
// the body with latch_common.lua, fair_common.lua and seats_common.lua in
// front of it (the renewal, which uses none of them, as it is).
func SeatsSource(file string) string { return seatsSource(file, compose) }

func seatsSource(file string, compose composer) string {
	body, err := readFile(file)
	if err != nil || !strings.HasPrefix(file, "seats_") || file == fileSeatsCommon {
		panic("lua: no seats script " + file)
	}
	if file == FileSeatsRenew {
		return string(body)
	}
	return compose(string(body), mustRead(fileLatchCommon), mustRead(fileFairToken), mustRead(fileFairCommon), mustRead(fileSeatsCommon))
}

// SeatsScripts is one loaded set of the seats scripts. SeatsDefault is the
// real set; tests build broken sets with EditSeats.
type SeatsScripts struct {
	set *Scripts // the sources, digests and go-redis scripts (exec.go's calls)
}

// SeatsDefault is the set every multi-seat hold uses.
var SeatsDefault = sync.OnceValue(func() *SeatsScripts { return EditSeats(nil) })

// EditSeats builds a set whose sources are edit(file, source); nil leaves
// them as they are.
func EditSeats(edit func(file, src string) string) *SeatsScripts {
	s := &SeatsScripts{set: newScripts(len(SeatsFiles))}
	for _, f := range SeatsFiles {
		src := editSource(f, edit, seatsSource)
		s.set.add(f, src)
	}
	return s
}

// Script returns the loaded script of file.
func (s *SeatsScripts) Script(file string) *redis.Script {
	sc, ok := s.set.byFile[file]
	if !ok {
		panic("lua: no seats script " + file)
	}
	return sc
}

// call starts a call of file with KEYS[1..8] (common), one more key
// (extra), seats more keys and nargs arguments, sent as the locks' hot
// scripts are (exec.go: one prebuilt EVALSHA argument list, repeating
// values boxed once, no redis.Script.Run copy and no fresh key slice).
func (s *SeatsScripts) call(file string, k SeatsKeys, extra string, seats []string, nargs int) cmdBuf {
	c := s.set.cmd(file, 9+len(seats), nargs)
	c.key(k.Holds).key(k.Leases).key(k.Seat).key(k.Req).key(k.Queue).key(k.Grace).key(k.Token).key(k.Channel)
	c.str(extra)
	for _, n := range seats {
		c.key(n)
	}
	return c
}

// SeatsArgs are the values a seats script call may need. Durations are
// milliseconds; no client clock is sent (the scripts read the server's).
type SeatsArgs struct {
	Owner     string   // "<client-uuid>:<thread-id>"; never contains '|'
	Seats     []string // acquire: the seats, 1..SeatsMax distinct names of the venue
	LeaseMs   int64    // acquire: lease, >= 1
	GraceMs   int64    // head grace, >= 1
	Queue     bool     // acquire: join or stay in the queues when not granted
	AcquireID string   // acquire, abandon: request id, reused on retry; "" for no latch (acquire only)
	ReleaseID string   // release: request id; "" for no latch
	LatchMs   int64    // latch lifetime
	PubCmd    string   // "publish" (default when empty) or "spublish"
	Position  bool     // acquire: reply the caller's queue position when queued and not granted
}

func (a SeatsArgs) pubCmd() string { return pub(a.PubCmd) }

// Errors of the seats scripts (besides ErrAbandoned and ErrGrantOver,
// shared with the locks). Each reports a call that changed nothing.
var (
	// ErrSeatsAlreadyHolds: the owner holds seats already.
	ErrSeatsAlreadyHolds = errors.New("fairlock: seats: owner already holds seats")
	// ErrSeatsOtherSeats: the owner is queued for another set of seats.
	ErrSeatsOtherSeats = errors.New("fairlock: seats: owner is queued for other seats")
	// ErrSeatsMixed: a seat's name is also a lock's, and that lock is held.
	ErrSeatsMixed = errors.New("fairlock: seats: a seat is also the name of a held lock")
	// ErrSeatsWrongType: a key of the venue holds another type.
	ErrSeatsWrongType = errors.New("fairlock: seats: a key holds the wrong type")
	// ErrSeatsBadArgs: the script refused its arguments.
	ErrSeatsBadArgs = errors.New("fairlock: seats: bad arguments")
)

func seatsErr(err error) error { return markErr(err, seatsMarkers) }

var seatsMarkers = []errMarker{
	{"owner already holds seats", ErrSeatsAlreadyHolds},
	{"owner is queued for other seats", ErrSeatsOtherSeats},
	{"is also the name of a held lock", ErrSeatsMixed},
	{"fairlock: seats key ", ErrSeatsWrongType},
	// A command of the hot scripts that met a key of another type before
	// anything was written (token_check's GET of the token key): Redis's
	// own error.
	{"WRONGTYPE", ErrSeatsWrongType},
	{"fairlock: seats: bad arguments", ErrSeatsBadArgs},
}

// SeatsResult is the outcome of an acquisition.
type SeatsResult struct {
	Granted bool  // the owner holds every seat it asked for
	Token   int64 // when granted: the grant's fencing token
	SleepMs int64 // when not: how long to sleep at most before trying again
	// Ahead, when not granted and SeatsArgs.Position and Queue were set:
	// the caller's place (see seats_acquire.lua); Ahead.Ahead -1 otherwise.
	Ahead Ahead
}

func (s *SeatsScripts) run(ctx context.Context, rdb redis.Scripter, file string, keys []string, args ...any) *redis.Cmd {
	return s.set.call(ctx, rdb, file, keys, args...)
}

// Acquire runs seats_acquire.lua (reads Owner, Seats, LeaseMs, GraceMs,
// Queue, AcquireID, LatchMs, PubCmd).
func (s *SeatsScripts) Acquire(ctx context.Context, rdb redis.Scripter, k SeatsKeys, a SeatsArgs) (SeatsResult, error) {
	latchMs := int64(0)
	if a.AcquireID != "" {
		latchMs = max(a.LatchMs, 1)
	}
	q := 0
	if a.Queue {
		q = 1
	}
	nargs := 6
	if a.Position {
		nargs = 7
	}
	c := s.call(FileSeatsAcquire, k, k.AcquireLatch(a.AcquireID), a.Seats, nargs)
	c.num(a.LeaseMs).str(a.Owner).num(latchMs).num(a.GraceMs).key(a.pubCmd()).num(int64(q))
	if a.Position {
		c.key("1")
	}
	v, err := c.run(ctx, rdb).Int64Slice()
	if err != nil {
		return SeatsResult{}, seatsErr(err)
	}
	if len(v) == 4 && v[0] == 0 {
		return SeatsResult{SleepMs: v[1], Ahead: Ahead{Ahead: v[2], Joined: v[3] == 1}}, nil
	}
	if len(v) != 2 || (v[0] != 0 && v[0] != 1) {
		return SeatsResult{}, fmt.Errorf("lua: unexpected seats acquisition reply %v", v)
	}
	if v[0] == 1 {
		return SeatsResult{Granted: true, Token: v[1]}, nil
	}
	return SeatsResult{SleepMs: v[1], Ahead: Ahead{Ahead: -1}}, nil
}

// Release runs seats_release.lua (reads Owner, ReleaseID, LatchMs,
// GraceMs, PubCmd): whether the owner held seats and gave them back (a
// retry with the same ReleaseID reports the first answer).
func (s *SeatsScripts) Release(ctx context.Context, rdb redis.Scripter, k SeatsKeys, a SeatsArgs) (bool, error) {
	latchMs := int64(0)
	if a.ReleaseID != "" {
		latchMs = max(a.LatchMs, 1)
	}
	c := s.call(FileSeatsRelease, k, k.ReleaseLatch(a.ReleaseID), nil, 4)
	c.str(a.Owner).num(latchMs).num(a.GraceMs).key(a.pubCmd())
	n, err := c.run(ctx, rdb).Int64()
	return n == 1, seatsErr(err)
}

// Leave runs seats_leave.lua (reads Owner, GraceMs, PubCmd): the owner
// leaves every queue it is in. It reports whether it was queued.
func (s *SeatsScripts) Leave(ctx context.Context, rdb redis.Scripter, k SeatsKeys, a SeatsArgs) (bool, error) {
	n, err := s.run(ctx, rdb, FileSeatsLeave, k.common(), a.Owner, a.GraceMs, a.pubCmd()).Int64()
	return n == 1, seatsErr(err)
}

// Abandon runs seats_abandon.lua (reads Owner, AcquireID, LatchMs,
// GraceMs, PubCmd): later copies of the request do nothing, and seats a
// copy was granted are given back. It reports whether a copy was granted.
func (s *SeatsScripts) Abandon(ctx context.Context, rdb redis.Scripter, k SeatsKeys, a SeatsArgs) (bool, error) {
	if a.AcquireID == "" {
		panic("wire: seats Abandon needs the request's AcquireID")
	}
	n, err := s.run(ctx, rdb, FileSeatsAbandon, k.common(k.AcquireLatch(a.AcquireID)),
		a.Owner, max(a.LatchMs, 1), a.GraceMs, a.pubCmd()).Int64()
	return n == 1, seatsErr(err)
}

// RenewEach runs seats_renew.lua over holds (venues all in one cluster
// slot), one owner each: each live hold's lease ends at the server's now +
// leaseMs (never earlier than it did), and the venue's keys end no sooner
// than that plus 60 s.
func (s *SeatsScripts) RenewEach(ctx context.Context, rdb redis.Scripter, venues []SeatsKeys, owners []string, leaseMs int64) ([]RenewStatus, error) {
	if len(venues) != len(owners) {
		panic("wire: RenewEach needs one owner per venue")
	}
	keys := make([]string, 0, 6*len(venues))
	args := make([]any, 0, len(owners)+1)
	args = append(args, leaseMs)
	for i, k := range venues {
		keys = append(keys, k.Holds, k.Leases, k.Seat, k.Req, k.Queue, k.Grace)
		args = append(args, owners[i])
	}
	v, err := s.run(ctx, rdb, FileSeatsRenew, keys, args...).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(v) != len(venues) {
		return nil, fmt.Errorf("lua: seats renew replied %d results for %d pairs", len(v), len(venues))
	}
	st := make([]RenewStatus, len(v))
	for i, r := range v {
		st[i] = RenewStatus(r)
	}
	return st, nil
}

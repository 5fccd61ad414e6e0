package model

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Sem is the permit-expirable semaphore (Redisson's
// RPermitExpirableSemaphore, lua/sem_*.lua) as plain data: the pool's
// count, the held permits with their expiry scores, the acquisition
// latches, and the messages the last operation published. Time is passed
// in: "now" is the instant a script was sent with (Unix ms).
type Sem struct {
	Channel   string
	HasPool   bool
	Pool      int64
	Permits   map[string]int64  // permit id -> expiry (SemNever: none)
	Latches   map[string]string // first permit id of a request -> "held:<token>" / "void"
	Token     int64             // the token counter (ours): the last token given
	Published []Message         // by the last operation
}

// SemNever is the expiry score of a permit without a lease.
const SemNever int64 = 922337203685477

// NoLeaseMs is the lease of a permit that never expires.
const NoLeaseMs int64 = -1

// Errors of acquisition copies (the scripts' error replies).
var (
	ErrSemAbandoned = errors.New("acquisition request abandoned")
	ErrSemGrantOver = errors.New("acquisition request already granted and its hold is over")
)

// NewSem is an empty semaphore whose messages go to channel.
func NewSem(channel string) *Sem {
	return &Sem{Channel: channel, Permits: map[string]int64{}, Latches: map[string]string{}}
}

// Clone is a deep copy.
func (s *Sem) Clone() *Sem {
	c := *s
	c.Permits = maps.Clone(s.Permits)
	c.Latches = maps.Clone(s.Latches)
	c.Published = slices.Clone(s.Published)
	return &c
}

func (s *Sem) begin() { s.Published = nil }

func (s *Sem) publish(v int64) {
	s.Published = append(s.Published, Message{Channel: s.Channel, Payload: strconv.FormatInt(v, 10)})
}

func expiry(leaseMs, now int64) int64 {
	if leaseMs < 0 {
		return SemNever
	}
	return now + leaseMs
}

// reclaim returns at most limit (-1: all) expired permits to the pool,
// earliest first (ties by id), and publishes the pool when positive.
func (s *Sem) reclaim(now int64, limit int) {
	var expired []string
	for id, e := range s.Permits {
		if e >= 0 && e <= now {
			expired = append(expired, id)
		}
	}
	if len(expired) == 0 {
		return
	}
	slices.SortFunc(expired, func(a, b string) int {
		if s.Permits[a] != s.Permits[b] {
			if s.Permits[a] < s.Permits[b] {
				return -1
			}
			return 1
		}
		if a < b {
			return -1
		}
		if a > b {
			return 1
		}
		return 0
	})
	if limit >= 0 && len(expired) > limit {
		expired = expired[:limit]
	}
	for _, id := range expired {
		delete(s.Permits, id)
	}
	s.HasPool = true
	s.Pool += int64(len(expired))
	if s.Pool > 0 {
		s.publish(s.Pool)
	}
}

// Acquire is sem_acquire.lua: ids (at least one, distinct) with leaseMs
// (NoLeaseMs: none) at now; latch says whether the request carries a
// latch. It reports whether the permits are held, and then the grant's
// token; else the wait until the earliest expiry (-1: none can expire).
func (s *Sem) Acquire(ids []string, leaseMs, now int64, latch bool) (bool, int64, error) {
	s.begin()
	n := len(ids)
	held, soonest := 0, int64(0)
	for _, id := range ids {
		if e, ok := s.Permits[id]; ok && e > now {
			if held == 0 || e < soonest {
				soonest = e
			}
			held++
		}
	}
	if latch {
		switch st := s.Latches[ids[0]]; {
		case st == "void":
			return false, 0, ErrSemAbandoned
		case st != "":
			if held == n {
				tok, _ := strconv.ParseInt(strings.TrimPrefix(st, "held:"), 10, 64)
				return true, tok, nil
			}
			return false, 0, ErrSemGrantOver
		}
	}
	if held == n {
		s.Token++ // a copy: another took the permits; a new token
		return true, s.Token, nil
	}
	if held > 0 {
		return false, max(soonest-now, 1), nil
	}
	var back int64
	for _, id := range ids {
		if _, ok := s.Permits[id]; ok {
			delete(s.Permits, id)
			back++
		}
	}
	if back > 0 {
		s.HasPool = true
		s.Pool += back
		if s.Pool > 0 {
			s.publish(s.Pool)
		}
	}
	s.reclaim(now, n)
	if s.HasPool && s.Pool >= int64(n) {
		s.Token++
		s.Pool -= int64(n)
		for _, id := range ids {
			s.Permits[id] = expiry(leaseMs, now)
		}
		if latch {
			s.Latches[ids[0]] = "held:" + strconv.FormatInt(s.Token, 10)
		}
		return true, s.Token, nil
	}
	first, firstID := int64(-1), ""
	for id, e := range s.Permits {
		if first < 0 || e < first || (e == first && id < firstID) {
			first, firstID = e, id
		}
	}
	if first >= 0 && first != SemNever {
		return false, max(first-now, 1), nil
	}
	return false, -1, nil
}

// Abandon is sem_abandon.lua: the request (ids) is given up; it reports
// how many permits came back.
func (s *Sem) Abandon(ids []string) int64 {
	s.begin()
	s.Latches[ids[0]] = "void"
	var n int64
	for _, id := range ids {
		if _, ok := s.Permits[id]; ok {
			delete(s.Permits, id)
			n++
		}
	}
	if n > 0 {
		s.HasPool = true
		s.Pool += n
		if s.Pool > 0 {
			s.publish(s.Pool)
		}
	}
	return n
}

// ReleaseHold is sem_release_hold.lua without its latch: the permits ids
// (one acquisition's) go back; true when all of them were held.
func (s *Sem) ReleaseHold(ids []string, now int64) bool {
	s.begin()
	held := 0
	var removed int64
	for _, id := range ids {
		if e, ok := s.Permits[id]; ok {
			if e > now {
				held++
			}
			delete(s.Permits, id)
			removed++
		}
	}
	if removed > 0 {
		s.HasPool = true
		s.Pool += removed
		if s.Pool > 0 {
			s.publish(s.Pool)
		}
	}
	return held == len(ids)
}

// Release is sem_release.lua: true when id was held and had not expired.
func (s *Sem) Release(id string, now int64) bool {
	s.begin()
	e, ok := s.Permits[id]
	if !ok {
		return false
	}
	delete(s.Permits, id)
	s.HasPool = true
	s.Pool++
	s.publish(s.Pool)
	return e > now
}

// ReleaseMany is sem_release_many.lua: all or nothing.
func (s *Sem) ReleaseMany(ids []string, now int64) int64 {
	s.begin()
	for _, id := range ids {
		if e, ok := s.Permits[id]; !ok || e <= now {
			return 0
		}
	}
	s.reclaim(now, -1)
	var n int64
	for _, id := range ids {
		if _, ok := s.Permits[id]; ok {
			delete(s.Permits, id)
			n++
		}
	}
	s.HasPool = true
	s.Pool += n
	s.publish(n)
	return n
}

// TrySetPermits is sem_try_set_permits.lua.
func (s *Sem) TrySetPermits(n int64) bool {
	s.begin()
	if s.HasPool {
		return false
	}
	s.HasPool, s.Pool = true, n
	s.publish(n)
	return true
}

// SetPermits is sem_set_permits.lua.
func (s *Sem) SetPermits(n int64) {
	s.begin()
	if !s.HasPool {
		s.HasPool, s.Pool = true, n
		s.publish(n)
		return
	}
	total := s.Pool + int64(len(s.Permits))
	if total == n {
		return
	}
	s.Pool += n - total
	s.publish(n)
}

// AddPermits is sem_add_permits.lua.
func (s *Sem) AddPermits(n int64) {
	s.begin()
	s.HasPool = true
	s.Pool += n
	if n > 0 {
		s.publish(n)
	}
}

// Counts is sem_counts.lua: available (0 without a pool), acquired, and
// whether the pool exists.
func (s *Sem) Counts(now int64) (int64, int64, bool) {
	s.begin()
	s.reclaim(now, -1)
	return s.Pool, int64(len(s.Permits)), s.HasPool
}

// UpdateLease is sem_update_lease.lua.
func (s *Sem) UpdateLease(id string, leaseMs, now int64) bool {
	s.begin()
	s.reclaim(now, -1)
	if _, ok := s.Permits[id]; !ok {
		return false
	}
	s.Permits[id] = expiry(leaseMs, now)
	return true
}

// LeaseTime is sem_lease_time.lua: -1 (no lease), the ms left, or 0 (not
// held).
func (s *Sem) LeaseTime(id string, now int64) int64 {
	s.begin()
	s.reclaim(now, -1)
	e, ok := s.Permits[id]
	switch {
	case !ok:
		return 0
	case e == SemNever:
		return -1
	}
	return e - now
}

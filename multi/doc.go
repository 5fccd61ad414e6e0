// Package multi holds several locks as one.
//
//   - MultiLock (Redisson's RedissonMultiLock) holds several lock handles of
//     any kind at once, all or none, taking them in one canonical order
//     (whatever order they were listed in) so that two MultiLocks over the
//     same locks cannot deadlock.
//   - RedLock (Redisson's RedissonRedLock) holds one lock over independent
//     Redis deployments: it is held when a majority of them granted it
//     within its validity (see Drift).
//   - Seats is the fair multi-seat hold: several named seats held at once,
//     each request waiting in arrival order with every request that shares a
//     seat. Names that share a hash tag ("{hall}:12A", "{hall}:12B") are one
//     venue, taken by one script; across venues, Seats takes each venue's
//     hold in a canonical order (Mode says which).
//
// docs/design.md ("Package multi: MultiLock and RedLock" and "The fair
// multi-seat hold") has the contracts and what each promises under faults.
package multi

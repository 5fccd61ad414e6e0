// Package pubsub multiplexes every lock waiter of one client over shared
// Redis pub/sub connections: one connection in classic mode, one per
// cluster shard (primary) in sharded mode.
//
// A waiter subscribes to a channel and receives wake-ups on a buffered
// channel of capacity 1, so a message that arrives between a waiter's retry
// and its wait is kept, not lost. Subscriptions are reference-counted per
// channel: the first waiter makes the hub subscribe, the last one to leave
// makes it unsubscribe, at once or, with Linger, once the channel has had no
// waiter for the linger time (a confirmed subscription is kept for the
// next wait; Attach joins it without a round trip). There is no goroutine
// per waiter.
//
// # Connections and the recovery path
//
// Each connection has one manager goroutine, which does all of its network
// writes (SUBSCRIBE, UNSUBSCRIBE, PING, and the dial they may cause), and
// one reader goroutine per generation. A generation is one *redis.PubSub:
// when anything goes wrong with it the manager throws it away and starts
// the next generation on a fresh PubSub, so there is one recovery path for
// every fault:
//
//   - a failed write (SUBSCRIBE, UNSUBSCRIBE or PING, including a dial that
//     fails or times out),
//   - a read error (the connection dropped, CLIENT KILL, an error reply),
//   - a PING not answered within replyTimeout (a stalled or black-holed
//     connection), or answers that skip one (bytes were lost).
//
// The new generation subscribes again every channel the hub holds on that
// connection, and when a channel's subscription is confirmed on the new
// connection every waiter on it is woken to re-check (a message may have
// been lost while it was down). Failures in a row are retried with a
// backoff from 50 ms to 1 s; in a cluster each retry first asks go-redis to
// reload its slot map, so that the next connection goes to the node that
// serves the slots now.
// go-redis's own reconnect inside a PubSub is not relied on: it
// re-subscribes only the channels that PubSub knew before the failing call,
// and it cannot tell the hub when it happened.
//
// Confirmation: after each round of writes the manager sends a PING whose
// payload is a sequence number. Redis answers in order, so its PONG proves
// that every subscription written before it is in effect; a subscription is
// confirmed by the first PONG that follows it. (Counting SUBSCRIBE replies
// per channel cannot tell the reply to an earlier SUBSCRIBE of the same
// channel from the latest one's, and one lost reply leaves a count wrong
// for good.)
//
// # Bounds
//
//   - Subscribe returns once the subscription is confirmed, or after
//     confirmTimeout (3 s) with the waiter registered and a wake-up pending
//     in its C(), so that its owner re-checks its lock at once; the waiter
//     is woken again when the subscription is confirmed later. It fails
//     only when its ctx ends (nothing is left behind) or the hub is closed
//     (ErrClosed).
//   - One round of writes, dial included, is bounded by writeTimeout (5 s),
//     and its PING must be answered within replyTimeout (5 s). A broken
//     connection is noticed at once when the socket reports it, else within
//     replyTimeout of the next write; an idle one is checked with a PING
//     after pingEvery of silence, so a dead idle connection is noticed
//     within pingEvery + replyTimeout.
//   - Close makes every pending Subscribe return ErrClosed, wakes every live
//     waiter, closes the connections (which unblocks their readers) and
//     waits at most closeWait (5 s) for the hub's goroutines.
//   - The hub's mutex is never held across network I/O or a sleep: a slow
//     write on one connection delays nothing on another, and wake-ups are
//     handed out while a write is in progress.
//
// # Sharded mode
//
// Sharded mode (SSUBSCRIBE, Redis 7+): a shard channel can only be
// subscribed on the primary that serves its hash slot, and one go-redis
// PubSub talks to one node, so the hub keeps one connection per primary and
// puts each channel on the connection of the primary that serves it
// (SSUBSCRIBEs are grouped by slot). When the server refuses a subscription
// with MOVED (the slot moved, or our view of the cluster was stale), or
// drops it with an unrequested SUNSUBSCRIBE (Redis does this when a slot
// leaves the node), the manager asks go-redis for a new slot map and moves
// the channel to the connection of its new primary, waking its waiters so
// they re-check; a connection that was opened to the wrong node is rebuilt.
// When a primary fails, its connection fails, and the next generation is
// opened (after a slot map reload) to whichever node then serves the slots.
//
// # Files
//
//   - hub.go: the Hub and the waiter face: New, Subscribe, Attach, Linger,
//     Waiter (C, Close), the wake-ups, confirmation of a channel's waiters, delivery
//     of messages, and Close.
//   - conn.go: connection generations and recovery: conn, its manager
//     (manage), rebuild with backoff, the rounds of writes and their
//     confirming PING, the reader, PONG handling and OnRecover.
//   - shard.go: sharded routing: the mode (Sharded, AutoSharded and the
//     auto probe), a channel's shard key, grouping commands by slot, and
//     re-homing channels refused with MOVED or dropped by the server.
package pubsub

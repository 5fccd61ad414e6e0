package etcd

import (
	"fmt"
	"net/url"

	"github.com/fairlock-go/fairlock"
)

// RWMutex is a fair read-write lock on etcd, by the rule of a queue on a
// consensus store: readers and writers join one queue in arrival order
// (etcd's create revision); a read waits only for the writes that joined
// before it, a write waits for everything that joined before it. So
// neither side starves: a reader that arrives behind a waiting writer
// waits for that writer (unlike etcd's recipes RWMutex and Redisson's
// read-write lock, where a stream of readers can hold a writer off).
//
// Each half is a *Mutex (the calls of a lock handle; a multi.Member): a
// hold of the read half is shared with other readers. Keys are
// <prefix>/rw/<escaped name>/r/… and …/w/…; a reader watches only the
// newest write ahead of it, a writer only the newest key of either kind
// ahead of it. A handle re-enters only its own half: a handle holding the
// read half that locks the write half of the same lock waits for itself
// (no upgrade; release the read and lock the write instead). Tokens are
// the keys' create revisions: strictly increasing from writer to writer
// and from a writer to the readers after it; concurrent readers have
// distinct tokens.
type RWMutex struct {
	r, w *Mutex
}

// NewRWMutex returns a read-write lock name (a namespace of its own: a
// Mutex of the same name is another lock).
func (c *Client) NewRWMutex(name string) (*RWMutex, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: etcd: nil *Client", fairlock.ErrInvalidValue)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: etcd: empty lock name", fairlock.ErrInvalidName)
	}
	dir := c.cfg.prefix + "/rw/" + url.PathEscape(name) + "/"
	return &RWMutex{
		r: c.newHandle(name, dir, dir+"r/", dir+"w/"),
		w: c.newHandle(name, dir, dir+"w/", dir),
	}, nil
}

// ReadLock is the read half: shared with other readers, waiting only for
// earlier writes.
func (l *RWMutex) ReadLock() *Mutex { return l.r }

// WriteLock is the write half: exclusive, waiting for every earlier read
// and write.
func (l *RWMutex) WriteLock() *Mutex { return l.w }

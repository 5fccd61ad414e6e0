// Package faultproxy puts a TCP proxy between a test's Redis client and its
// Redis, so that a test can inject network faults into one client's
// connections: added latency, a stall (bytes held back, then delivered),
// a black hole (bytes dropped), and connection resets.
//
// It is a small loopback proxy of its own, in the test process, with no
// server process to manage and no dependency outside the standard library
// (it used to embed Toxiproxy, whose dependencies then reached every module
// that required this one; the faults and their semantics are the ones its
// latency, timeout and reset toxics gave). Each accepted connection is
// piped both ways by a reader that timestamps each chunk it reads and a
// writer that delivers the chunks in order, each once the faults active
// for its direction allow: latency holds a chunk until its read time plus
// the delay, a stall is a latency of an hour that is lifted by its undo (the
// held chunks then go at once, in order), a black hole drops the chunks. A
// peer's close travels behind the bytes read before it, as in Toxiproxy: a
// client that gives up on a stalled command and closes its connection
// still has the command delivered when the stall ends. The proxy listens on
// 127.0.0.1 only and is stopped when the test ends.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// stallDelay is a stall's latency: longer than any test, lifted by undo.
const stallDelay = time.Hour

type direction int

const (
	toServer direction = iota // client -> Redis ("upstream")
	toClient                  // Redis -> client ("downstream")
)

// fault is one active fault on one direction of a proxy.
type fault struct {
	dir   direction
	delay time.Duration
	drop  bool
	// for a drop: the connections it saw, closed when it is undone
	// (Toxiproxy's timeout toxic closes its connections on removal)
	links map[*link]struct{}
}

// Proxy is one proxied path to an upstream address.
type Proxy struct {
	Addr string // where clients connect: 127.0.0.1:port

	upstream string

	mu      sync.Mutex
	ln      net.Listener // nil while cut or closed
	closed  bool
	links   map[*link]struct{}
	faults  map[*fault]struct{}
	changed chan struct{} // closed (and replaced) when faults change
	wg      sync.WaitGroup
}

// chunk is what one read from a connection returned, with its time.
type chunk struct {
	b  []byte
	at time.Time
}

// link is one proxied connection: the client's and Redis's ends.
type link struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
}

// kill closes both ends at once; bytes still held are lost.
func (l *link) kill() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// Start starts a proxy to upstream (host:port) on a free loopback port. It
// is stopped when t ends.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// New starts a proxy to upstream on a free loopback port. Close stops it.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		Addr:     ln.Addr().String(),
		upstream: upstream,
		links:    map[*link]struct{}{},
		faults:   map[*fault]struct{}{},
		changed:  make(chan struct{}),
	}
	p.mu.Lock()
	p.serve(ln)
	p.mu.Unlock()
	return p, nil
}

// serve starts accepting on ln; p.mu is held.
func (p *Proxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				return // closed: cut or stopped
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.connect(c)
			}()
		}
	}()
}

// connect dials Redis for the accepted client c and pipes them.
func (p *Proxy) connect(c net.Conn) {
	s, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.ln == nil {
		p.mu.Unlock()
		l.kill()
		return
	}
	p.links[l] = struct{}{}
	for f := range p.faults {
		if f.drop {
			f.links[l] = struct{}{}
		}
	}
	p.wg.Add(2)
	p.mu.Unlock()
	var ends sync.WaitGroup
	ends.Add(2)
	pipe := func(dir direction, src, dst net.Conn) {
		defer p.wg.Done()
		defer ends.Done()
		p.pipe(l, dir, src, dst)
	}
	go pipe(toServer, c, s)
	go pipe(toClient, s, c)
	ends.Wait()
	l.kill()
	p.mu.Lock()
	delete(p.links, l)
	for f := range p.faults {
		delete(f.links, l)
	}
	p.mu.Unlock()
}

// pipe copies src to dst through the faults of dir until src ends (its
// end delivered after the bytes before it, then dst is closed) or the
// link is killed.
func (p *Proxy) pipe(l *link, dir direction, src, dst net.Conn) {
	chunks := make(chan chunk, 64)
	p.wg.Add(1)
	go func() { // reader
		defer p.wg.Done()
		defer close(chunks)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				select {
				case chunks <- chunk{b: b[:n], at: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-chunks:
		case <-l.done:
			return
		}
		if !ok {
			// src ended: its end follows the bytes before it
			l.kill()
			return
		}
		if !p.deliver(l, dir, c, dst) {
			l.kill()
			return
		}
	}
}

// deliver writes c to dst once the faults of dir allow it (dropping it
// under a black hole). It reports false if the link is gone.
func (p *Proxy) deliver(l *link, dir direction, c chunk, dst net.Conn) bool {
	for {
		p.mu.Lock()
		var delay time.Duration
		drop := false
		for f := range p.faults {
			if f.dir != dir {
				continue
			}
			delay += f.delay
			drop = drop || f.drop
		}
		changed := p.changed
		p.mu.Unlock()
		if drop {
			return true
		}
		wait := time.Until(c.at.Add(delay))
		if wait <= 0 {
			_, err := dst.Write(c.b)
			return err == nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
		case <-l.done:
			t.Stop()
			return false
		}
	}
}

// add makes f active until undo; p.mu is not held.
func (p *Proxy) add(f *fault) (undo func()) {
	p.mu.Lock()
	if f.drop {
		f.links = map[*link]struct{}{}
		for l := range p.links {
			f.links[l] = struct{}{}
		}
	}
	p.faults[f] = struct{}{}
	p.notify()
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.faults, f)
			p.notify()
			var kill []*link
			for l := range f.links {
				kill = append(kill, l)
			}
			p.mu.Unlock()
			for _, l := range kill {
				l.kill()
			}
		})
	}
}

// notify wakes the writers waiting on the faults; p.mu is held.
func (p *Proxy) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// killAll closes every connection through the proxy; p.mu is not held.
func (p *Proxy) killAll() {
	p.mu.Lock()
	var ls []*link
	for l := range p.links {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.kill()
	}
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.mu.Unlock()
	p.killAll()
	p.wg.Wait()
}

// Latency delays every byte, both ways, by d until undo is called.
func (p *Proxy) Latency(d time.Duration) (undo func()) {
	u1 := p.add(&fault{dir: toServer, delay: d})
	u2 := p.add(&fault{dir: toClient, delay: d})
	return func() { u1(); u2() }
}

// Stall holds back every byte sent to Redis until undo is called; then what
// was held is delivered. To the client it looks like a Redis that stopped
// answering; to Redis, like commands that arrive late (the way abandoned
// retries reach a server that was paused).
func (p *Proxy) Stall() (undo func()) {
	return p.add(&fault{dir: toServer, delay: stallDelay})
}

// StallReplies holds back every byte Redis sends until undo is called;
// commands still reach Redis and run. To the client it looks like replies
// that come late (a renewal that kept the key alive but whose reply came
// after the holder stopped believing in its hold).
func (p *Proxy) StallReplies() (undo func()) {
	return p.add(&fault{dir: toClient, delay: stallDelay})
}

// BlackHole drops every byte in both directions until undo is called;
// connections stay open meanwhile. Undo closes the connections that were
// black-holed, so to the client it ends like a reset: go-redis sees errors
// and redials.
func (p *Proxy) BlackHole() (undo func()) {
	u1 := p.add(&fault{dir: toServer, drop: true})
	u2 := p.add(&fault{dir: toClient, drop: true})
	return func() { u1(); u2() }
}

// Reset closes every open connection through the proxy at once; new
// connections are accepted as before.
func (p *Proxy) Reset() {
	p.killAll()
}

// Cut closes every connection and refuses new ones until undo is called
// (a client whose network is gone; never undone, a client that died).
func (p *Proxy) Cut() (undo func()) {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.mu.Unlock()
	p.killAll()
	var once sync.Once
	return func() {
		once.Do(func() {
			// listen again on the same port (Addr does not change); a
			// port taken meanwhile is retried for a while
			deadline := time.Now().Add(10 * time.Second)
			for {
				p.mu.Lock()
				if p.closed || p.ln != nil {
					p.mu.Unlock()
					return
				}
				ln, err := net.Listen("tcp", p.Addr)
				if err == nil {
					p.serve(ln)
					p.mu.Unlock()
					return
				}
				p.mu.Unlock()
				if time.Now().After(deadline) {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

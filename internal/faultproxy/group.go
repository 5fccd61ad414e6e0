package faultproxy

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Group is one client's network: a proxy per upstream address, made on
// first use by Dialer, so that a client that talks to several servers (a
// Redis Cluster, a primary and its replica, Sentinels) has every
// connection behind a proxy of its own. A fault set on the group applies
// to every proxy of it, including those made while the fault lasts.
type Group struct {
	mu      sync.Mutex
	proxies map[string]*Proxy
	active  map[int]groupFault
	nextID  int
	cut     bool
	closed  bool
}

type groupFault func(p *Proxy) (undo func())

// NewGroup makes an empty group. Close stops its proxies.
func NewGroup() *Group {
	return &Group{proxies: map[string]*Proxy{}, active: map[int]groupFault{}}
}

// StartGroup makes a group that is closed when t ends.
func StartGroup(t testing.TB) *Group {
	g := NewGroup()
	t.Cleanup(g.Close)
	return g
}

// ErrCut is returned by Dialer while the group is cut: the dial error a
// host whose network is gone gets (a *net.OpError, ENETUNREACH), so that a
// client treats it as it would a real one (a network failure, worth
// retrying within its bounds), not as an error of another kind. Match it
// with errors.Is.
var ErrCut error = &net.OpError{Op: "dial", Net: "tcp",
	Err: os.NewSyscallError("connect (faultproxy: network cut)", syscall.ENETUNREACH)}

// Dialer is a go-redis Options.Dialer: it connects to addr through the
// group's proxy for addr, starting that proxy on first use.
func (g *Group) Dialer(ctx context.Context, network, addr string) (net.Conn, error) {
	p, err := g.proxy(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.Addr)
}

func (g *Group) proxy(addr string) (*Proxy, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errors.New("faultproxy: group closed")
	}
	if g.cut {
		return nil, ErrCut
	}
	if p, ok := g.proxies[addr]; ok {
		return p, nil
	}
	p, err := New(addr)
	if err != nil {
		return nil, err
	}
	g.proxies[addr] = p
	for _, f := range g.active {
		f(p) // its undo is found again through the group's undo
	}
	return p, nil
}

// apply runs f on every proxy now and on every proxy made until undo.
func (g *Group) apply(f groupFault) (undo func()) {
	g.mu.Lock()
	id := g.nextID
	g.nextID++
	var undos []func()
	for _, p := range g.proxies {
		undos = append(undos, f(p))
	}
	wrapped := func(p *Proxy) func() {
		u := f(p)
		undos = append(undos, u) // under g.mu (called from proxy)
		return u
	}
	g.active[id] = wrapped
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.active, id)
			us := undos
			g.mu.Unlock()
			for _, u := range us {
				u()
			}
		})
	}
}

// Latency delays every byte both ways by d until undo.
func (g *Group) Latency(d time.Duration) (undo func()) {
	return g.apply(func(p *Proxy) func() { return p.Latency(d) })
}

// Stall holds back every byte sent to the servers until undo, then
// delivers it (see Proxy.Stall).
func (g *Group) Stall() (undo func()) {
	return g.apply(func(p *Proxy) func() { return p.Stall() })
}

// BlackHole drops every byte both ways until undo (see Proxy.BlackHole).
func (g *Group) BlackHole() (undo func()) {
	return g.apply(func(p *Proxy) func() { return p.BlackHole() })
}

// Reset closes every open connection of the group at once.
func (g *Group) Reset() {
	g.mu.Lock()
	ps := g.list()
	g.mu.Unlock()
	for _, p := range ps {
		p.Reset()
	}
}

// Cut closes every connection and refuses new ones until undo; never
// undone, it is a client that died.
func (g *Group) Cut() (undo func()) {
	g.mu.Lock()
	g.cut = true
	ps := g.list()
	g.mu.Unlock()
	var undos []func()
	for _, p := range ps {
		undos = append(undos, p.Cut())
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.cut = false
			g.mu.Unlock()
			for _, u := range undos {
				u()
			}
		})
	}
}

// Close stops every proxy of the group.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	ps := g.list()
	g.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
}

func (g *Group) list() []*Proxy {
	out := make([]*Proxy, 0, len(g.proxies))
	for _, p := range g.proxies {
		out = append(out, p)
	}
	return out
}

// Package faultproxy puts a TCP proxy between a test's Redis client and its
// Redis, so that a test can inject network faults into one client's
// connections: added latency, a stall (bytes held back, then delivered),
// a black hole (bytes dropped), and connection resets.
//
// It embeds Toxiproxy (github.com/Shopify/toxiproxy/v2) in the test process:
// a maintained fault proxy whose toxics (latency, timeout, reset_peer) are the
// faults the fault tests need, with no server process to manage. The proxy
// listens on 127.0.0.1 only and is stopped when the test ends.
package faultproxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is one proxied path to an upstream address.
type Proxy struct {
	Addr string // where clients connect: 127.0.0.1:port

	mu    sync.Mutex
	p     *toxiproxy.Proxy
	seq   atomic.Int64
	up    bool
	owner string
}

var (
	srvOnce sync.Once
	srv     *toxiproxy.ApiServer
)

func server() *toxiproxy.ApiServer {
	srvOnce.Do(func() {
		srv = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
		srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	})
	return srv
}

var names atomic.Int64

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
	name := fmt.Sprintf("fp%d", names.Add(1))
	tp := toxiproxy.NewProxy(server(), name, "127.0.0.1:0", upstream)
	if err := tp.Start(); err != nil {
		return nil, err
	}
	return &Proxy{Addr: tp.Listen, p: tp, up: true, owner: name}, nil
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.up {
		p.p.Stop()
		p.up = false
	}
}

func (p *Proxy) add(kind, stream string, attrs string) (undo func()) {
	name := fmt.Sprintf("%s_%s_%d", kind, stream, p.seq.Add(1))
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":{%s}}`, name, kind, stream, attrs)
	p.mu.Lock()
	_, err := p.p.Toxics.AddToxicJson(strings.NewReader(js))
	p.mu.Unlock()
	if err != nil {
		panic("faultproxy: " + err.Error())
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			_ = p.p.Toxics.RemoveToxic(backgroundCtx(), name)
		})
	}
}

// Latency delays every byte, both ways, by d until undo is called.
func (p *Proxy) Latency(d time.Duration) (undo func()) {
	ms := fmt.Sprintf(`"latency":%d`, d.Milliseconds())
	u1 := p.add("latency", "upstream", ms)
	u2 := p.add("latency", "downstream", ms)
	return func() { u1(); u2() }
}

// Stall holds back every byte sent to Redis until undo is called; then what
// was held is delivered. To the client it looks like a Redis that stopped
// answering; to Redis, like commands that arrive late (the way abandoned
// retries reach a server that was paused).
func (p *Proxy) Stall() (undo func()) {
	return p.add("latency", "upstream", `"latency":3600000`)
}

// StallReplies holds back every byte Redis sends until undo is called;
// commands still reach Redis and run. To the client it looks like replies
// that come late (a renewal that kept the key alive but whose reply came
// after the holder stopped believing in its hold).
func (p *Proxy) StallReplies() (undo func()) {
	return p.add("latency", "downstream", `"latency":3600000`)
}

// BlackHole drops every byte in both directions until undo is called;
// connections stay open meanwhile. Undo closes the connections that were
// black-holed (Toxiproxy's timeout toxic closes them on removal), so to the
// client it ends like a reset: go-redis sees errors and redials.
func (p *Proxy) BlackHole() (undo func()) {
	u1 := p.add("timeout", "upstream", `"timeout":0`)
	u2 := p.add("timeout", "downstream", `"timeout":0`)
	return func() { u1(); u2() }
}

// Reset closes every open connection through the proxy at once; new
// connections are accepted as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		return
	}
	p.p.Stop()
	if err := p.p.Start(); err != nil {
		p.up = false
	}
}

// Cut closes every connection and refuses new ones until undo is called
// (a client whose network is gone; never undone, a client that died).
func (p *Proxy) Cut() (undo func()) {
	p.mu.Lock()
	if p.up {
		p.p.Stop()
		p.up = false
	}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if !p.up {
			if err := p.p.Start(); err == nil {
				p.up = true
			}
		}
	}
}

func backgroundCtx() context.Context { return context.Background() }

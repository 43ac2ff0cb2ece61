package testenv

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target and can be taken down — every
// live connection cut, new ones refused — and brought back on the same
// address, so tests can make a database "go away for a while".
//
// While it is down, the proxy keeps its address bound without listening
// (connections are still refused), so the port is not handed to anything
// else meanwhile: not to another test's listener on port 0, nor as the
// source port of a connection, such as a client of the proxy dialling it
// again from that very port and connecting to itself. Either would make
// Up fail with "address already in use".
type Proxy struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	held   io.Closer // while down: the address, bound and not listening
	conns  map[net.Conn]struct{}
}

// StartProxy listens on a free loopback port and forwards to target.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// RewriteURL points a database URL at the proxy.
func (p *Proxy) RewriteURL(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("parse %s: %v", raw, err)
	}
	u.Host = p.addr
	return u.String()
}

// Down closes the listener, keeping the address, and cuts every
// connection.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
		// Best effort: without it, Up works as long as nothing took the
		// port meanwhile.
		p.held, _ = holdAddr(p.addr)
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Up listens again on the same address.
func (p *Proxy) Up(t testing.TB) {
	t.Helper()
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
}

// Restore is Up for a goroutine other than the test's: it returns the
// error instead of failing the test.
func (p *Proxy) Restore() error {
	p.release()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("proxy relisten on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// release gives up the address held while down.
func (p *Proxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		_ = p.held.Close()
		p.held = nil
	}
}

// close is Down for good, at the end of the test.
func (p *Proxy) close() {
	p.Down()
	p.release()
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			if !p.track(c, up) {
				return
			}
			go p.pipe(c, up)
			go p.pipe(up, c)
		}
	}()
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src) // a cut connection is the point of Down
	_ = dst.Close()
	_ = src.Close()
}

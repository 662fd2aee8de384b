// Package faults injects the faults of the chaos scenario: a network
// partition between one replica and the API server (Proxy), and, in
// bench/replicas, frozen and killed replicas.
package faults

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a target (the API
// server) and can cut them: while cut, bytes stop flowing both ways and new
// connections wait, as in a network partition; nothing is closed, so the
// client sees timeouts, not errors. Stall also drops the open connections.
// Restore lets everything flow again.
type Proxy struct {
	target   string
	listener net.Listener

	mu    sync.Mutex
	cut   bool
	flow  *sync.Cond
	conns map[net.Conn]struct{}
	done  bool
	// held are the client's bytes a cut held back and delivered later;
	// restores counts the Restores.
	held     []Held
	restores int
}

// Held is a chunk of a client's bytes that a cut held back: when the proxy
// read it from the client (when the client sent it) and when it delivered
// it to the target, after Restore. Through TLS the proxy cannot tell the
// requests inside apart, only when their bytes travelled.
type Held struct {
	Sent, Delivered time.Time
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, listener: l, conns: map[net.Conn]struct{}{}}
	p.flow = sync.NewCond(&p.mu)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to instead of the target.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Cut stops all traffic until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

// Stall drops every open connection and holds new ones until Restore:
// they are accepted and never forwarded, so a client's requests wait
// inside the client, on a connection that does not complete, as when the
// route to the server has gone. What was in flight is lost, not delivered
// late.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets traffic flow again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.restores++
	p.flow.Broadcast()
	p.mu.Unlock()
}

// Held returns the client bytes cuts held back and delivered so far, in
// the order they were delivered.
func (p *Proxy) Held() []Held {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Held(nil), p.held...)
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.done, p.cut = true, false
	for c := range p.conns {
		c.Close()
	}
	p.flow.Broadcast()
	p.mu.Unlock()
	return p.listener.Close()
}

func (p *Proxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		go p.serve(client)
	}
}

// wait blocks while the proxy is cut; it reports false once it is closed.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.cut && !p.done {
		p.flow.Wait()
	}
	return !p.done
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve(client net.Conn) {
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	if !p.wait() {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(server, client, true) })
	wg.Go(func() { p.pipe(client, server, false) })
	wg.Wait()
}

// pipe copies src to dst, holding each chunk while the proxy is cut;
// fromClient records the chunks held on their way to the target. While
// cut it goes on reading src, so that each held chunk's sending time is
// known, not only the first's.
func (p *Proxy) pipe(dst, src net.Conn, fromClient bool) {
	type chunk struct {
		bytes    []byte
		sent     time.Time
		restores int
	}
	chunks := make(chan chunk, 256)
	defer func() {
		// Unblock the other direction, and the reader: its next read
		// fails, and draining frees a send it may be blocked in.
		src.Close()
		dst.Close()
		for range chunks {
		}
	}()
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				restores := p.restores
				p.mu.Unlock()
				chunks <- chunk{bytes: buf[:n], sent: time.Now(), restores: restores}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if !p.wait() {
			return
		}
		if _, err := dst.Write(c.bytes); err != nil {
			return
		}
		p.mu.Lock()
		if fromClient && c.restores != p.restores {
			// Read before a Restore, written after it.
			p.held = append(p.held, Held{Sent: c.sent, Delivered: time.Now()})
		}
		p.mu.Unlock()
	}
}

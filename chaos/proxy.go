package main

import (
	"net"
	"sync"
)

// proxy is a TCP proxy on loopback that the suite puts between one daemon and
// a server (Redis or NATS) to partition them on command:
//
//	pass ──stall()──▶ stalled ──heal()──▶ pass
//	pass ──drop()───▶ dropped ──heal()──▶ pass
//
// stall is a blackhole: nothing is read or forwarded in either direction and
// new connections are accepted but not connected through, so the daemon's
// connections stay open and its requests go unanswered, as in a network
// partition; what was sent meanwhile is delivered when it heals, as TCP
// retransmission would. drop severs every connection and closes new ones at
// once, as a peer that resets them.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	gate   chan struct{} // closed while traffic may flow
	drop   bool
	pipes  map[*pipe]struct{}
	closed chan struct{}
	wg     sync.WaitGroup
}

// pipe is one proxied connection.
type pipe struct{ client, server net.Conn }

func (p *pipe) close() {
	p.client.Close()
	if p.server != nil {
		p.server.Close()
	}
}

// newProxy listens on a free loopback port and forwards to target.
func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	open := make(chan struct{})
	close(open)
	p := &proxy{ln: ln, target: target, gate: open, pipes: map[*pipe]struct{}{}, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// stall blackholes the proxy until heal.
func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default: // already stalled
	}
}

// sever closes every connection and refuses new ones until heal.
func (p *proxy) sever() {
	p.mu.Lock()
	p.drop = true
	pipes := make([]*pipe, 0, len(p.pipes))
	for pp := range p.pipes {
		pipes = append(pipes, pp)
	}
	p.mu.Unlock()
	for _, pp := range pipes {
		pp.close()
	}
}

// heal lets traffic flow again.
func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = false
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// Close stops the proxy and closes every connection.
func (p *proxy) Close() {
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		return
	default:
	}
	close(p.closed)
	pipes := make([]*pipe, 0, len(p.pipes))
	for pp := range p.pipes {
		pipes = append(pipes, pp)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, pp := range pipes {
		pp.close()
	}
	p.wg.Wait()
}

// open waits until traffic may flow; false when the proxy closed first.
func (p *proxy) open() bool {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	select {
	case <-gate:
		return true
	case <-p.closed:
		return false
	}
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		dropping := p.drop
		p.mu.Unlock()
		if dropping {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	pp := &pipe{client: c}
	if !p.track(pp) {
		c.Close()
		return
	}
	defer p.untrack(pp)
	defer pp.close()
	// A connection made while stalled is connected through only once the
	// partition heals.
	if !p.open() {
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	pp.server = s
	dropping := p.drop
	p.mu.Unlock()
	if dropping {
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.copy(s, c); done <- struct{}{} }()
	go func() { p.copy(c, s); done <- struct{}{} }()
	<-done // either side ended: end both
}

func (p *proxy) track(pp *pipe) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		return false
	default:
	}
	p.pipes[pp] = struct{}{}
	return true
}

func (p *proxy) untrack(pp *pipe) {
	p.mu.Lock()
	delete(p.pipes, pp)
	p.mu.Unlock()
}

// copy forwards src to dst while the gate is open. It reads only while open,
// so a stalled proxy leaves the bytes in the kernel's buffers (the sender
// sees a silent peer), and it holds what it read when a stall began until the
// stall ends.
func (p *proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		if !p.open() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.open() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: the pipe ends both ways
		}
	}
}

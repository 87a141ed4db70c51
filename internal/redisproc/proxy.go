package redisproc

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a loopback TCP proxy in front of one Redis server that can freeze
// its replication and nothing else. It forwards every connection both ways
// and reads the commands clients send: a connection that has sent PSYNC or
// SYNC is a replica's replication link. While frozen, what the server sends
// on replication links is read and thrown away, so writes the primary
// acknowledges never reach its replicas, while every other connection
// (clients, Sentinels, the replicas' own REPLCONF ACKs) keeps working:
//
//	forwarding ──FreezeReplication()──▶ frozen ──ThawReplication()──▶ forwarding
//
// A link that lost bytes while frozen carries a broken replication stream,
// so ThawReplication closes it: the replica reconnects and resynchronises
// from its offset (a partial resync from the primary's backlog, or a full
// one), as after a real partition.
//
// Commands are recognised in RESP arrays, which is what replicas and every
// client library send; a connection that sends anything else (an inline
// command, or TLS, which the proxy cannot read) is forwarded untouched and
// is never a replication link, so freezing has no effect behind TLS.
type Proxy struct {
	ln     net.Listener
	target string

	frozen    atomic.Bool
	discarded atomic.Int64

	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// proxyConn is one proxied connection.
type proxyConn struct {
	client, server net.Conn
	replication    atomic.Bool // the client sent PSYNC or SYNC
	lost           atomic.Bool // bytes from the server were discarded while frozen
}

func (c *proxyConn) close() {
	c.client.Close()
	c.server.Close()
}

// NewProxy listens on a free loopback port (FreePort) and forwards to
// target, a host:port that need not answer yet: each connection dials it
// when it is accepted, and is closed when that fails.
func NewProxy(target string) (*Proxy, error) {
	var err error
	for i := 0; i < 5; i++ {
		var port int
		if port, err = FreePort(); err != nil {
			return nil, err
		}
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
			p.wg.Add(1)
			go p.accept()
			return p, nil
		}
	}
	return nil, err
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// FreezeReplication stops forwarding what the server sends on replication
// links, existing and new, and discards it.
func (p *Proxy) FreezeReplication() { p.frozen.Store(true) }

// ThawReplication closes the replication links that lost bytes while frozen
// and forwards again.
func (p *Proxy) ThawReplication() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if c.lost.Load() {
			c.close()
		}
	}
	p.frozen.Store(false)
}

// Discarded is how many bytes the proxy has thrown away on frozen
// replication links: more than zero once the primary has sent a write that
// its replicas will not get.
func (p *Proxy) Discarded() int64 { return p.discarded.Load() }

// ReplicationLinks is how many open connections through the proxy are
// replication links.
func (p *Proxy) ReplicationLinks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if c.replication.Load() {
			n++
		}
	}
	return n
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects one client through to the target until either side ends.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	c := &proxyConn{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	done := make(chan struct{}, 2)
	go func() { p.upstream(c); done <- struct{}{} }()
	go func() { p.downstream(c); done <- struct{}{} }()
	<-done // either side ended: end both
	c.close()
	<-done
}

// upstream forwards what the client sends, command by command, and marks
// the connection a replication link before it forwards a PSYNC or SYNC (so
// the server's answer to it is already subject to freezing).
func (p *Proxy) upstream(c *proxyConn) {
	r := bufio.NewReaderSize(c.client, 32<<10)
	w := bufio.NewWriterSize(c.server, 32<<10)
	for {
		raw, name, err := readCommand(r)
		if errors.Is(err, errNotRESP) {
			// Not RESP arrays: forward the rest untouched.
			if _, err := w.Write(raw); err != nil {
				return
			}
			if w.Flush() != nil {
				return
			}
			_, _ = io.Copy(c.server, r)
			return
		}
		if err != nil {
			return
		}
		if strings.EqualFold(name, "PSYNC") || strings.EqualFold(name, "SYNC") {
			c.replication.Store(true)
		}
		if _, err := w.Write(raw); err != nil {
			return
		}
		// Flush once the client has nothing more in flight, so a pipeline
		// goes to the server in few writes.
		if r.Buffered() == 0 && w.Flush() != nil {
			return
		}
	}
}

// downstream forwards what the server sends, except on a replication link
// while frozen: that is read and discarded.
func (p *Proxy) downstream(c *proxyConn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			if c.replication.Load() && p.frozen.Load() {
				c.lost.Store(true)
				p.discarded.Add(int64(n))
			} else if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// errNotRESP is readCommand's answer to bytes that are not a RESP array of
// bulk strings.
var errNotRESP = errors.New("not a RESP command")

// maxBulk bounds the length of one argument readCommand accepts (Redis's
// own proto-max-bulk-len default).
const maxBulk = 512 << 20

// readCommand reads one command as a client sends it, a RESP array of bulk
// strings (*<n>\r\n then $<len>\r\n<bytes>\r\n n times), and returns its
// bytes and its name (the first element). On errNotRESP, raw holds what it
// read, for the caller to forward.
func readCommand(r *bufio.Reader) (raw []byte, name string, err error) {
	first, err := r.Peek(1)
	if err != nil {
		return nil, "", err
	}
	if first[0] != '*' {
		return nil, "", errNotRESP
	}
	line, err := r.ReadBytes('\n')
	raw = line
	if err != nil {
		return raw, "", err
	}
	n, ok := respLength(line, '*')
	if !ok {
		return raw, "", errNotRESP
	}
	for i := 0; i < n; i++ {
		line, err := r.ReadBytes('\n')
		raw = append(raw, line...)
		if err != nil {
			return raw, "", err
		}
		size, ok := respLength(line, '$')
		if !ok || size > maxBulk {
			return raw, "", errNotRESP
		}
		start := len(raw)
		raw = append(raw, make([]byte, size+2)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw, "", err
		}
		if i == 0 {
			name = string(raw[start : start+size])
		}
	}
	return raw, name, nil
}

// respLength parses a RESP header line "<kind><n>\r\n".
func respLength(line []byte, kind byte) (int, bool) {
	s := strings.TrimSuffix(string(line), "\r\n")
	if len(s) < 2 || s[0] != kind {
		return 0, false
	}
	n, err := strconv.Atoi(s[1:])
	return n, err == nil && n >= 0
}

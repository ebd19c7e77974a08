// Package faultproxy is a TCP proxy for tests that need a real backend
// behind a link that misbehaves on demand: slow (Delay), stalled
// (Blackhole) or dropped (Cut). It wraps the real server rather than
// mocking it, so the client under test sees exactly what a network fault
// looks like: reads that never complete, resets, refused connections.
//
// A Proxy belongs to one test: Start registers its shutdown with
// t.Cleanup, which closes every connection and waits for every goroutine,
// so tests using it stay goleak-clean.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// mode is what the proxy does with traffic right now.
type mode int

const (
	modeNormal    mode = iota
	modeBlackhole      // accept and hold bytes, forward nothing
	modeCut            // drop every connection, refuse new ones
)

// dialTimeout bounds the dial to the target for each accepted connection.
const dialTimeout = 5 * time.Second

// Proxy forwards TCP connections from Addr to a target, injecting faults.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	mode    mode
	delay   time.Duration
	replies time.Duration // added to the target's bytes only (DelayReplies)
	changed chan struct{} // closed and replaced on every change, to wake held pumps
	links   map[*link]struct{}
	closed  bool

	done chan struct{} // closed by shutdown
	wg   sync.WaitGroup
}

// Start listens on 127.0.0.1:0 and forwards each connection to target.
// The proxy stops when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("faultproxy: listen: %v", err)
	}
	p := &Proxy{
		target:  target,
		ln:      ln,
		changed: make(chan struct{}),
		links:   make(map[*link]struct{}),
		done:    make(chan struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.shutdown)
	return p
}

// Addr is the host:port clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Delay adds d of latency before each chunk of data is forwarded, in both
// directions. Zero removes the delay.
func (p *Proxy) Delay(d time.Duration) {
	p.set(func() { p.delay = d })
}

// DelayReplies adds d of latency before each chunk the target sends back,
// and none to what the client sends: a request reaches the server (and is
// applied) on time, and its reply comes late, as after a disk stall or a
// fork on the server. Zero removes it; Heal too.
func (p *Proxy) DelayReplies(d time.Duration) {
	p.set(func() { p.replies = d })
}

// Blackhole stalls the link: connections stay open (and new ones are
// accepted) but no byte is forwarded either way until Heal, like a network
// partition that drops packets without resetting anything. Bytes already
// read are held and delivered on Heal, as TCP retransmission would.
func (p *Proxy) Blackhole() {
	p.set(func() { p.mode = modeBlackhole })
}

// Cut closes every current connection and refuses new ones (they are
// accepted and reset at once) until Heal.
func (p *Proxy) Cut() {
	var cut []*link
	p.set(func() {
		p.mode = modeCut
		for l := range p.links {
			cut = append(cut, l)
		}
	})
	for _, l := range cut {
		l.close()
	}
}

// Heal returns the proxy to forwarding normally, without added delay.
func (p *Proxy) Heal() {
	p.set(func() {
		p.mode = modeNormal
		p.delay, p.replies = 0, 0
	})
}

// set changes the proxy's state under its lock and wakes held pumps.
func (p *Proxy) set(change func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change()
	close(p.changed)
	p.changed = make(chan struct{})
}

// shutdown stops accepting, closes every link and waits for all goroutines.
func (p *Proxy) shutdown() {
	p.mu.Lock()
	p.closed = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	close(p.done)
	_ = p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond): // transient (e.g. EMFILE): back off
			}
			continue
		}
		p.mu.Lock()
		refuse := p.mode == modeCut || p.closed
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target for one client connection and pumps both ways.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.Dial("tcp", p.target)
	if err != nil {
		reset(client)
		return
	}
	l := &link{client: client, server: server}
	p.mu.Lock()
	if p.closed || p.mode == modeCut {
		p.mu.Unlock()
		reset(client)
		_ = server.Close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(l, server, client, false) }()
	go func() { defer pumps.Done(); p.pump(l, client, server, true) }()
	pumps.Wait()

	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pump copies src to dst, chunk by chunk, obeying the current mode. When
// either side ends, the whole link is closed (no half-close): enough for
// request/response protocols and simpler to reason about in tests.
// reply says src is the target (DelayReplies applies).
func (p *Proxy) pump(l *link, dst, src net.Conn, reply bool) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitToForward(reply) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitToForward blocks while the link is blackholed and for the configured
// delay (plus, for a reply, the reply delay); it reports false when the data must not be forwarded (cut, or the
// proxy is shutting down).
func (p *Proxy) waitToForward(reply bool) bool {
	for {
		p.mu.Lock()
		m, delay, changed, closed := p.mode, p.delay, p.changed, p.closed
		if reply {
			delay += p.replies
		}
		p.mu.Unlock()
		switch {
		case closed || m == modeCut:
			return false
		case m == modeBlackhole:
			select {
			case <-changed:
				continue
			case <-p.done:
				return false
			}
		case delay > 0:
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
				return true
			case <-p.done:
				timer.Stop()
				return false
			}
		default:
			return true
		}
	}
}

// link is one proxied connection: the client's side and the target's side.
type link struct {
	client, server net.Conn
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// reset closes c with an RST rather than a FIN where it can, so the peer
// sees "connection reset" at once, the nearest thing to a refused dial for
// a connection the kernel has already accepted.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

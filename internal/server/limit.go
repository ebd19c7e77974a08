package server

import (
	"net"
	"sync"
)

// limitListener serves at most cap(sem) connections at once: Accept waits
// for one to close before taking the next from the kernel's queue, where a
// waiting connection costs the process no descriptor. A flood of idle
// connections then holds at most that many of the node's descriptors, and
// its jobs keep the rest (pipes, the supervisor, backend connections).
type limitListener struct {
	net.Listener
	sem       chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept takes a slot, then a connection; the slot is freed when the
// connection closes, or at once when Accept fails.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.closed: // Shutdown while every slot is taken: stop waiting
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitConn frees its slot once, however often it is closed (the HTTP
// server may close a connection more than once).
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

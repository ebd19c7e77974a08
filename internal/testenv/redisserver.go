package testenv

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisServer is a private redis-server a test owns, on a free port and
// without persistence, so a restart loses every key as an unpersisted
// production Redis does. Tests that stop or restart Redis use one so they
// never disturb the shared server other tests run against.
type RedisServer struct {
	t    testing.TB
	Port int
	dir  string
	cmd  *exec.Cmd
}

// StartRedis starts a private redis-server and stops it in t.Cleanup.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	Uncached()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("this test runs its own redis-server and cannot find one (apt-get install redis-server): %v", err)
	}
	r := &RedisServer{t: t, Port: FreePort(t), dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// URL is the server's redis:// URL.
func (r *RedisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

// Addr is host:port.
func (r *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)) }

// Start (re)starts the server on its port and returns once it answers PING.
func (r *RedisServer) Start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("starting redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(r.Addr())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("private redis-server on port %d did not answer PING: %v", r.Port, err)
		}
		time.Sleep(20 * time.Millisecond) // the server cannot tell us; we ask it
	}
}

// Stop kills the server (no shutdown save: its data is lost) and waits.
func (r *RedisServer) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// ping speaks just enough RESP to ask a server whether it is up.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that is free now and lies below
// the kernel's ephemeral range. A port from listening on :0 would be an
// ephemeral one, and every client connection of the tests running meanwhile
// draws from that range: one can take the port between this check and the
// server's bind. The kernel never hands out ports below the range, so only
// another deliberate choice can collide.
func FreePort(t testing.TB) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const base = 10000
	if low <= base+1000 {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for test servers", low)
	}
	for range 100 {
		port := base + rand.IntN(low-base)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("no free port in [%d, %d) for a test server", base, low)
	return 0
}

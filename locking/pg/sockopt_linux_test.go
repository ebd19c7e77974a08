package pg

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bext-dev/bext-scheduler/locking"
)

// TestSessionSettings: sessions notice a dead peer in bounded time, on
// Postgres's side (keepalive and user-timeout settings of the session) and
// on ours (TCP_USER_TIMEOUT on the socket).
func TestSessionSettings(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{OpTimeout: 3 * time.Second})
	ctx := context.Background()
	h := mustLock(t, l, "k")
	sess := h2lease(t, l, h).sess
	var idle, interval, count, userTimeout, app string
	err := sess.conn.QueryRow(ctx, `SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'),
		current_setting('tcp_keepalives_count'), current_setting('tcp_user_timeout'), current_setting('application_name')`).
		Scan(&idle, &interval, &count, &userTimeout, &app)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{idle, interval, count, userTimeout, app}
	want := []string{"3", "1", "3", "6000", "bext-scheduler"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("server-side settings (idle, interval, count, user timeout ms, application) = %v, want %v", got, want)
	}
	// MaxLease is what these settings make of a silent peer on the
	// server's side: dropped after the user timeout (6s) or after the idle
	// time and count probes (3s + 3×1s), whichever comes first.
	if got, want := l.MaxLease(), 6*time.Second; got != want {
		t.Errorf("MaxLease = %v, want %v from the session's settings", got, want)
	}
	if got, want := c.open(Options{}).MaxLease(), 8*time.Second; got != want {
		t.Errorf("MaxLease at the default OpTimeout = %v, want %v (5s idle + 3×1s)", got, want)
	}
	tcp, ok := sess.gate.Conn.(*net.TCPConn)
	if !ok {
		t.Fatalf("session is not on TCP (%T): set BEXT_TEST_PG_URL to a TCP address", sess.gate.Conn)
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		ms, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if ms != 6000 {
		t.Errorf("TCP_USER_TIMEOUT = %dms, want 6000", ms)
	}
	if err := l.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
}

func h2lease(t *testing.T, l *Locker, h *locking.Handle) *lease {
	t.Helper()
	st, err := locking.HandleState(h, l)
	if err != nil {
		t.Fatal(err)
	}
	return st.(*lease)
}

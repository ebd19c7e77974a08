package testenv

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// PgBouncer is a private pgbouncer a test owns, on a free port in front of
// the test Postgres (PGURL), with trust authentication.
type PgBouncer struct {
	Port int
	pg   *url.URL
	cmd  *exec.Cmd
	log  *syncBuffer
}

// StartPgBouncer starts pgbouncer with the given pool_mode ("session",
// "transaction") and default_pool_size, and stops it in t.Cleanup. The
// admin console (database "pgbouncer") admits the Postgres user.
//
// PgBouncer refuses to run as root: as root it is started with -u postgres
// (the Debian package's user), its files made readable to that user.
func StartPgBouncer(t testing.TB, mode string, poolSize int) *PgBouncer {
	t.Helper()
	Uncached()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("this test runs its own pgbouncer and cannot find one (apt-get install pgbouncer; make test does): %v", err)
	}
	pg, err := url.Parse(PGURL(t))
	if err != nil || pg.Host == "" {
		t.Fatalf("pgbouncer tests need BEXT_TEST_PG_URL as a postgres:// URL with a TCP host")
	}
	pgUser := pg.User.Username()
	if pgUser == "" {
		pgUser = "postgres"
	}
	dbName := pg.Path[1:]
	pgHost, pgPort := pg.Hostname(), pg.Port()
	if pgPort == "" {
		pgPort = "5432"
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b := &PgBouncer{Port: FreePort(t), pg: pg, log: &syncBuffer{}}
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%s dbname=%s user=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 200
`, dbName, pgHost, pgPort, dbName, pgUser, b.Port, filepath.Join(dir, "userlist.txt"), pgUser, mode, poolSize)
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("pgbouncer.ini", ini)
	write("userlist.txt", fmt.Sprintf("%q \"\"\n", pgUser))
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Fatalf("running as root, pgbouncer needs a user to switch to and there is no postgres user: %v", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"-u", "postgres"}, args...)
	}
	b.cmd = exec.Command(bin, args...)
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		_ = b.cmd.Wait()
		if t.Failed() {
			t.Logf("pgbouncer's log:\n%s", b.log.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.Addr(), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return b
		}
		if b.cmd.ProcessState != nil || time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not listen on %s: %v\n%s", b.Addr(), err, b.log.String())
		}
		time.Sleep(20 * time.Millisecond) // it cannot tell us; we ask it
	}
}

// Addr is host:port.
func (b *PgBouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port)) }

// URL is the test Postgres URL with pgbouncer's address instead.
func (b *PgBouncer) URL() string {
	u := *b.pg
	u.Host = b.Addr()
	return u.String()
}

// AdminURL is the URL of pgbouncer's admin console.
func (b *PgBouncer) AdminURL() string {
	u := *b.pg
	u.Host = b.Addr()
	u.Path = "/pgbouncer"
	return u.String()
}

// Log is what pgbouncer printed so far.
func (b *PgBouncer) Log() string { return b.log.String() }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

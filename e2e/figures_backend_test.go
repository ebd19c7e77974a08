//go:build figures

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// privateBackends are the load and cost sections' servers: a redis-server
// and a Postgres instance of their own, started on first use, so that
// their command counts and CPU time are the nodes' alone (the machine's
// shared servers serve other work). Each run uses a key prefix or
// namespace of its own on them.
type privateBackends struct {
	t     *testing.T // the top test: the servers live until it ends
	redis *testenv.RedisServer
	pg    *privatePG
}

// figBackend is one run's view of a backend: the [locking] section its
// nodes use and the server's counters.
type figBackend struct {
	kind    string
	section string
	stats   func() backendStats
}

// backendStats are a server's cumulative counters.
type backendStats struct {
	ops     float64 // Redis commands (those scripts run included) or Postgres transactions
	scripts float64 // Redis EVAL, EVALSHA and FCALL calls: one round trip each
	cpu     float64 // the server's CPU seconds
}

func (p *privateBackends) get(t *testing.T, kind, name string) figBackend {
	t.Helper()
	switch kind {
	case "memory":
		return figBackend{kind: kind, section: "[locking]\nbackend = \"memory\"\n",
			stats: func() backendStats { return backendStats{} }}
	case "redis":
		if p.redis == nil {
			p.redis = testenv.StartRedis(p.t)
		}
		addr := p.redis.Addr()
		return figBackend{kind: kind,
			section: fmt.Sprintf("[locking]\nbackend = \"redis\"\n[locking.redis]\nurl = %q\nkey_prefix = %q\n", p.redis.URL(), name+":"),
			stats:   func() backendStats { return redisStats(t, addr) }}
	case "pg":
		if p.pg == nil {
			p.pg = startPrivatePG(p.t)
		}
		pg := p.pg
		return figBackend{kind: kind,
			section: fmt.Sprintf("[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = %q\nnamespace = %q\n", pg.url, name),
			stats:   func() backendStats { return pg.stats(t) }}
	}
	t.Fatalf("unknown backend %q", kind)
	return figBackend{}
}

var cmdstatRe = regexp.MustCompile(`(?m)^cmdstat_([a-z|_-]+):calls=(\d+)`)

// redisStats returns the commands Redis has executed (INFO commandstats,
// the INFO calls that read them left out; commands a script runs count
// too) and its CPU seconds (INFO cpu: user + system, every thread).
func redisStats(t *testing.T, addr string) backendStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 30 * time.Second})
	defer cl.Close()
	info, err := cl.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		t.Fatalf("INFO: %v", err)
	}
	var st backendStats
	for _, m := range cmdstatRe.FindAllStringSubmatch(info, -1) {
		if m[1] == "info" {
			continue
		}
		n, _ := strconv.ParseFloat(m[2], 64)
		st.ops += n
		switch m[1] {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			st.scripts += n
		}
	}
	for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
		if m := regexp.MustCompile(`(?m)^` + k + `:([0-9.]+)`).FindStringSubmatch(info); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			st.cpu += v
		}
	}
	return st
}

// privatePG is a Postgres instance of its own (initdb into a temporary
// directory, run as the postgres user, fsync and the rest at their
// defaults), on a free port.
type privatePG struct {
	url, dir string
}

func pgBin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return filepath.Join("/usr/lib/postgresql/15/bin", name)
}

var pgReadyRe = regexp.MustCompile(`database system is ready to accept connections`)

func startPrivatePG(t *testing.T) *privatePG {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("a private Postgres runs as the postgres user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// Not t.TempDir: its parents are root's and closed to postgres.
	dir, err := os.MkdirTemp("", "bext-figures-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if out, err := exec.Command("runuser", "-u", "postgres", "--", pgBin("initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := testenv.FreePort(t)
	p := proctest.Start(t, "runuser", nil, "-u", "postgres", "--", pgBin("postgres"), "-D", data,
		"-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200")
	p.WaitLog(pgReadyRe, 60*time.Second)
	return &privatePG{dir: data,
		url: fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))}
}

// stats returns the transactions committed and rolled back in the
// database the nodes use (each statement outside a transaction block is
// one; the statistics are flushed by each backend at most once a second),
// less the one this read is, and the CPU seconds of the whole instance:
// the postmaster and every process it started.
func (pg *privatePG) stats(t *testing.T) backendStats {
	t.Helper()
	// Generous: a Postgres the nodes overload answers late, and the
	// figures of that load are wanted, not a failed run.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.url)
	if err != nil {
		t.Fatalf("connecting to the private Postgres: %v", err)
	}
	defer conn.Close(ctx)
	var xacts float64
	if err := conn.QueryRow(ctx, `SELECT (xact_commit + xact_rollback)::float8 FROM pg_stat_database WHERE datname = current_database()`).Scan(&xacts); err != nil {
		t.Fatalf("pg_stat_database: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(pg.dir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	cpu := procCPU(pid)
	for _, c := range childPids(pid) {
		cpu += procCPU(c)
	}
	return backendStats{ops: xacts, cpu: cpu}
}

// clkTck is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every
// Linux build Go runs on.
const clkTck = 100

// procCPU is pid's user + system CPU seconds (0 when it is gone).
func procCPU(pid int) float64 {
	f := procStat(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64) // utime, field 14
	s, _ := strconv.ParseFloat(f[12], 64) // stime, field 15
	return (u + s) / clkTck
}

// procStat is /proc/<pid>/stat's fields after the command name (state first).
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// childPids lists pid's direct children.
func childPids(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(id); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, id)
		}
	}
	return out
}

// procRSS is pid's resident set in bytes.
func procRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s*(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	kb, _ := strconv.ParseFloat(string(m[1]), 64)
	return kb * 1024
}

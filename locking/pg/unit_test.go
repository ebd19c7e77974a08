package pg

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/locking"
)

// TestProbeClass: the statements that use the package's own advisory key
// space name it by the same number.
func TestProbeClass(t *testing.T) {
	for _, q := range []string{probeCheckSQL, createTableSQL, (sessionTimes{}).probeSQL()} {
		if !strings.Contains(q, strconv.Itoa(probeClass)) {
			t.Fatalf("statement does not use probeClass %d: %s", probeClass, q)
		}
	}
}

// TestRealSessionPasses runs the probe against the real server.
func TestRealSessionPasses(t *testing.T) {
	c := newCluster(t)
	l := c.open(Options{})
	ctx := context.Background()
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// The probe released its lock: nothing of ours is left in pg_locks.
	var n int
	if err := c.admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objsubid = 2 AND objid::bigint <> 0`, int64(probeClass)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d probe locks left behind", n)
	}
}

// TestLockIDMatchesSQL: List joins by an id computed in SQL; it must be the
// id TryLock locks.
func TestLockIDMatchesSQL(t *testing.T) {
	c := newCluster(t)
	for _, k := range [][2]string{{"bext", "nightly-report"}, {"ns", "clé ünïcode ☃"}, {"a", "bc"}, {"ab", "c"}, {"", "x"}} {
		var got int64
		q := `SELECT ` + idExpr + ` FROM (VALUES ($1::text, $2::text)) AS v(namespace, key)`
		if err := c.admin.QueryRow(context.Background(), q, k[0], k[1]).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := lockID(k[0], k[1]); got != want {
			t.Errorf("id of %q in SQL = %d, in Go = %d", k, got, want)
		}
	}
	if lockID("a", "bc") == lockID("ab", "c") {
		t.Error("namespace and key are not separated")
	}
}

func TestOpenInvalid(t *testing.T) {
	const pw = "s3cr3tpw"
	for _, u := range []string{
		"",
		"postgres://user:" + pw + "@host:notaport/db",
		"postgres://user:" + pw + "@[::1/db",
		"postgres://user@host/db?password=" + pw + "&sslmode=bogus",
		"host=h password=" + pw + " sslmode=bogus",
		"host=h password='" + pw + " x' port=nope",
		"postgres://user:" + pw + "@host/db?connect_timeout=x",
	} {
		l, err := Open(context.Background(), Options{URL: u})
		if err == nil {
			l.Close(context.Background())
			t.Errorf("Open(%q) succeeded", strings.ReplaceAll(u, pw, "PW"))
			continue
		}
		if !errors.Is(err, locking.ErrInvalid) {
			t.Errorf("Open: %v, want ErrInvalid", err)
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Open error shows the password: %v", err)
		}
		t.Logf("%v", err)
	}
	if _, err := Open(context.Background(), Options{URL: "postgres://h/db", MaxSessions: -1, OpTimeout: -1}); err == nil ||
		!strings.Contains(err.Error(), "max sessions") || !strings.Contains(err.Error(), "op timeout") {
		t.Errorf("Open with bad sizes = %v, want both problems named", err)
	}
}

func TestOpenNeedsNoServer(t *testing.T) {
	l, err := Open(context.Background(), Options{URL: "postgres://postgres@127.0.0.1:1/test"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestScrubSecrets(t *testing.T) {
	for _, tt := range []struct{ raw, secret string }{
		{"postgres://u:pa55word@h:bad/db", "pa55word"},
		{"postgres://u:pa%2F55word@h/db", "pa/55word"},
		{"postgresql://u:p@ss:w0rd@h/db", "p@ss:w0rd"},
		{"postgres://u@h/db?password=pa55word&sslmode=x", "pa55word"},
		{"host=h password=pa55word port=x", "pa55word"},
		{"host=h password='pa55 word' port=x", "pa55 word"},
		{"host=h sslpassword=pa55word", "pa55word"},
	} {
		msg := "cannot parse `" + tt.raw + "`: because " + tt.secret + " is odd"
		if got := scrubSecrets(msg, tt.raw); strings.Contains(got, tt.secret) {
			t.Errorf("scrubSecrets(%q) = %q: the secret is still there", tt.raw, got)
		}
	}
}

package redis

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/locking"
)

const secret = "s3cr3t-pw"

func TestParseOptionsSingle(t *testing.T) {
	t.Parallel()
	o, err := parseOptions("rediss://alice:"+secret+"@cache.example:6380/2?read_timeout=10s&dial_timeout=100ms&write_timeout=-1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := o.single
	if s == nil || o.failover != nil || o.cluster != nil {
		t.Fatalf("want a single-instance client, got %+v", o)
	}
	if s.Addr != "cache.example:6380" || s.DB != 2 || s.Username != "alice" || s.Password != secret {
		t.Errorf("addr/db/user/password = %q/%d/%q/%q", s.Addr, s.DB, s.Username, s.Password)
	}
	if s.TLSConfig == nil || s.TLSConfig.InsecureSkipVerify || s.TLSConfig.ServerName != "cache.example" {
		t.Errorf("rediss:// must verify the server certificate for cache.example, TLS config = %+v", s.TLSConfig)
	}
	// Longer or disabled timeouts are capped at OpTimeout; shorter kept.
	if s.ReadTimeout != time.Second || s.WriteTimeout != time.Second || s.DialTimeout != 100*time.Millisecond || s.PoolTimeout != time.Second {
		t.Errorf("read/write/dial/pool timeouts = %v/%v/%v/%v, want 1s/1s/100ms/1s", s.ReadTimeout, s.WriteTimeout, s.DialTimeout, s.PoolTimeout)
	}
	if !s.ContextTimeoutEnabled {
		t.Error("context deadlines must reach the socket (ContextTimeoutEnabled)")
	}
}

func TestParseOptionsSentinel(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"redis://h1:26379,h2:26379,h3:26379/1?master_name=mymaster",
		"redis://h1:26379/1?master_name=mymaster&addr=h2:26379&addr=h3:26379",
	} {
		o, err := parseOptions(raw, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		f := o.failover
		if f == nil {
			t.Fatalf("%s: want a Sentinel (failover) client, got %+v", raw, o)
		}
		if f.MasterName != "mymaster" || f.DB != 1 || !slices.Equal(f.SentinelAddrs, []string{"h1:26379", "h2:26379", "h3:26379"}) {
			t.Errorf("%s: master/db/sentinels = %q/%d/%v", raw, f.MasterName, f.DB, f.SentinelAddrs)
		}
		if f.ReadTimeout != time.Second || !f.ContextTimeoutEnabled {
			t.Errorf("%s: read timeout %v, context timeouts %v", raw, f.ReadTimeout, f.ContextTimeoutEnabled)
		}
	}
}

func TestParseOptionsCluster(t *testing.T) {
	t.Parallel()
	o, err := parseOptions("redis://u:"+secret+"@n1:7000,n2:7001/0", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cluster
	if c == nil {
		t.Fatalf("want a Cluster client, got %+v", o)
	}
	if !slices.Equal(c.Addrs, []string{"n1:7000", "n2:7001"}) || c.Username != "u" || c.Password != secret {
		t.Errorf("addrs/user/password = %v/%q/%q", c.Addrs, c.Username, c.Password)
	}
	if c.ReadTimeout != time.Second || !c.ContextTimeoutEnabled {
		t.Errorf("read timeout %v, context timeouts %v", c.ReadTimeout, c.ContextTimeoutEnabled)
	}
}

func TestBadURLsAreInvalidAndRedacted(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"",
		"127.0.0.1:6379",
		"http://u:" + secret + "@host/0",
		"redis://u:" + secret + "@host:notaport/0",
		"redis://u:" + secret + "@host/notadb",
		"redis://u:" + secret + "@host/0?bogus=1",
		"redis://u:" + secret + "@host/0?read_timeout=soon",
		"redis://u:" + secret + "@h1:1,h2/0",
		"redis://u:" + secret + "@h1:1,h2:2/3",
		"redis://u:" + secret + "@h1:1,h2:2/0?read_only=true",
		"redis://h1:1,h2:2/0?master_name=m&password=" + secret + "&route_by_latency=true",
		"redis://u:" + secret + "%zz@host/0",
		"redis://u:" + secret + "/x@host:1:2/0",
	} {
		l, err := Open(Options{URL: raw})
		if err == nil {
			_ = l.Close(context.Background())
			t.Errorf("Open(%s) = nil error, want ErrInvalid", RedactURL(raw))
			continue
		}
		if !errors.Is(err, locking.ErrInvalid) {
			t.Errorf("Open(%s) = %v, want ErrInvalid", RedactURL(raw), err)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("error for a bad URL shows the password: %v", err)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                      "redis://127.0.0.1:6379",
		"redis://:" + secret + "@h:1/0":                 "redis://h:1",
		"rediss://alice:" + secret + "@h:1/0?x=1":       "rediss://h:1",
		"redis://alice@h:1/0":                           "redis://h:1",
		"redis://u:" + secret + "/@x@h1:1,h2:2/0":       "redis://h1:1,h2:2",
		"redis://h/0?master_name=m&password=" + secret:  "redis://h",
		"redis://h/0?sentinel_password=" + secret + "&": "redis://h",
	} {
		if got := RedactURL(raw); got != want {
			t.Errorf("RedactURL(...) = %q, want %q", got, want)
		}
	}
}

func TestOpenDoesNotConnect(t *testing.T) {
	t.Parallel()
	// Nothing listens there; Open must still succeed so a node can start
	// while its backend is down.
	l, err := Open(Options{URL: "redis://" + closedAddr(t) + "/0"})
	if err != nil {
		t.Fatalf("Open with Redis down = %v, want nil", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// No client kind retries a command by itself, whatever the URL asks
// (max_retries): a retried try-lock-tick may be applied twice, the second
// time decided anew behind the scheduler's back (url.go, noRetries).
func TestParseOptionsNoClientRetries(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"redis://cache.example:6379/0",
		"redis://cache.example:6379/0?max_retries=5",
		"redis://s1:26379,s2:26379/0?master_name=m&max_retries=5",
		"redis://n1:7000,n2:7001/0?max_retries=5",
	} {
		o, err := parseOptions(raw, time.Second)
		if err != nil {
			t.Fatalf("parseOptions(%q) = %v", raw, err)
		}
		var got int
		switch {
		case o.single != nil:
			got = o.single.MaxRetries
		case o.failover != nil:
			got = o.failover.MaxRetries
		case o.cluster != nil:
			got = o.cluster.MaxRetries
		}
		if got != -1 {
			t.Errorf("parseOptions(%q): MaxRetries = %d, want -1 (none)", raw, got)
		}
	}
}

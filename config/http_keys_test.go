package config

import (
	"errors"
	"strings"
	"testing"
)

// [http] max_connections and hosts.

func TestHTTPLimitKeys(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, write(t, t.TempDir(), "b.toml", `
[http]
listen = "0.0.0.0:9464"
max_connections = 32
hosts = ["bext.example.com", "node-a", "10.0.0.5"]
[[scheduled]]
id = "a"
cron = "@hourly"
command = ["x"]
`))
	if c.HTTP.MaxConnections != 32 || strings.Join(c.HTTP.Hosts, ",") != "bext.example.com,node-a,10.0.0.5" {
		t.Errorf("[http] = %v", c.HTTP)
	}
	d := mustLoad(t, write(t, t.TempDir(), "b.toml", "[[scheduled]]\nid = \"a\"\ncron = \"@hourly\"\ncommand = [\"x\"]\n"))
	if d.HTTP.MaxConnections != DefaultMaxConnections || d.HTTP.Hosts != nil {
		t.Errorf("defaults: max_connections %d hosts %q", d.HTTP.MaxConnections, d.HTTP.Hosts)
	}
	if Default().HTTP.MaxConnections != DefaultMaxConnections {
		t.Errorf("Default().HTTP.MaxConnections = %d", Default().HTTP.MaxConnections)
	}
}

func TestHTTPLimitKeyProblems(t *testing.T) {
	t.Setenv("BEXT_TEST_HOST_SECRETISH", "bad host!x")
	for _, tc := range []struct {
		name, in, want string
		line           int
	}{
		{"zero connections", "[http]\nmax_connections = 0\n", "http.max_connections is 0; want 1 to 65536", 2},
		{"negative connections", "[http]\n\nmax_connections = -5\n", "http.max_connections is -5", 3},
		{"too many connections", "[http]\nmax_connections = 1000000\n", "http.max_connections is 1000000", 2},
		{"connections not a number", "[http]\nmax_connections = \"many\"\n", "max_connections", 2},
		{"host with port", "[http]\nhosts = [\"ok.example\",\n  \"bext.example.com:9464\"]\n", "http.hosts[1]: want a host name without a port", 3},
		{"host as URL", "[http]\nhosts = [\"https://bext.example.com\"]\n", "http.hosts[0]: want a host name, not a URL", 2},
		{"empty host", "[http]\nhosts = [\"\"]\n", "http.hosts[0]: empty", 2},
		{"host from env", "[http]\nhosts = [\"${BEXT_TEST_HOST_SECRETISH}\"]\n", "http.hosts[0]: not a host name", 2},
		{"hosts not a list", "[http]\nhosts = \"bext.example.com\"\n", "hosts", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in+job+"command = [\"x\"]\n"), "test.toml")
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) || c != nil {
				t.Fatalf("want *Error wrapping ErrInvalid and no config, got %v, %v", c, err)
			}
			if strings.Contains(err.Error(), "bad host!x") {
				t.Errorf("the error echoes a value from the environment:\n%v", err)
			}
			for _, p := range e.Problems {
				if strings.Contains(p.Msg, tc.want) {
					if p.Line != tc.line {
						t.Errorf("%q at line %d, want %d", p.Msg, p.Line, tc.line)
					}
					return
				}
			}
			t.Errorf("no problem mentions %q; got:\n%v", tc.want, err)
		})
	}
}

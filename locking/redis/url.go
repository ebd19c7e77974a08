package redis

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/redact"
	"github.com/bext-dev/bext-scheduler/locking"
)

// clientOptions is what a URL names: exactly one of the three kinds of
// go-redis client, with its options.
type clientOptions struct {
	single   *goredis.Options
	failover *goredis.FailoverOptions // Sentinel
	cluster  *goredis.ClusterOptions
}

// newClient builds the client a URL names (see the package doc for the
// forms accepted). It does not connect: go-redis dials lazily, so a node
// can start while Redis is down.
func newClient(raw string, opTimeout time.Duration) (c goredis.UniversalClient, err error) {
	o, err := parseOptions(raw, opTimeout)
	if err != nil {
		return nil, err
	}
	// go-redis reports some option conflicts by panicking while it builds
	// the pools; bad configuration must come back as an error instead.
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, invalidURL(raw, fmt.Errorf("%v", r))
		}
	}()
	switch {
	case o.failover != nil:
		return goredis.NewFailoverClient(o.failover), nil
	case o.cluster != nil:
		return goredis.NewClusterClient(o.cluster), nil
	default:
		return goredis.NewClient(o.single), nil
	}
}

// noRetries is every client's MaxRetries (go-redis: -1 is none; 0 is its
// default of 3, which a URL's max_retries may set too). go-redis retries a
// command after a timeout or a broken connection, which may have been
// applied already: a try-lock-tick would then be applied twice behind the
// scheduler's back, the second time as a first attempt decided anew (a
// tick its node was told contended granted to nobody). The scheduler
// resends an undecided try-lock-tick itself, with its token and T and
// marked as a resend (locking.TickRequest.Resend), which the backend
// answers idempotently; renewals and releases are fenced, and retried by
// their callers.
const noRetries = -1

// parseOptions parses raw into client options with every network timeout
// capped at opTimeout, so a hung server turns into an error in bounded
// time, and context deadlines honoured on the socket.
func parseOptions(raw string, opTimeout time.Duration) (clientOptions, error) {
	if strings.TrimSpace(raw) == "" {
		return clientOptions{}, &locking.InvalidError{Field: "url", Reason: "Redis URL is empty"}
	}
	u, err := parseURL(raw)
	if err != nil {
		return clientOptions{}, err
	}
	q := u.Query()
	switch {
	case q.Get("master_name") != "":
		o, err := goredis.ParseFailoverURL(u.String())
		if err != nil {
			return clientOptions{}, invalidURL(raw, err)
		}
		if o.RouteByLatency || o.RouteRandomly || o.ReplicaOnly {
			return clientOptions{}, invalidURL(raw, errors.New("replica_only, route_by_latency and route_randomly read from replicas; a lock must be read on the master"))
		}
		o.ContextTimeoutEnabled = true
		o.DialerRetries = dialOnce(o.DialerRetries)
		o.MaxRetries = noRetries
		capTimeouts(opTimeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
		return clientOptions{failover: o}, nil

	case len(q["addr"]) > 0:
		// Several seed addresses and no master name: Redis Cluster, which has
		// only database 0, so a path naming another is a mistake to report.
		if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
			return clientOptions{}, invalidURL(raw, fmt.Errorf("Redis Cluster has only database 0, the URL names %q", db))
		}
		u.Path, u.RawPath = "", ""
		o, err := goredis.ParseClusterURL(u.String())
		if err != nil {
			return clientOptions{}, invalidURL(raw, err)
		}
		if o.ReadOnly || o.RouteByLatency || o.RouteRandomly {
			return clientOptions{}, invalidURL(raw, errors.New("read_only, route_by_latency and route_randomly read from replicas; a lock must be read on the master"))
		}
		o.ContextTimeoutEnabled = true
		o.DialerRetries = dialOnce(o.DialerRetries)
		o.MaxRetries = noRetries
		capTimeouts(opTimeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
		return clientOptions{cluster: o}, nil

	default:
		o, err := goredis.ParseURL(u.String())
		if err != nil {
			return clientOptions{}, invalidURL(raw, err)
		}
		o.ContextTimeoutEnabled = true
		o.DialerRetries = dialOnce(o.DialerRetries)
		o.MaxRetries = noRetries
		capTimeouts(opTimeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
		return clientOptions{single: o}, nil
	}
}

// parseURL parses raw, turning a comma-separated host list
// (redis://h1:6379,h2:6379/0) into go-redis's form: the first host in the
// authority and the others as addr= query parameters.
func parseURL(raw string) (*url.URL, error) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return nil, invalidURL(raw, errors.New("missing scheme: want redis://, rediss:// or unix://"))
	}
	scheme := raw[:i]
	switch scheme {
	case "redis", "rediss", "unix":
	default:
		return nil, invalidURL(raw, fmt.Errorf("scheme %q: want redis://, rediss:// or unix://", scheme))
	}
	var extra []string
	if scheme != "unix" {
		rest := raw[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		auth := rest[:end]
		at := strings.LastIndex(auth, "@") + 1
		hosts := strings.Split(auth[at:], ",")
		for _, h := range hosts[1:] {
			if _, _, err := net.SplitHostPort(h); err != nil {
				return nil, invalidURL(raw, fmt.Errorf("address %q in the host list: want host:port", h))
			}
		}
		if len(hosts) > 1 {
			extra = hosts[1:]
			raw = raw[:i+3] + auth[:at] + hosts[0] + rest[end:]
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the whole URL, password included: keep only
		// its reason, and not even that when a password is present, since
		// on a malformed URL the reason may quote a piece of it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if strings.Contains(raw, "@") || strings.Contains(strings.ToLower(raw), "pass") {
			err = errors.New("malformed (are special characters in the password percent-encoded?)")
		}
		return nil, invalidURL(raw, err)
	}
	if len(extra) > 0 {
		q := u.Query()
		for _, h := range extra {
			q.Add("addr", h)
		}
		u.RawQuery = q.Encode()
	}
	return u, nil
}

// dialOnce makes each command attempt dial once, unless the URL set
// dial retries itself. go-redis already retries a command whose dial
// failed (max_retries); its default of five dials per attempt on top of
// that spends the whole OpTimeout on a refused connection and reports a
// bare "deadline exceeded" instead of the refusal.
func dialOnce(n int) int {
	if n <= 0 {
		return 1
	}
	return n
}

// capTimeouts sets each timeout that is unset, disabled or longer than
// limit to limit: a per-operation deadline is only as good as the
// socket deadlines under it.
func capTimeouts(limit time.Duration, ds ...*time.Duration) {
	for _, d := range ds {
		if *d <= 0 || *d > limit {
			*d = limit
		}
	}
}

// invalidURL reports a bad URL without ever showing its secrets: the URL
// is shown as scheme://host[:port] and the cause's text is scrubbed (the
// cause itself is not wrapped, because its message may quote them). It
// is a *locking.InvalidError, whose Reason is the scrubbed cause.
func invalidURL(raw string, cause error) error {
	return &locking.InvalidError{Field: "url", Subject: "Redis URL " + redact.URL(raw), Reason: redact.Scrub(cause.Error(), raw)}
}

// RedactURL shows raw as scheme://host[:port], for logs and errors: the
// project's one redaction, internal/redact.URL.
func RedactURL(raw string) string { return redact.URL(raw) }

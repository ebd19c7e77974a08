package config

import (
	"maps"
	"net/url"
	"regexp"
	"strings"
)

// redacted replaces every secret.
const redacted = "xxxxx"

// passwordParam matches a password in a query string or a keyword DSN:
// password=, passwd=, pass= and names ending in them (sslpassword=), with
// a quoted or bare value.
var passwordParam = regexp.MustCompile(`(?i)((?:^|[?&;\s])[a-z_]*(?:password|passwd|pass)=)('(?:[^'\\]|\\.)*'?|[^&;\s]*)`)

// RedactURL hides the secrets in a URL or DSN so it can be logged:
// user:password@ becomes user:xxxxx@, and password= (also passwd=, pass=)
// in keyword DSNs and query strings gets the value xxxxx. A string that
// does not parse as a URL is redacted by the same rules on its raw text.
func RedactURL(raw string) string {
	if raw == "" {
		return raw
	}
	s := raw
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			s = u.Redacted()
		}
	} else if err != nil {
		s = redactUserinfo(raw)
	}
	return passwordParam.ReplaceAllString(s, "${1}"+redacted)
}

// redactUserinfo hides the password of a URL url.Parse rejects (a bad
// escape in the password, say). It cuts at the last '@' after "://", so a
// password holding '@' or '/' is hidden whole; at worst it hides too much.
func redactUserinfo(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return raw
	}
	return raw[:i+3] + user + ":" + redacted + rest[at:]
}

// Redacted returns a copy of c safe to log: lock backend and HTTP job URLs
// pass through RedactURL, and every HTTP header value and command
// environment value (any of which may be a token) is replaced by xxxxx.
func (c *Config) Redacted() *Config {
	r := *c
	r.Locking.Redis.URL = RedactURL(c.Locking.Redis.URL)
	r.Locking.PG.URL = RedactURL(c.Locking.PG.URL)
	r.Include = append([]string(nil), c.Include...)
	r.Scheduled = make([]Schedule, len(c.Scheduled))
	for i, s := range c.Scheduled {
		s.Command = append([]string(nil), s.Command...)
		s.Env = hideValues(s.Env)
		if s.HTTP != nil {
			h := *s.HTTP
			h.URL = RedactURL(h.URL)
			h.Headers = hideValues(h.Headers)
			h.SuccessCodes = append([]int(nil), h.SuccessCodes...)
			s.HTTP = &h
		}
		r.Scheduled[i] = s
	}
	return &r
}

func hideValues(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for k := range out {
		out[k] = redacted
	}
	return out
}

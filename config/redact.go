package config

import (
	"maps"
	"regexp"
	"strings"
)

// redacted replaces every secret.
const redacted = "xxxxx"

// passwordParam matches a password in a query string or a keyword DSN:
// password=, passwd=, pass= and names ending in them (sslpassword=), with
// a quoted or bare value.
var passwordParam = regexp.MustCompile(`(?i)((?:^|[?&;\s])[a-z_]*(?:password|passwd|pass)\s*=\s*)('(?:[^'\\]|\\.)*'?|[^&;\s]*)`)

// RedactURL hides the secrets in a URL or DSN so it can be logged:
// user:password@ becomes user:xxxxx@, and password= (also passwd=, pass=)
// in keyword DSNs and query strings gets the value xxxxx. It works on the
// raw text, so a URL that does not parse is redacted too.
func RedactURL(raw string) string {
	return passwordParam.ReplaceAllString(redactUserinfo(raw), "${1}"+redacted)
}

// redactUserinfo hides the password of user:password@ in a URL. It cuts at
// the last '@' after "://" rather than parsing: a password holding an
// unescaped '@', '/' or '?' (which url.Parse misreads as part of the host or
// path) is then hidden whole. At worst it hides too much (an '@' in a query).
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

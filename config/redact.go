package config

import (
	"maps"

	"github.com/bext-dev/bext-scheduler/internal/redact"
)

// redacted replaces every secret value.
const redacted = redact.Mask

// RedactURL shows a URL or DSN as scheme://host[:port] (a keyword DSN as
// its host and port), for messages and logs: the project's one redaction,
// internal/redact.URL. Webhook URLs carry their secret in the path, so the
// path goes too.
func RedactURL(raw string) string { return redact.URL(raw) }

// Redacted returns a copy of c safe to log: lock backend, HTTP job, ping
// and notify URLs pass through RedactURL; the API tokens, every HTTP header
// value and every command environment value (any of which may be a token)
// become xxxxx.
func (c *Config) Redacted() *Config {
	r := *c
	r.HTTP.Token = hide(c.HTTP.Token)
	r.HTTP.ReadToken = hide(c.HTTP.ReadToken)
	r.Locking.Redis.URL = RedactURL(c.Locking.Redis.URL)
	r.Locking.PG.URL = RedactURL(c.Locking.PG.URL)
	r.Notify.URL = RedactURL(c.Notify.URL)
	r.Notify.Events = append([]string(nil), c.Notify.Events...)
	r.Include = append([]string(nil), c.Include...)
	r.Scheduled = make([]Schedule, len(c.Scheduled))
	for i, s := range c.Scheduled {
		s.Command = append([]string(nil), s.Command...)
		s.Env = hideValues(s.Env)
		s.PingURL = RedactURL(s.PingURL)
		s.NotifyURL = RedactURL(s.NotifyURL)
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

func hide(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

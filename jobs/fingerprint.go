package jobs

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/bext-dev/bext-scheduler/internal/redact"
)

// A job's fingerprint is what its schedule's drift hash takes of it
// (internal/ops ScheduleHashes): what it runs, never a value that may be
// a secret (environment values, header values, bodies, URL paths and
// credentials), since the hash is shown to operators and stored in the
// backend. The bytes are compared across nodes, including nodes of other
// versions during a rolling deploy, so they never change: they are the
// bytes fmt's "%s=%q\x00" wrote per field in the first version.

// Fingerprint is the command's: program, arguments, directory, the names
// of its environment variables and its environment policy.
func (c *Command) Fingerprint() []byte {
	var f quoted
	f.str("job", "command")
	f.strs("argv", c.Argv)
	f.str("dir", c.Dir)
	f.strs("env", slices.Sorted(maps.Keys(c.Env)))
	// %q of a bool, as the first version hashed it: fmt's bad-verb form.
	f.b = append(f.b, "env_clean=%!q(bool="+strconv.FormatBool(c.BaseEnv.Clean)+")\x00"...)
	f.strs("env_allow", c.BaseEnv.Allow)
	return f.b
}

// Fingerprint is the HTTP job's: method, URL without credentials or path
// secrets, header names, timeout and success codes.
func (h *HTTP) Fingerprint() []byte {
	var b []byte
	field := func(name string, v any) { b = fmt.Appendf(b, "%s=%q\x00", name, v) }
	field("job", "http")
	field("method", h.Method)
	field("url", redact.URL(h.URL))
	field("headers", slices.Sorted(maps.Keys(h.Headers)))
	field("timeout", h.Timeout)
	field("success_codes", h.SuccessCodes)
	return b
}

// quoted encodes fields as fmt's "%s=%q\x00" does, for strings and
// string slices, without fmt (a command's fingerprint is taken once per
// distinct job when 100,000 schedules start).
type quoted struct{ b []byte }

func (q *quoted) str(name, v string) {
	q.b = append(q.b, name...)
	q.b = append(q.b, '=')
	q.b = strconv.AppendQuote(q.b, v)
	q.b = append(q.b, 0)
}

func (q *quoted) strs(name string, vs []string) {
	q.b = append(q.b, name...)
	q.b = append(q.b, "=["...)
	for i, v := range vs {
		if i > 0 {
			q.b = append(q.b, ' ')
		}
		q.b = strconv.AppendQuote(q.b, v)
	}
	q.b = append(q.b, ']', 0)
}

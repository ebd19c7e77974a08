// Package redact is the one place that decides how a URL or DSN is shown
// in logs, errors, `next` output, the status page and the API: as
// scheme://host[:port], nothing else. Passwords live in the user info and in
// query parameters, and webhook URLs (Slack, Teams, Discord) carry their
// credential in the path, so no part beyond the host is ever shown.
//
// It imports nothing of the project, so every package (config, jobs, the
// lock backends) can use it without an import cycle.
package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces a secret that Scrub finds inside a message.
const Mask = "xxxxx"

// NotAURL is shown for text that is neither a URL nor a keyword DSN.
const NotAURL = "(not a URL)"

// URL returns raw as scheme://host[:port]: user info, path, query and
// fragment removed. It works on the raw text, so a URL that does not parse
// (the kind that ends up in error messages) is shown safely too: the host
// is taken after the last '@' of the authority, and only characters a host
// may hold are kept, so a malformed password with '/' or '@' in it is never
// mistaken for the host. Two shapes keep a little more, being addresses
// rather than secrets: a unix:// socket URL shows its socket path, and a
// Redis host list (redis://h1:1,h2:2) shows every host. A keyword/value DSN
// (host=h port=5432 password=...) shows its host and port keywords only.
func URL(raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return ""
	}
	i := strings.Index(raw, "://")
	if i < 0 {
		return keywordDSN(raw)
	}
	scheme := raw[:i]
	if !validScheme.MatchString(scheme) {
		return NotAURL
	}
	rest := raw[i+3:]
	if strings.EqualFold(scheme, "unix") {
		// The path is the address of a socket; cut the user info and the
		// query (where a password= goes), as for any other URL.
		rest = afterUserinfo(rest, true)
		if end := strings.IndexAny(rest, "?#"); end >= 0 {
			rest = rest[:end]
		}
		return scheme + "://" + rest
	}
	return scheme + "://" + host(raw, rest)
}

// Scrub returns msg with every secret of raw removed: raw itself becomes
// URL(raw), and each password, query value, and the path (with its longer
// segments) found in raw becomes Mask. Parsers quote the text they fail on
// (pgx, go-redis, net/url), so a message about raw is passed through Scrub
// before it is shown. It over-collects on purpose: masking a harmless word
// only makes the message vaguer.
func Scrub(msg, raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" || msg == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, raw, URL(raw))
	// A parser may quote the URL half-redacted (pgx masks the password
	// itself): any URL in the message is shown the same way.
	msg = urlInText.ReplaceAllStringFunc(msg, URL)
	secrets := secretsIn(raw)
	// Longest first, so a secret that holds a shorter one is masked whole.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, Mask)
	}
	return msg
}

var (
	validScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)
	// hostRun is what a host (names, IPv4, [IPv6%zone], ports, a Redis
	// host list) is made of; the shown host is the leading run of these.
	hostRun = regexp.MustCompile(`^[A-Za-z0-9._\-:\[\]%,]*`)
	// passwordParam matches password-like keys in a query string or a
	// keyword DSN (password=, sslpassword=, sentinel_password=, passwd=,
	// pass=), with a quoted or bare value.
	passwordParam = regexp.MustCompile(`(?i)(?:^|[?&;\s])[a-z_]*(?:password|passwd|pass)\s*=\s*('(?:[^'\\]|\\.)*'?|[^&;#\s]*)`)
	urlInText     = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'`<>]*")
	dsnKeyword    = regexp.MustCompile(`(?i)(?:^|\s)(host|port)\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)`)
)

// host finds the host[:port] of rest, the text after "scheme://".
func host(raw, rest string) string {
	authEnd := strings.IndexAny(rest, "/?#")
	if authEnd < 0 {
		authEnd = len(rest)
	}
	// A clean URL: no user info, and no '@' anywhere before the query
	// (which could be a malformed password's). Trust the parser.
	if u, err := url.Parse(raw); err == nil && u.User == nil {
		pathEnd := strings.IndexAny(rest, "?#")
		if pathEnd < 0 {
			pathEnd = len(rest)
		}
		if !strings.Contains(rest[:pathEnd], "@") {
			return hostRun.FindString(u.Host)
		}
	}
	_, parses := url.Parse(raw)
	return hostRun.FindString(afterUserinfo(rest, parses == nil))
}

// afterUserinfo cuts rest after its user info: at the last '@' before the
// query when the URL parses (an '@' in a query is data), at the last '@'
// of all when it does not (a malformed password may hold '?' or '#').
func afterUserinfo(rest string, parses bool) string {
	scope := rest
	if parses {
		if q := strings.IndexAny(rest, "?#"); q >= 0 {
			scope = rest[:q]
		}
	}
	if at := strings.LastIndexByte(scope, '@'); at >= 0 {
		return rest[at+1:]
	}
	return rest
}

// keywordDSN shows a keyword/value DSN's host and port, or NotAURL.
func keywordDSN(raw string) string {
	if !strings.Contains(raw, "=") {
		if h := hostRun.FindString(raw); h == raw {
			return h // a bare host[:port]
		}
		return NotAURL
	}
	var parts []string
	for _, m := range dsnKeyword.FindAllStringSubmatch(raw, -1) {
		v := hostRun.FindString(strings.Trim(m[2], "'"))
		parts = append(parts, strings.ToLower(m[1])+"="+v)
	}
	if len(parts) == 0 {
		return "(keyword DSN)"
	}
	return strings.Join(parts, " ")
}

// secretsIn lists the pieces of raw that may be secret, raw and unescaped:
// the user info and its password, password= values, every query value,
// the fragment, the path and its segments of 8 bytes or more (a webhook's
// token; shorter ones are ids or a database number). Pieces shorter than
// 2 bytes are left out: masking every "0" would garble the message.
func secretsIn(raw string) []string {
	var out []string
	add := func(s string) {
		if len(s) < 2 {
			return
		}
		out = append(out, s)
		if un, err := url.PathUnescape(s); err == nil && un != s && len(un) >= 2 {
			out = append(out, un)
		}
	}
	for _, m := range passwordParam.FindAllStringSubmatch(raw, -1) {
		add(strings.Trim(m[1], "'"))
	}
	i := strings.Index(raw, "://")
	if i < 0 {
		return out
	}
	rest := raw[i+3:]
	_, err := url.Parse(raw)
	tail := afterUserinfo(rest, err == nil)
	if ui := rest[:len(rest)-len(tail)]; ui != "" {
		ui = strings.TrimSuffix(ui, "@")
		add(ui)
		if _, pw, ok := strings.Cut(ui, ":"); ok {
			add(pw)
		}
	}
	if strings.HasPrefix(strings.ToLower(raw), "unix:") {
		tail = tail[strings.IndexAny(tail+"?", "?#"):]
	} else if p := strings.IndexAny(tail, "/?#"); p >= 0 {
		tail = tail[p:]
	} else {
		tail = ""
	}
	path, query, _ := strings.Cut(tail, "?")
	path, frag, _ := strings.Cut(path, "#")
	query, qfrag, _ := strings.Cut(query, "#")
	add(frag)
	add(qfrag)
	if len(path) > 2 { // not "/" or "/0"
		add(path)
		for _, seg := range strings.Split(path, "/") {
			if len(seg) >= 8 {
				add(seg)
			}
		}
	}
	add(query)
	for _, kv := range strings.Split(query, "&") {
		_, v, _ := strings.Cut(kv, "=")
		if len(v) >= 4 {
			add(v)
		}
	}
	return out
}

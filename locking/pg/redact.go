package pg

import (
	"net/url"
	"regexp"
	"strings"
)

const mask = "xxxxx"

// kvSecret finds password values in a keyword/value DSN, quoted or not.
var kvSecret = regexp.MustCompile(`(?i)\b((?:ssl)?password)\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s]*)`)

// scrubSecrets removes from msg every password-looking value found in raw.
// Open reports a bad URL with pgx's message, which redacts passwords on a
// best-effort basis only (its docs say so for malformed input); this masks,
// on top of that, whatever raw itself shows as a password.
func scrubSecrets(msg, raw string) string {
	for _, s := range secretsIn(raw) {
		if len(s) >= 2 {
			msg = strings.ReplaceAll(msg, s, mask)
		}
	}
	return msg
}

// secretsIn returns candidate secrets in raw: the URL userinfo after the
// first ':' (up to the last '@'), and password= values. It over-collects on
// purpose: scrubbing a non-secret only makes the message vaguer.
func secretsIn(raw string) []string {
	var out []string
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			userinfo := rest[:at]
			if c := strings.Index(userinfo, ":"); c >= 0 {
				pw := userinfo[c+1:]
				out = append(out, pw)
				if dec, err := url.PathUnescape(pw); err == nil {
					out = append(out, dec)
				}
			}
		}
	}
	for _, m := range kvSecret.FindAllStringSubmatch(raw, -1) {
		v := m[0][strings.Index(m[0], "=")+1:]
		v = strings.Trim(strings.TrimSpace(v), "'")
		out = append(out, v)
		if amp := strings.IndexByte(v, '&'); amp > 0 {
			out = append(out, v[:amp]) // a URL query value ends at '&'
		}
	}
	return out
}

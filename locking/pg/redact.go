package pg

import (
	"net/url"
	"regexp"
	"strings"
)

const mask = "xxxxx"

// redactURL masks the password of a postgres:// URL or keyword/value DSN for
// error messages. A string too broken to tell where the password ends is
// replaced whole rather than risk printing it.
func redactURL(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		u, err := url.Parse(raw)
		if err != nil {
			if strings.ContainsAny(raw[i+3:], "@=") {
				return raw[:i+3] + "(unparsable, not shown)"
			}
			return raw
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), mask)
		}
		q := u.Query()
		for k := range q {
			if isSecretKey(k) {
				q.Set(k, mask)
			}
		}
		u.RawQuery = q.Encode()
		return u.Redacted()
	}
	return kvSecret.ReplaceAllString(raw, "${1}="+mask)
}

// kvSecret finds password values in a keyword/value DSN, quoted or not.
var kvSecret = regexp.MustCompile(`(?i)\b((?:ssl)?password)\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s]*)`)

func isSecretKey(k string) bool {
	k = strings.ToLower(k)
	return k == "password" || k == "sslpassword"
}

// scrubSecrets removes from msg every password-looking value found in raw,
// by position rather than by trusting msg's own redaction.
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
		for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == '&' }) {
			out = append(out, part)
		}
	}
	return out
}

package pg

import "github.com/bext-dev/bext-scheduler/internal/redact"

// scrubSecrets removes from msg every secret found in raw. Open reports a
// bad URL with pgx's message, which redacts passwords on a best-effort
// basis only (its docs say so for malformed input); the project's one
// redaction (internal/redact) masks, on top of that, whatever raw holds.
func scrubSecrets(msg, raw string) string { return redact.Scrub(msg, raw) }

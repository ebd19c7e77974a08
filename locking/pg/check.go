package pg

import (
	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

// CheckURL parses raw exactly as Open does (pgx.ParseConfig, which also
// reads the PG* environment variables and the service and password files
// it names), without connecting, so `validate` accepts only the URLs every
// node's `run` accepts. Its error is a *locking.InvalidError (so it wraps
// locking.ErrInvalid) and shows no secret.
func CheckURL(raw string) error {
	if raw == "" {
		return &locking.InvalidError{Field: "url", Subject: "pg", Reason: "empty url"}
	}
	if _, err := pgx.ParseConfig(raw); err != nil {
		// Not wrapped: pgx's error keeps the raw string, password included.
		return &locking.InvalidError{Field: "url", Subject: "pg", Reason: scrubSecrets(err.Error(), raw)}
	}
	return nil
}

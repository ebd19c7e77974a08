package pg

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bext-dev/bext-scheduler/locking"
)

// CheckURL parses raw exactly as Open does (pgx.ParseConfig, which also
// reads the PG* environment variables and the service and password files
// it names), without connecting, so `validate` accepts only the URLs every
// node's `run` accepts. Its error wraps locking.ErrInvalid and shows no
// secret.
func CheckURL(raw string) error {
	if raw == "" {
		return fmt.Errorf("%w: pg: empty url", locking.ErrInvalid)
	}
	if _, err := pgx.ParseConfig(raw); err != nil {
		// Not %w: pgx's error keeps the raw string, password included.
		return fmt.Errorf("%w: pg: %s", locking.ErrInvalid, scrubSecrets(err.Error(), raw))
	}
	return nil
}

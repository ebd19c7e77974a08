package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// A backend that answers "not for you" is a permission problem (exit 2,
// said as such), not an unreachable backend (69): waiting will not fix a
// read-only Postgres role or a Redis ACL user without the commands.
func TestPermissionDeniedIsNotUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		locking func(t *testing.T) string
	}{
		{"pg read-only role", func(t *testing.T) string {
			ns := testenv.UniqueName(t)
			// The tables exist (the role may read them, not create them).
			admin := fmt.Sprintf("[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = %q\nnamespace = %q\n", testenv.PGURL(t), ns)
			cli(t, writeFile(t, t.TempDir(), "admin.toml", admin+opsSchedules), 0, "pause", "job")
			t.Cleanup(func() { dropFences(t, testenv.PGURL(t), ns) })
			return fmt.Sprintf("[locking]\nbackend = \"pg\"\n[locking.pg]\nurl = %q\nnamespace = %q\n", testenv.ReadOnlyPGRole(t), ns)
		}},
		{"redis ACL user", func(t *testing.T) string {
			url := testenv.RedisACLUser(t, "~*", "&*", "+@read", "+@connection")
			return fmt.Sprintf("[locking]\nbackend = \"redis\"\n[locking.redis]\nurl = %q\nkey_prefix = \"%s:\"\n", url, testenv.UniqueName(t))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := writeFile(t, t.TempDir(), "bext.config.toml", "node_id = \"cli\"\n[http]\nlisten = \"off\"\n"+tc.locking(t)+opsSchedules)
			for _, run := range []struct {
				args []string
				op   string
			}{
				{[]string{"lock", "run", "--config", cfg, "--key", "perm", "--ttl", "5s", "--", "/bin/true"}, `taking lock "perm"`},
				{[]string{"pause", "job", "--config", cfg}, "pausing"},
			} {
				r := proctest.Run(t, bin, nil, run.args...)
				noCrash(t, r)
				if r.Code != 2 || !strings.Contains(r.Stderr, "bext-scheduler: permission denied") || !strings.Contains(r.Stderr, run.op) ||
					strings.Contains(r.Stderr, "unavailable") {
					t.Errorf("%s: exit %d, stderr:\n%s\nwant 2, \"permission denied\" naming %s, not \"unavailable\"", run.args[0], r.Code, r.Stderr, run.op)
				}
			}
		})
	}
}

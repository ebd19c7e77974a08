package jobs

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// TestCommandEnvPolicy: the variables the scheduler's config read through
// ${VAR} (its backend URL, its token) never reach a job unless allowed, and
// a clean job sees only its allow-list, its Env and the tick's BEXT_*.
func TestCommandEnvPolicy(t *testing.T) {
	t.Setenv("BEXT_T_REDIS_URL", "redis://:hunter2@r:6379/0")
	t.Setenv("BEXT_T_SHARED", "shared")
	t.Setenv("BEXT_T_OTHER", "other")
	for _, tc := range []struct {
		name         string
		policy       EnvPolicy
		want, absent []string
	}{
		{"inherit masks the config's sources", EnvPolicy{Mask: []string{"BEXT_T_REDIS_URL", "BEXT_T_SHARED"}},
			[]string{"BEXT_T_OTHER=other", "PATH="}, []string{"BEXT_T_REDIS_URL", "BEXT_T_SHARED"}},
		{"allow unmasks", EnvPolicy{Mask: []string{"BEXT_T_REDIS_URL", "BEXT_T_SHARED"}, Allow: []string{"BEXT_T_SHARED"}},
			[]string{"BEXT_T_OTHER=other", "BEXT_T_SHARED=shared"}, []string{"BEXT_T_REDIS_URL"}},
		{"clean", EnvPolicy{Clean: true, Allow: []string{"PATH", "BEXT_T_SHARED"}, Mask: []string{"BEXT_T_REDIS_URL"}},
			[]string{"PATH=", "BEXT_T_SHARED=shared"}, []string{"BEXT_T_REDIS_URL", "BEXT_T_OTHER", "HOME"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			c := &Command{Argv: []string{"/usr/bin/env"}, Env: map[string]string{"EXTRA": "x"}, BaseEnv: tc.policy, Logger: slog.New(rec)}
			if err := c.Run(context.Background(), locked); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := rec.lines("stdout")
			has := func(prefix string) bool {
				return slices.ContainsFunc(got, func(l string) bool { return strings.HasPrefix(l, prefix) })
			}
			// Always: the job's own Env and the contract's tick variables.
			for _, w := range append(tc.want, "EXTRA=x", "BEXT_SCHEDULE_ID=nightly", "BEXT_FENCING_TOKEN=42", "BEXT_LOCK_KEY=nightly") {
				if !has(w) {
					t.Errorf("the job's environment lacks %s:\n%s", w, strings.Join(got, "\n"))
				}
			}
			for _, a := range tc.absent {
				if has(a + "=") {
					t.Errorf("the job's environment holds %s:\n%s", a, strings.Join(got, "\n"))
				}
			}
		})
	}
}

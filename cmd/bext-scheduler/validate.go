package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/hints"
)

func newValidateCmd() *cobra.Command {
	var path string
	c := &cobra.Command{
		Use:   "validate",
		Short: "Check the config file; every problem on its own line",
		Long: `validate loads the config (with its includes and ${VAR} expansion) and checks
it: keys, durations, cron expressions, hints, backends, jobs. It does not
connect to the lock backend. Exit code 0 when valid, 2 when not.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			defer startupGC()() // a load and an exit: the garbage dies with the process
			cfg, err := loadConfig(c.ErrOrStderr(), configPath(path))
			if err != nil {
				return err
			}
			for _, w := range warnings(cfg) {
				fmt.Fprintln(c.ErrOrStderr(), "warning:", safe(w))
			}
			backend := cfg.Locking.Backend
			if backend == "" {
				backend = "none"
			}
			fmt.Fprintf(c.OutOrStdout(), "%s: ok (%d schedules, backend %s)\n", cfg.Path, len(cfg.Scheduled), backend)
			return nil
		},
	}
	addConfigFlag(c, &path)
	return c
}

// loadConfig loads path; an invalid or unreadable config is exit code 2,
// with every problem printed on its own line.
func loadConfig(stderr io.Writer, path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, "bext-scheduler: invalid config:")
		fmt.Fprintln(stderr, safeLines(err.Error())) // problems quote the file's bytes
		return nil, withCode(exitUsage, nil)
	}
	return cfg, nil
}

// warnings lists what is valid but probably not meant.
func warnings(cfg *config.Config) []string {
	var out []string
	if len(cfg.Scheduled) == 0 {
		out = append(out, "no [[scheduled]] jobs: the node will idle")
	}
	kind := backendKind(cfg.Locking.Backend)
	for _, s := range cfg.Scheduled {
		r, err := hints.Resolve(s.HintValue, kind)
		if err == nil && r.Warning != "" {
			out = append(out, fmt.Sprintf("schedule %q: %s", s.ID, r.Warning))
		}
	}
	return out
}

func backendKind(name string) hints.Backend {
	switch name {
	case "":
		return hints.None
	case "memory":
		return hints.Local
	}
	return hints.Distributed
}

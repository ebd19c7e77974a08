package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newManCmd writes one man page per command into a directory. It is hidden:
// the release build runs it to put the pages into the packages (see
// scripts/release-files), and an operator reads them with man(1) instead.
// The pages are generated from the same cobra tree the binary parses, so
// they cannot list a flag the binary does not accept.
func newManCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:    "man --dir DIR",
		Short:  "Write the man pages (section 1) into DIR",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if dir == "" {
				return usageErrorf("man: --dir is required")
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return withCode(exitFailure, fmt.Errorf("man: %w", err))
			}
			root := c.Root()
			root.DisableAutoGenTag = true // reproducible pages: no generation date
			hdr := &doc.GenManHeader{Title: "BEXT-SCHEDULER", Section: "1", Source: "bext-scheduler " + version, Manual: "bext-scheduler manual"}
			// The page's date: the release's commit time when the build
			// passes it (reproducible builds' convention), else today.
			if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
				sec, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return usageErrorf("man: SOURCE_DATE_EPOCH=%q is not a Unix time in seconds", s)
				}
				d := time.Unix(sec, 0).UTC()
				hdr.Date = &d
			}
			if err := doc.GenManTree(root, hdr, dir); err != nil {
				return withCode(exitFailure, fmt.Errorf("man: writing pages into %s: %w", dir, err))
			}
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "directory to write the pages into (created if missing)")
	return c
}

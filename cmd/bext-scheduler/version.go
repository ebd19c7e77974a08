package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			v, cm := buildVersion()
			fmt.Fprintf(c.OutOrStdout(), "bext-scheduler %s\ncommit %s\n%s %s/%s\n", v, cm, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// buildVersion prefers the linker-set values and falls back to what the Go
// toolchain recorded (go install ...@version).
func buildVersion() (string, string) {
	v, cm := version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && cm == "unknown" && len(s.Value) >= 7 {
				cm = s.Value[:7]
			}
		}
	}
	return v, cm
}

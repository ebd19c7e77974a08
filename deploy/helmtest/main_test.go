package helmtest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/deploy/helmtest"
)

// bin is the bext-scheduler binary built from the parent module, as the
// image ships it (no race detector, no test hooks).
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "helmtest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "bext-scheduler")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "timetzdata", "-o", bin, "./cmd/bext-scheduler")
	cmd.Dir = helmtest.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building bext-scheduler: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

package testenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// modulePath is this repository's module.
const modulePath = "github.com/bext-dev/bext-scheduler"

// RepoRoot returns the repository's root directory: the nearest directory
// at or above the working directory (a test's is its package's) whose
// go.mod declares this module. Tests find the repository this way, not
// through runtime.Caller, whose file names -trimpath rewrites (make test
// builds with -trimpath, so that a fresh clone at a new path reuses the
// build cache).
func RepoRoot() (string, error) {
	rootOnce.Do(func() { root, rootErr = findRoot() })
	return root, rootErr
}

var (
	rootOnce sync.Once
	root     string
	rootErr  error
)

func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testenv: the repository root: %w", err)
	}
	for d := dir; ; {
		if declares(filepath.Join(d, "go.mod")) {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("testenv: no go.mod of %s at or above %s", modulePath, dir)
		}
		d = up
	}
}

// declares reports whether the go.mod at path declares modulePath.
func declares(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == modulePath
		}
	}
	return false
}

// MustRepoRoot is RepoRoot for callers with nowhere to send the error
// (a TestMain, a helper without a testing.TB): it panics, which fails
// the test binary at once with the reason.
func MustRepoRoot() string {
	r, err := RepoRoot()
	if err != nil {
		panic(err)
	}
	return r
}

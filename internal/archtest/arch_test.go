// Package archtest holds the test that keeps the import graph of
// docs/DESIGN.md "Package map" true: every product package imports only
// the packages of this module its row allows.
package archtest

import (
	"errors"
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

const module = "github.com/bext-dev/bext-scheduler/"

// allowed is the "may import (of this module)" column of the package map,
// for the product's packages. A package missing here fails the test: a
// new package gets a row in the design and here.
var allowed = map[string][]string{
	"cmd/bext-scheduler":  {"*"},
	"node":                {"config", "scheduler", "metrics", "notify", "locking", "internal/service", "internal/agent", "internal/ops", "internal/server", "internal/redact", "internal/tracing"},
	"internal/service":    {"config", "scheduler", "jobs", "locking", "locking/memory", "locking/redis", "locking/pg", "hints", "internal/redact"},
	"config":              {"cronspec", "hints", "locking", "cluster", "internal/redact"},
	"scheduler":           {"cronspec", "locking", "hints", "internal/workpool", "internal/batch", "internal/wallwake", "internal/mutation"},
	"scheduler/fakeclock": {"scheduler"},
	"cronspec":            {},
	"hints":               {},
	"locking":             {"internal/mutation"},
	"locking/memory":      {"locking", "cluster", "internal/redact", "internal/mutation"},
	"locking/redis":       {"locking", "cluster", "internal/redact", "internal/mutation"},
	"locking/pg":          {"locking", "cluster", "internal/redact", "internal/mutation"},
	"locking/lockertest":  {"locking"},
	"cluster":             {"locking"},
	"cluster/clustertest": {"cluster", "locking"},
	"internal/agent":      {"cluster", "locking", "scheduler", "internal/ops", "internal/rendezvous"},
	"internal/ops":        {"cluster", "locking", "cronspec", "scheduler", "hints"},
	"jobs":                {"scheduler", "internal/redact", "internal/supervise"},
	"metrics":             {"scheduler", "locking"},
	"notify":              {"scheduler", "cluster", "internal/redact"},
	"internal/server":     {"internal/ops", "cluster"},
	"internal/redact":     {},
	"internal/supervise":  {},
	"internal/tracing":    {"scheduler"},
	"internal/wallwake":   {},
	"internal/rendezvous": {},
	"internal/workpool":   {},
	"internal/batch":      {},
	"internal/mutation":   {},
}

// TestImportsFollowThePackageMap: no package imports one of this module
// its row does not allow (no wrong-way edge: config importing the engine
// or a backend, the engine importing a backend, a public package taking an
// internal type...). Test files are not held to it.
func TestImportsFollowThePackageMap(t *testing.T) {
	root := testenv.MustRepoRoot()
	for pkg, ok := range allowed {
		p, err := build.ImportDir(filepath.Join(root, pkg), 0)
		if err != nil {
			t.Errorf("%s: %v", pkg, err)
			continue
		}
		if slices.Contains(ok, "*") {
			continue
		}
		for _, imp := range p.Imports {
			rel, mine := strings.CutPrefix(imp, module)
			if mine && !slices.Contains(ok, rel) {
				t.Errorf("%s imports %s: not in its row of docs/DESIGN.md's package map (%v)", pkg, rel, ok)
			}
		}
	}
}

// testOnly are the packages that are not the product: tests and tools,
// held to nothing here (nothing in the product may import them, which
// TestImportsFollowThePackageMap checks, as no row allows them).
var testOnly = []string{"e2e", "internal/sim", "internal/testenv", "internal/faultproxy", "internal/proctest", "internal/ops/opstest", "internal/archtest", "scripts", "deploy", "examples"}

// TestEveryProductPackageHasARow: a package added without a row in the
// map (and so in docs/DESIGN.md) fails here, rather than escaping the
// check above.
func TestEveryProductPackageHasARow(t *testing.T) {
	root := testenv.MustRepoRoot()
	var missing []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" {
			return filepath.SkipDir
		}
		for _, t := range testOnly {
			if rel == t || strings.HasPrefix(rel, t+"/") {
				return filepath.SkipDir
			}
		}
		if _, err := build.ImportDir(path, 0); err != nil {
			var none *build.NoGoError
			if errors.As(err, &none) {
				return nil
			}
			return err
		}
		if _, ok := allowed[rel]; !ok {
			missing = append(missing, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("packages with no row in the package map (docs/DESIGN.md, and allowed here): %v", missing)
	}
}

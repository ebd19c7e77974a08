// Package deploy_test checks the deployment files an operator starts from:
// the Dockerfile and .dockerignore, docker-compose.yml and its Prometheus
// config, the alert rules, the systemd unit and the example configs. No
// Docker engine is needed: what can be checked without one is checked here
// (services and files referenced exist, the nodes' config passes the real
// binary's validate, ports and paths agree across files, the alert rules
// name only metrics the service exports).
package deploy_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// bin is the bext-scheduler binary built for this test run.
var bin string

func TestMain(m *testing.M) { proctest.Main(m, &bin) }

// repo returns the path of name relative to the repository root.
func repo(name string) string {
	return filepath.Join(testenv.MustRepoRoot(), filepath.FromSlash(name))
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(repo(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runBin runs the built binary with exactly env (plus PATH and HOME), so a
// variable the operator's shell happens to set cannot make a config pass.
func runBin(t *testing.T, env map[string]string, args ...string) proctest.Result {
	t.Helper()
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	return proctest.RunClean(t, bin, kv, args...)
}

// Package deploy_test checks the deployment files an operator starts from:
// the Dockerfile and .dockerignore, docker-compose.yml and its Prometheus
// config, the alert rules, the systemd unit and the example configs. No
// Docker engine is needed: what can be checked without one is checked here
// (services and files referenced exist, the nodes' config passes the real
// binary's validate, ports and paths agree across files, the alert rules
// name only metrics the service exports).
package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// bin is the bext-scheduler binary built for this test run.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bext-deploy-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err = proctest.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// repo returns the path of name relative to the repository root.
func repo(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", filepath.FromSlash(name))
}

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(repo(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runBin runs the built binary with exactly env (plus PATH and HOME, and
// nothing else from the test's environment, so a variable the operator's
// shell happens to set cannot make a config pass).
func runBin(t *testing.T, env map[string]string, args ...string) proctest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running %s %v: %v", bin, args, err)
		}
		code = ee.ExitCode()
	}
	return proctest.Result{Code: code, Stdout: out.String(), Stderr: errb.String()}
}

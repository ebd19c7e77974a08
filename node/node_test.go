package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/node"
	"github.com/bext-dev/bext-scheduler/scheduler"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const oneGoJob = `
[locking]
backend = "memory"
[http]
listen = "off"

[[scheduled]]
id = "report"
cron = "0 0 1 1 *"
hint = "require_global"
`

func parse(t *testing.T, toml string, opts ...config.Option) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(toml), "node_test.toml", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

var noop = scheduler.JobFunc(func(context.Context, scheduler.Tick) error { return nil })

// A schedule whose job is a Go function the program did not give (a typo
// in Options.Jobs) is refused by New and by Reload, never left to run
// nothing.
func TestGoJobWithoutItsFunctionRefused(t *testing.T) {
	t.Parallel()
	cfg := parse(t, oneGoJob, config.WithGoJobs("report"))
	_, err := node.New(context.Background(), cfg, node.Options{Logger: quiet, Jobs: map[string]scheduler.Job{"reprot": noop}})
	if !errors.Is(err, node.ErrConfig) || !strings.Contains(err.Error(), `schedule "report": its job is a Go function, and Options.Jobs has none`) {
		t.Fatalf("New = %v, want ErrConfig naming report", err)
	}

	n, err := node.New(context.Background(), parse(t, oneGoJob, config.WithGoJobs("report")),
		node.Options{Logger: quiet, Jobs: map[string]scheduler.Job{"report": noop}})
	if err != nil {
		t.Fatal(err)
	}
	next := parse(t, oneGoJob+`
[[scheduled]]
id = "second"
cron = "0 0 1 1 *"
`, config.WithGoJobs("report", "second"))
	if err := n.Reload(next); !errors.Is(err, node.ErrConfig) || !strings.Contains(err.Error(), `"second"`) {
		t.Fatalf("Reload = %v, want ErrConfig naming second", err)
	}
}

// A node runs once; a second Run is refused, not a second set of
// goroutines on the same scheduler.
func TestRunTwiceRefused(t *testing.T) {
	t.Parallel()
	n, err := node.New(context.Background(), parse(t, oneGoJob, config.WithGoJobs("report")),
		node.Options{Logger: quiet, Jobs: map[string]scheduler.Job{"report": noop}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()
	<-n.Ready()
	if err := n.Run(ctx); !errors.Is(err, node.ErrRunning) {
		t.Errorf("second Run = %v, want ErrRunning", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v after a cancel, want nil", err)
	}
}

// A bad backend URL is a configuration error (the CLI's exit 2), and New
// leaves nothing open.
func TestBadBackendIsConfigError(t *testing.T) {
	t.Parallel()
	cfg := parse(t, oneGoJob+"command = [\"true\"]\n")
	// Set by hand, past Parse's check: New is its own last line.
	cfg.Locking.Backend = "redis"
	cfg.Locking.Redis.URL = "redis://127.0.0.1:6379/not-a-db"
	if _, err := node.New(context.Background(), cfg, node.Options{Logger: quiet}); !errors.Is(err, node.ErrConfig) {
		t.Fatalf("New with a bad Redis URL = %v, want ErrConfig", err)
	}
}

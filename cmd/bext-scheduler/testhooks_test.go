package main

import (
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/internal/service"
)

// TestShippedBinaryIgnoresTestClockOffset: the clock offset is a hook for
// the cluster tests; in the binary operators run, a stray
// BEXT_TEST_CLOCK_OFFSET in the environment must not move the node's
// clock. The same run against a test build (-tags bexttest) shows the hook
// there, so the check can tell the two apart.
func TestShippedBinaryIgnoresTestClockOffset(t *testing.T) {
	t.Parallel()
	tickTime := func(t *testing.T, bin string) time.Duration {
		cfg := writeFile(t, t.TempDir(), "bext.config.toml", `
node_id = "clock"
shutdown_grace = "2s"
[http]
listen = "off"
[[scheduled]]
id = "probe"
cron = "*/1 * * * * *"
hint = "node_local"
command = ["/bin/sh", "-c", "echo offset-probe tick=$BEXT_TICK_TIME"]
`)
		n := proctest.Start(t, bin, []string{service.TestClockOffsetEnv + "=-3h"}, "run", "--config", cfg)
		m := n.WaitLog(regexp.MustCompile(`offset-probe tick=(\S+?)"?$`), 30*time.Second)
		now := time.Now()
		n.Signal(syscall.SIGTERM)
		if code := n.Wait(15 * time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM", code)
		}
		tick, err := time.Parse(time.RFC3339, m[1])
		if err != nil {
			t.Fatalf("BEXT_TICK_TIME %q: %v", m[1], err)
		}
		return now.Sub(tick)
	}

	if lag := tickTime(t, bin); lag > time.Minute || lag < -time.Minute {
		t.Errorf("the shipped binary ran a tick %v away from now with %s=-3h: the test hook is live", lag, service.TestClockOffsetEnv)
	}

	t.Run("test build", func(t *testing.T) {
		testBin, err := proctest.Build(t.TempDir(), proctest.TestHooksTag)
		if err != nil {
			t.Fatal(err)
		}
		if lag := tickTime(t, testBin); lag < 3*time.Hour-time.Minute || lag > 3*time.Hour+time.Minute {
			t.Errorf("the bexttest build ran a tick %v before now, want about 3h: the hook no longer works", lag)
		}
	})
}

package main

import (
	"fmt"
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
	"github.com/bext-dev/bext-scheduler/internal/testenv"
)

// TestStartsWithBackendDownAndRecovers: a Redis restart must never
// crash-loop the fleet. The node starts while Redis is down, reports not
// ready, skips require_global ticks as backend_error without running them,
// and runs them once Redis is back, without a restart.
func TestStartsWithBackendDownAndRecovers(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	r.Stop()
	cfg := writeFile(t, t.TempDir(), "bext.config.toml", fmt.Sprintf(`
node_id = "down"
shutdown_grace = "2s"
[log]
level = "debug" # a skipped tick of an outage is logged at debug (one warning per outage)
[http]
listen = "127.0.0.1:0"
[locking]
backend = "redis"
[locking.redis]
url = %q
key_prefix = "%s:"
op_timeout = "300ms"
[[scheduled]]
id = "global"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "1s"
command = ["/bin/sh", "-c", "echo global-ran tick=$BEXT_TICK_TIME"]
`, r.URL(), testenv.UniqueName(t)))
	n := proctest.Start(t, bin, nil, "run", "--config", cfg)
	addr := n.WaitLog(addrRE, 30*time.Second)[1]
	n.WaitLogN(regexp.MustCompile(`tick skipped.*schedule=global.*outcome=backend_error`), 2, 30*time.Second)
	if c := len(regexp.MustCompile(`level=WARN msg="lock backend failed`).FindAllString(n.Log(), -1)); c != 1 {
		t.Errorf("the outage logged %d warnings, want 1 (not one per tick)", c)
	}
	if got := status(t, "http://"+addr+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz with Redis down = %d, want 503", got)
	}
	if got := status(t, "http://"+addr+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz with Redis down = %d, want 200 (the process is alive)", got)
	}
	if regexp.MustCompile(`global-ran`).MatchString(n.Log()) {
		t.Fatal("a require_global tick ran while the backend was down")
	}

	r.Start()
	n.WaitLogN(regexp.MustCompile(`global-ran tick=`), 2, 30*time.Second)
	if got := status(t, "http://"+addr+"/readyz"); got != http.StatusOK {
		t.Errorf("/readyz after Redis came back = %d, want 200", got)
	}
	n.Signal(syscall.SIGTERM)
	if code := n.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

package main

import (
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// TestJobsDoNotInheritConfigSecrets runs a real node: a variable the
// config reads through ${VAR} (as it reads REDIS_URL) reaches a job only
// through the job's own env table, never by inheritance; a clean job sees
// only its allow-list.
func TestJobsDoNotInheritConfigSecrets(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, t.TempDir(), "bext.config.toml", `
node_id = "env"
shutdown_grace = "2s"
[http]
listen = "off"
[[scheduled]]
id = "inherit"
cron = "*/1 * * * * *"
hint = "node_local"
env = { GIVEN = "${BEXT_T_SECRET_SRC}" }
command = ["/bin/sh", "-c", "echo inherit-probe src=[$BEXT_T_SECRET_SRC] given=[$(echo $GIVEN | tr a-z A-Z)] plain=[$BEXT_T_PLAIN]"]
[[scheduled]]
id = "clean"
cron = "*/1 * * * * *"
hint = "node_local"
env_mode = "clean"
env_allow = ["PATH"]
command = ["/bin/sh", "-c", "echo clean-probe plain=[$BEXT_T_PLAIN] home=[$HOME] path=[$PATH] id=[$BEXT_SCHEDULE_ID]"]
`)
	n := proctest.Start(t, bin, []string{"BEXT_T_SECRET_SRC=s3cret", "BEXT_T_PLAIN=plain"}, "run", "--config", cfg)
	in := n.WaitLog(regexp.MustCompile(`inherit-probe src=\[(.*?)\] given=\[(.*?)\] plain=\[(.*?)\]`), 30*time.Second)
	cl := n.WaitLog(regexp.MustCompile(`clean-probe plain=\[(.*?)\] home=\[(.*?)\] path=\[(.*?)\] id=\[(.*?)\]`), 30*time.Second)
	n.Signal(syscall.SIGTERM)
	if code := n.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	if in[1] != "" {
		t.Errorf("an inheriting job saw the config's ${VAR} source: %q", in[1])
	}
	// The job prints the secret upper-cased: printed as is, the node masks
	// it in its log (as it must), and the test could not tell it arrived.
	if in[2] != "S3CRET" || in[3] != "plain" {
		t.Errorf("an inheriting job saw given=%q plain=%q, want its env table's value and the other variables", in[2], in[3])
	}
	if cl[1] != "" || cl[2] != "" {
		t.Errorf("a clean job saw plain=%q home=%q, want neither", cl[1], cl[2])
	}
	if cl[3] == "" || cl[4] != "clean" {
		t.Errorf("a clean job saw path=%q id=%q: the allow-list and the BEXT_* contract variables must pass", cl[3], cl[4])
	}
}

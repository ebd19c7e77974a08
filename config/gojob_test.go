package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/config"
)

const goJobConfig = `
[[scheduled]]
id = "report"
cron = "*/5 * * * *"
hint = "node_local"
`

func TestGoJobsNeedNoCommand(t *testing.T) {
	t.Parallel()
	if _, err := config.Parse([]byte(goJobConfig), "embedded.toml"); err == nil || !strings.Contains(err.Error(), "no job") {
		t.Fatalf("a schedule without a job, not named a Go job = %v, want the no-job problem", err)
	}
	c, err := config.Parse([]byte(goJobConfig), "embedded.toml", config.WithGoJobs("report"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Scheduled[0].GoJob {
		t.Fatal("report: GoJob not set")
	}
}

func TestGoJobsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, toml, id, want string }{
		{"unknown id", goJobConfig, "reprot", `embedded.toml: Go job "reprot": no [[scheduled]] has that id`},
		{"with a command", goJobConfig + "command = [\"true\"]\n", "report", "its job is a Go function of the program; it sets no command"},
	} {
		_, err := config.Parse([]byte(c.toml), "embedded.toml", config.WithGoJobs(c.id))
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", c.name, err, c.want)
		}
	}
}

package deploy_test

import (
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/config"
)

// TestShippedConfigsGuardReads: every shipped way to run a node beyond
// loopback (the compose cluster, the cluster example, the image's usage)
// guards the API's reads with a read_token taken from the environment,
// never written in a file.
func TestShippedConfigsGuardReads(t *testing.T) {
	c := loadCompose(t)
	df := loadDockerfile(t)
	env := nodeEnv(t, c, df, "redis")
	cfg := composeConfig(t, c, df, "redis")
	if cfg.HTTP.ReadToken == "" || cfg.HTTP.ReadToken != env["BEXT_API_READ_TOKEN"] {
		t.Errorf("the compose nodes' read_token is %q, want BEXT_API_READ_TOKEN from their environment (%q)",
			cfg.HTTP.ReadToken, env["BEXT_API_READ_TOKEN"])
	}
	if src := readRepoFile(t, nodeConfigSource(t, c, df)); !strings.Contains(src, `read_token = "${BEXT_API_READ_TOKEN`) {
		t.Errorf("%s does not take read_token from BEXT_API_READ_TOKEN", nodeConfigSource(t, c, df))
	}

	for k, v := range clusterEnv {
		t.Setenv(k, v)
	}
	ex, err := config.Load(repo("examples/cluster.config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if ex.HTTP.ReadToken != clusterEnv["BEXT_API_READ_TOKEN"] {
		t.Errorf("examples/cluster.config.toml: read_token %q, want BEXT_API_READ_TOKEN's value", ex.HTTP.ReadToken)
	}

	// The image has no config of its own; its usage shows the variable.
	if !strings.Contains(readRepoFile(t, "Dockerfile"), "-e BEXT_API_READ_TOKEN=") {
		t.Error("the Dockerfile's usage does not pass BEXT_API_READ_TOKEN, though its node listens on every interface")
	}
}

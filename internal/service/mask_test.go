package service

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bext-dev/bext-scheduler/config"
)

func TestMaskerHidesExpandedSecretsAndURLs(t *testing.T) {
	t.Setenv("BEXT_TEST_HOOK_SECRET", "s3cr3t-token-value")
	dir := t.TempDir()
	path := filepath.Join(dir, "bext.config.toml")
	if err := os.WriteFile(path, []byte(`
[[scheduled]]
id = "x"
cron = "@hourly"
hint = "node_local"
command = ["/bin/true"]
env = { TOKEN = "${BEXT_TEST_HOOK_SECRET}" }
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	mask := Masker(cfg)
	got := mask("curl failed: token s3cr3t-token-value at https://user:pw@hooks.example/services/T0/B0/XYZ?x=1 done")
	want := "curl failed: token *** at https://hooks.example done"
	if got != want {
		t.Errorf("masked %q, want %q", got, want)
	}
}

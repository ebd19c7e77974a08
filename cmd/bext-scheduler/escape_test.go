package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cluster"
	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
)

func TestSafe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want, lines string }{
		{"plain node-a", "plain node-a", "plain node-a"},
		{"clear\x1b[2J", `clear\x1b[2J`, `clear\x1b[2J`},
		{"a\u202eb\u2066c\u2069", `a\u202eb\u2066c\u2069`, `a\u202eb\u2066c\u2069`},
		{"tab\tnl\nbell\a", `tab\x09nl\x0abell\x07`, "tab\tnl\nbell\\x07"},
		{"c1\u009bdel\x7f", `c1\u009bdel\x7f`, `c1\u009bdel\x7f`},
		{"bad\xffutf8 é 東", `bad\xffutf8 é 東`, `bad\xffutf8 é 東`},
	} {
		if got := safe(tc.in); got != tc.want {
			t.Errorf("safe(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := safeLines(tc.in); got != tc.lines {
			t.Errorf("safeLines(%q) = %q, want %q", tc.in, got, tc.lines)
		}
	}
}

// A pause note and a node name chosen by whoever can write the backend
// reach the operator's terminal escaped: no screen clear, no reversed
// text. JSON is left as it is (the encoder escapes controls itself).
func TestTablesEscapeTerminalControls(t *testing.T) {
	t.Parallel()
	const evil = "\x1b[2J\u202eevil"
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			cfg := writeFile(t, t.TempDir(), "bext.config.toml", "node_id = \"cli\"\n[http]\nlisten = \"off\"\n"+lockingTOML+opsSchedules)
			ctx := t.Context()
			node := "node" + evil
			base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
			if err := st.RecordRuns(ctx, []cluster.Run{{Schedule: "job", Tick: base, Node: node, Result: "failure", StartedAt: base,
				Duration: time.Second, Attempts: 1, RunID: "run" + evil, Error: "exit status 1: tail" + evil}}, 100); err != nil {
				t.Fatal(err)
			}
			// Announce refuses a control character in a node id, not a
			// bidirectional override.
			if err := st.Announce(ctx, cluster.Node{NodeID: "live‮evil", Version: "v" + evil, StartedAt: base}, time.Minute); err != nil {
				t.Fatal(err)
			}
			pause := cli(t, cfg, 0, "pause", "job", "--note", "note"+evil)
			status := cli(t, cfg, 0, "status")
			history := cli(t, cfg, 0, "history", "job")
			for name, out := range map[string]string{"pause": pause.Stdout, "status": status.Stdout, "history": history.Stdout} {
				if strings.ContainsAny(out, "\x1b\u202e") {
					t.Errorf("%s prints a raw control:\n%q", name, out)
				}
			}
			for name, want := range map[string][]string{
				"pause":   {`note\x1b[2J\u202eevil`},
				"status":  {`note\x1b[2J\u202eevil`, `node\x1b[2J\u202eevil`, `live\u202eevil`, `v\x1b[2J\u202eevil`},
				"history": {`node\x1b[2J\u202eevil`, `run\x1b[2J\u202eevil`, `tail\x1b[2J\u202eevil`},
			} {
				out := map[string]string{"pause": pause.Stdout, "status": status.Stdout, "history": history.Stdout}[name]
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Errorf("%s lacks %s:\n%s", name, w, out)
					}
				}
			}
			js := cli(t, cfg, 0, "status", "--json")
			if !strings.Contains(js.Stdout, `\u001b[2J`) {
				t.Errorf("status --json: %s", js.Stdout)
			}
		})
	}
}

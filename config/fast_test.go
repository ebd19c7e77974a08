package config

import (
	"reflect"
	"strings"
	"testing"
)

// fastDocs are included files the fast path takes: every key it decodes,
// the ways TOML may spell their values, comments, CRLF line ends.
var fastDocs = map[string]string{
	"plain": fleet(3, 0),
	"every key": `# a comment
[[scheduled]]
id = "all"   # trailing comment
plugin = 'lit'
cron = "*/5 * * * *"
timezone = "America/New_York"
hint = "require_global"
overlap = "allow"
dir = "/tmp"
env_mode = "clean"
ping_url = "https://hc.example/ping/x"
command = ["/bin/sh", "-c", "echo \"quoted\" \u00e9"]
env_allow = ["PATH", 'HOME']
retries = 3
pause_after_failures = 0
expected_runtime = "2m"
jitter = "3s"
timeout = "10m"
catchup_window = "0s"
spread = "0s"
retry_backoff = "1s"
min_runtime = "1s"

[[scheduled]]
id = "multi"
cron = """0 3 * * *"""
command = [
  "/bin/true",
  '''x''',
]
catchup_window = "1h"
`,
	"crlf":  "[[scheduled]]\r\nid = \"w\"\r\ncron = \"@daily\"\r\ncommand = [\"/bin/true\"]\r\n",
	"empty": "# nothing yet\n",
}

// loadInclude loads a main file including doc, through the fast path or,
// with a '$' in a comment, the full one.
// dir is shared by both loads, so their messages compare.
func loadInclude(t *testing.T, dir, doc string, full bool) (*Config, error) {
	t.Helper()
	if full {
		doc += "\n# $ sends the file down the full path\n"
	}
	write(t, dir, "inc/a.toml", doc)
	return Load(write(t, dir, "main.toml", "include = [\"inc/*.toml\"]\n"+fleetHead))
}

// TestFastIncludeMatchesFullPath: the schedules (and the lines of their
// keys) are the same whichever path decoded them.
func TestFastIncludeMatchesFullPath(t *testing.T) {
	for name, doc := range fastDocs {
		t.Run(name, func(t *testing.T) {
			b := &builder{file: "a.toml"}
			var got []Schedule
			if !b.fastInclude([]byte(doc), &got) {
				t.Fatal("the fast path refused the file")
			}
			if len(b.problems) > 0 {
				t.Fatalf("problems: %v", b.problems)
			}
			dir := t.TempDir()
			fast, err := loadInclude(t, dir, doc, false)
			if err != nil {
				t.Fatal(err)
			}
			full, err := loadInclude(t, dir, doc, true)
			if err != nil {
				t.Fatal(err)
			}
			sameSchedules(t, fast.Scheduled, full.Scheduled, "", "id", "cron", "command", "command.1", "command.2", "env_allow.1", "catchup_window", "min_runtime", "nope")
		})
	}
}

// TestFastIncludeProblemsMatch: a file the fast path takes reports the
// same problems, at the same lines, as the full path.
func TestFastIncludeProblemsMatch(t *testing.T) {
	docs := map[string]string{
		"bad durations": "[[scheduled]]\nid = \"a\"\ncron = \"@daily\"\ncommand = [\"x\"]\njitter = \"soon\"\nexpected_runtime = \"0s\"\ncatchup_window = \"-1s\"\n",
		"no id":         "[[scheduled]]\ncron = \"@daily\"\ncommand = [\"x\"]\ntimeout = \"later\"\n",
		"bad schedule":  "[[scheduled]]\nid = \"b\"\ncron = \"61 * * * *\"\ntimezone = \"Mars/Olympus\"\ncommand = [\"\"]\nretries = 0\n",
		"duplicate ids": "[[scheduled]]\nid = \"d\"\ncron = \"@daily\"\ncommand = [\"x\"]\n\n[[scheduled]]\nid = \"d\"\ncron = \"@daily\"\ncommand = [\"x\"]\nmin_runtime = \"2m\"\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			b := &builder{file: "a.toml"}
			var got []Schedule
			if !b.fastInclude([]byte(doc), &got) {
				t.Fatal("the fast path refused the file")
			}
			dir := t.TempDir()
			_, errFast := loadInclude(t, dir, doc, false)
			_, errFull := loadInclude(t, dir, doc, true)
			if errFast == nil || errFull == nil {
				t.Fatalf("want problems from both paths; fast: %v, full: %v", errFast, errFull)
			}
			if errFast.Error() != errFull.Error() {
				t.Errorf("fast:\n%v\nfull:\n%v", errFast, errFull)
			}
		})
	}
}

// TestFastIncludeRefuses: what the fast path does not decode exactly as
// go-toml does goes down the full path, untouched.
func TestFastIncludeRefuses(t *testing.T) {
	head := "[[scheduled]]\nid = \"a\"\ncron = \"@daily\"\n"
	docs := map[string]string{
		"env var":        head + "command = [\"${HOME}/x\"]\n",
		"dollar":         head + "command = [\"$x\"]\n",
		"env table":      head + "command = [\"x\"]\nenv = { A = \"1\" }\n",
		"http table":     head + "[scheduled.http]\nurl = \"http://x\"\n",
		"unknown key":    head + "command = [\"x\"]\ncolour = \"red\"\n",
		"folded key":     head + "Command = [\"x\"]\n",
		"dotted key":     head + "command = [\"x\"]\nhttp.url = \"http://x\"\n",
		"quoted key":     head + "\"command\" = [\"x\"]\n",
		"twice":          head + "command = [\"x\"]\ncron = \"@hourly\"\n",
		"underscores":    head + "command = [\"x\"]\nretries = 1_0\n",
		"signed":         head + "command = [\"x\"]\nretries = -1\n",
		"wrong type":     head + "command = \"x\"\n",
		"number dur":     head + "command = [\"x\"]\njitter = 5\n",
		"empty command":  head + "command = []\n",
		"mixed array":    head + "command = [\"x\", 1]\n",
		"syntax":         head + "command = [\"x\"\n",
		"root key":       "id = \"a\"\n" + head,
		"other table":    "[[other]]\nid = \"a\"\n",
		"plain table":    "[scheduled]\nid = \"a\"\n",
		"dotted header":  "[[scheduled.x]]\nid = \"a\"\n",
		"inline table":   head + "command = [\"x\"]\nhttp = { url = \"http://x\" }\n",
		"table in array": head + "command = [{ a = \"x\" }]\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			b := &builder{file: "a.toml"}
			all := make([]Schedule, 1, 4)
			all[0].ID = "kept"
			if b.fastInclude([]byte(doc), &all) {
				t.Fatal("the fast path took the file")
			}
			if len(all) != 1 || all[0].ID != "kept" || len(b.problems) > 0 {
				t.Fatalf("refused, but left %d schedules and problems %v", len(all), b.problems)
			}
		})
	}
}

// TestFastIncludeLinesAreLazy: the key index of a fast file is built only
// when a line is looked up, and then once.
func TestFastIncludeLinesAreLazy(t *testing.T) {
	b := &builder{file: "a.toml"}
	var got []Schedule
	if !b.fastInclude([]byte(fleet(2, 0)), &got) {
		t.Fatal("the fast path refused the file")
	}
	pos := got[1].at.pos
	if pos.lines != nil {
		t.Fatal("the index was built before any look-up")
	}
	if l := got[1].at.line("cron"); l != 8 {
		t.Fatalf("line of the second cron: %d, want 8", l)
	}
	if pos.lines == nil || pos.pending.data != nil {
		t.Fatal("the index was not built, or kept the document")
	}
	if !strings.Contains(fleet(2, 0), "s000001") || got[1].Line != 6 {
		t.Fatalf("second header at line %d, want 6", got[1].Line)
	}
}

// loadMain loads a main file of fleetHead then doc: its schedules read by
// the fast path (plainTail) or, with a '$' in a comment, decoded whole.
func loadMain(t *testing.T, dir, head, doc string, full bool) (*Config, error) {
	t.Helper()
	if full {
		doc += "\n# $ sends the file down the full path\n"
	}
	return Load(write(t, dir, "main.toml", head+doc))
}

// TestPlainTailMatchesWholeFile: a main file ending in plain [[scheduled]]
// tables gives the same schedules, lines and problems whether its tail
// went through the fast path or the file was decoded whole.
func TestPlainTailMatchesWholeFile(t *testing.T) {
	heads := map[string]string{
		"fleet head":               fleetHead,
		"comments and blank lines": "# the fleet\n\n" + fleetHead + "shutdown_grace = \"5s\" # grace\n\n",
	}
	docs := map[string]string{
		"plain":          fleet(3, 0),
		"every key":      fastDocs["every key"],
		"bad durations":  "[[scheduled]]\nid = \"a\"\ncron = \"@daily\"\ncommand = [\"x\"]\njitter = \"soon\"\nexpected_runtime = \"0s\"\n",
		"duplicate ids":  "[[scheduled]]\nid = \"d\"\ncron = \"@daily\"\ncommand = [\"x\"]\n\n[[scheduled]]\nid = \"d\"\ncron = \"61 * * * *\"\ncommand = [\"x\"]\n",
		"table after it": "[[scheduled]]\nid = \"e\"\ncron = \"@daily\"\ncommand = [\"x\"]\n[metrics]\naddr = \"127.0.0.1:0\"\n",
	}
	for hn, head := range heads {
		for dn, doc := range docs {
			t.Run(hn+"/"+dn, func(t *testing.T) {
				// Compared with itself, a file that never took the fast
				// tail would pass: it must take it (all but the one that
				// ends in another table).
				var tail []Schedule
				_, took := (&builder{file: "main.toml"}).plainTail([]byte(head+doc), &tail)
				if want := dn != "table after it"; took != want {
					t.Fatalf("plainTail took the file: %v, want %v", took, want)
				}
				dir := t.TempDir()
				fast, errFast := loadMain(t, dir, head, doc, false)
				full, errFull := loadMain(t, dir, head, doc, true)
				if (errFast == nil) != (errFull == nil) || (errFast != nil && errFast.Error() != errFull.Error()) {
					t.Fatalf("fast: %v\nfull: %v", errFast, errFull)
				}
				if errFast != nil {
					return
				}
				if len(fast.Scheduled) == 0 {
					t.Fatal("no schedules")
				}
				sameSchedules(t, fast.Scheduled, full.Scheduled, "", "id", "cron", "command", "command.1", "min_runtime")
				fast.Scheduled, full.Scheduled = nil, nil
				fast.at, full.at = nil, nil
				if !reflect.DeepEqual(fast, full) {
					t.Errorf("the rest of the config differs:\nfast %+v\nfull %+v", fast, full)
				}
			})
		}
	}
}

// TestPlainTailIsTaken: a one-file fleet's schedules are read by the fast
// path (their key lines indexed lazily), and a head that the cut could
// split or that holds schedule tables of its own is decoded whole.
func TestPlainTailIsTaken(t *testing.T) {
	b := &builder{file: "main.toml"}
	var tail []Schedule
	head, ok := b.plainTail([]byte(fleetHead+fleet(2, 0)), &tail)
	if !ok || string(head) != fleetHead || len(tail) != 2 {
		t.Fatalf("plainTail = %q, %v, %d schedules; want the head, true, 2", head, ok, len(tail))
	}
	if tail[1].at.pos.pending.data == nil {
		t.Error("the tail's key lines were indexed at once, not when a problem needs one")
	}
	for name, doc := range map[string]string{
		"multi-line string in the head": "motd = \"\"\"\n[[scheduled]]\n\"\"\"\n" + fleet(1, 0),
		"scheduled in the head":         "[[ scheduled ]]\nid = \"x\"\ncron = \"@daily\"\ncommand = [\"x\"]\n" + fleet(1, 0),
		"indented table":                fleetHead + "  [[scheduled]]\nid = \"x\"\ncron = \"@daily\"\ncommand = [\"x\"]\n",
		"no schedules":                  fleetHead,
		"${VAR} in the tail":            fleetHead + fleet(1, 0) + "# ${HOME}\n",
	} {
		var tail []Schedule
		if _, ok := (&builder{file: "main.toml"}).plainTail([]byte(doc), &tail); ok {
			t.Errorf("%s: split, want the file decoded whole", name)
		}
	}
}

// sameSchedules fails t unless fast and full hold the same schedules, with
// the same lines for keys; File is left out (the two loads may name the
// same file differently).
func sameSchedules(t *testing.T, fast, full []Schedule, keys ...string) {
	t.Helper()
	if len(fast) != len(full) {
		t.Fatalf("fast: %d schedules, full: %d", len(fast), len(full))
	}
	for i := range fast {
		f, g := fast[i], full[i]
		for _, k := range keys {
			if lf, lg := f.at.line(k), g.at.line(k); lf != lg {
				t.Errorf("schedule %d: line of %q: fast %d, full %d", i, k, lf, lg)
			}
		}
		f.at, g.at = keyLines{}, keyLines{}
		f.File, g.File = "", ""
		if !reflect.DeepEqual(f, g) {
			t.Errorf("schedule %d:\nfast %+v\nfull %+v", i, f, g)
		}
	}
}

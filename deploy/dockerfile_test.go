package deploy_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dockerfile is what the checks read from the Dockerfile's final stage
// (and, for the build, from every RUN).
type dockerfile struct {
	stages      []string          // FROM images, in order
	env         map[string]string // ENV in the final stage
	expose      []string          // EXPOSEd ports
	user        string
	healthcheck string
	entrypoint  []string
	cmd         []string
	runs        []string // every RUN, continuation lines joined
	tini        bool     // ENTRYPOINT starts with tini
}

// loadDockerfile reads the instructions, joining continuation lines and
// dropping comments. It understands what this repository's Dockerfile
// uses; anything else is an error so the checks never silently miss it.
func loadDockerfile(t *testing.T) dockerfile {
	t.Helper()
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(readRepoFile(t, "Dockerfile"), "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	df := dockerfile{env: map[string]string{}}
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			df.stages = append(df.stages, strings.Fields(rest)[0])
			df.env = map[string]string{} // ENV is per stage; keep the final one's
		case "ENV":
			k, v, ok := strings.Cut(rest, "=")
			if !ok {
				t.Fatalf("Dockerfile: ENV %q: write ENV KEY=value", rest)
			}
			df.env[k] = v
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				df.expose = append(df.expose, strings.TrimSuffix(p, "/tcp"))
			}
		case "USER":
			df.user = rest
		case "HEALTHCHECK":
			df.healthcheck = rest
		case "ENTRYPOINT":
			df.entrypoint = execForm(t, "ENTRYPOINT", rest)
		case "CMD":
			df.cmd = execForm(t, "CMD", rest)
		case "RUN":
			df.runs = append(df.runs, rest)
		case "ARG", "WORKDIR", "COPY":
		default:
			t.Fatalf("Dockerfile: instruction %s is not understood by this test; teach loadDockerfile", instr)
		}
	}
	df.tini = len(df.entrypoint) > 0 && path.Base(df.entrypoint[0]) == "tini"
	return df
}

// execForm parses a JSON exec-form argument list. The shell form would
// make the shell PID 1 (or tini's child) and swallow SIGTERM.
func execForm(t *testing.T, instr, s string) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(s), &argv); err != nil {
		t.Fatalf("Dockerfile: %s %s: use the exec form [\"...\"]: %v", instr, s, err)
	}
	return argv
}

func TestDockerfile(t *testing.T) {
	df := loadDockerfile(t)
	if len(df.stages) < 2 || !strings.HasPrefix(df.stages[0], "golang:") {
		t.Errorf("stages %v: want a golang build stage and a separate final stage", df.stages)
	}
	if df.env["BEXT_CONFIG"] != "/etc/bext/bext.config.toml" {
		t.Errorf("BEXT_CONFIG = %q, want the documented /etc/bext/bext.config.toml", df.env["BEXT_CONFIG"])
	}
	if !slices.Equal(df.expose, []string{"9464"}) {
		t.Errorf("EXPOSE %v, want 9464", df.expose)
	}
	if u := strings.Split(df.user, ":")[0]; u == "" || u == "root" || u == "0" {
		t.Errorf("USER %q: the image must not run as root", df.user)
	}
	if !df.tini {
		t.Errorf("ENTRYPOINT %q: want tini first, so killed jobs' children are reaped", df.entrypoint)
	}
	if !strings.Contains(df.healthcheck, "http://127.0.0.1:"+df.expose[0]+"/healthz") {
		t.Errorf("HEALTHCHECK %q does not probe /healthz on the EXPOSEd port", df.healthcheck)
	}
	if len(df.cmd) == 0 || df.cmd[0] != "run" || !strings.Contains(strings.Join(df.cmd, " "), "--listen 0.0.0.0:"+df.expose[0]) {
		t.Errorf("CMD %q: want run --listen 0.0.0.0:%s", df.cmd, df.expose[0])
	}

	var build string
	for _, r := range df.runs {
		if strings.Contains(r, "go build") {
			build = r
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-X main.version=", "-X main.commit=", "./cmd/bext-scheduler"} {
		if !strings.Contains(build, want) {
			t.Errorf("the go build RUN lacks %q: %s", want, build)
		}
	}
	// The -X flags set nothing (silently) if the variables are renamed.
	vars := packageVars(t, repo("cmd/bext-scheduler"))
	for _, v := range []string{"version", "commit"} {
		if !vars[v] {
			t.Errorf("-X main.%s: cmd/bext-scheduler declares no package-level var %s", v, v)
		}
	}
}

// packageVars lists the package-level variables of the Go package in dir.
func packageVars(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					out[n.Name] = true
				}
			}
		}
	}
	return out
}

// dockerignored reports whether .dockerignore's patterns exclude rel (a
// slash path). It implements the subset the file uses: plain patterns
// matching a path or one of its parent directories, and a leading **/.
func dockerignored(patterns []string, rel string) bool {
	parts := strings.Split(rel, "/")
	for _, p := range patterns {
		if sub, ok := strings.CutPrefix(p, "**/"); ok {
			for i := range parts {
				if ok, _ := path.Match(sub, strings.Join(parts[i:], "/")); ok {
					return true
				}
				if ok, _ := path.Match(sub, parts[i]); ok {
					return true
				}
			}
			continue
		}
		for i := 1; i <= len(parts); i++ {
			if ok, _ := path.Match(p, strings.Join(parts[:i], "/")); ok {
				return true
			}
		}
	}
	return false
}

func loadDockerignore(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(readRepoFile(t, ".dockerignore"), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") || strings.Contains(strings.TrimPrefix(l, "**/"), "**") {
			t.Fatalf(".dockerignore: %q is beyond what this test's matcher implements; extend dockerignored", l)
		}
		out = append(out, strings.TrimPrefix(l, "/"))
	}
	return out
}

func TestDockerignoreMatcher(t *testing.T) {
	pats := []string{".git", "bin", "**/testdata", "**/*_test.go"}
	for rel, want := range map[string]bool{
		".git/HEAD":                   true,
		"bin/bext-scheduler":          true,
		"config/testdata/jobs/a.toml": true,
		"config/load_test.go":         true,
		"config/load.go":              false,
		"binary/x.go":                 false,
		"go.mod":                      false,
	} {
		if got := dockerignored(pats, rel); got != want {
			t.Errorf("dockerignored(%q) = %v, want %v", rel, got, want)
		}
	}
}

// TestDockerBuildContext compiles the binary the way the image's build stage
// does, from only the files .dockerignore lets into the build context: an
// exclusion that drops a needed file (an embedded .lua script, go.sum)
// fails here rather than in someone's docker build.
func TestDockerBuildContext(t *testing.T) {
	pats := loadDockerignore(t)
	root := repo(".")
	ctxDir := t.TempDir()
	var sent int
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if dockerignored(pats, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := filepath.Join(ctxDir, filepath.FromSlash(rel))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sent++
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"go.mod", "go.sum", "cmd/bext-scheduler/main.go", "locking/redis/acquire.lua"} {
		if _, err := os.Stat(filepath.Join(ctxDir, must)); err != nil {
			t.Errorf(".dockerignore keeps %s out of the build context", must)
		}
	}
	for _, never := range []string{".git", "bin"} {
		if _, err := os.Stat(filepath.Join(ctxDir, never)); err == nil {
			t.Errorf(".dockerignore lets %s into the build context", never)
		}
	}

	df := loadDockerfile(t)
	var build string
	for _, r := range df.runs {
		if strings.Contains(r, "go build") {
			build = r
		}
	}
	tags := regexp.MustCompile(`-tags\s+(\S+)`).FindStringSubmatch(build)
	args := []string{"build", "-trimpath", "-o", filepath.Join(t.TempDir(), "bext-scheduler")}
	if tags != nil {
		args = append(args, "-tags", tags[1])
	}
	args = append(args, "-ldflags", "-X main.version=ctx-test -X main.commit=ctx", "./cmd/bext-scheduler")
	cmd := exec.Command("go", args...)
	cmd.Dir = ctxDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build from the %d files of the build context: %v\n%s", sent, err, out)
	}
	out, err := exec.Command(args[3], "version").Output()
	if err != nil || !strings.Contains(string(out), "ctx-test") {
		t.Fatalf("the context-built binary's version: %v %q", err, out)
	}
}

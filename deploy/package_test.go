package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/jobs"
)

// goreleaser is pinned here and in the Makefile: `go run` builds it from the
// module proxy (cached after the first time), no binary is downloaded.
const goreleaser = "github.com/goreleaser/goreleaser/v2@v2.15.1"

// Paths the package installs, as docs/OPERATING.md ("Package layout") lists.
const (
	pkgConfig = "/etc/bext-scheduler/bext.config.toml"
	pkgEnv    = "/etc/bext-scheduler/bext.env"
	pkgUnit   = "/usr/lib/systemd/system/bext-scheduler.service"
	pkgBin    = "/usr/bin/bext-scheduler"
)

// TestDebPackage builds the linux/amd64 deb with the repository's
// .goreleaser.yaml (only that target, into a temporary dist), installs it
// with dpkg on this machine, checks what it installed, and purges it. It
// changes the machine (a package, a system user), so it runs only when
// BEXT_TEST_DEB=1 (make test sets it), as root, and refuses to start when a
// bext-scheduler package or a bext user is already there.
func TestDebPackage(t *testing.T) {
	if os.Getenv("BEXT_TEST_DEB") != "1" {
		t.Skip("installs a deb and creates a system user: set BEXT_TEST_DEB=1 (make test does) to run it")
	}
	if os.Geteuid() != 0 {
		t.Fatal("BEXT_TEST_DEB=1 needs root: dpkg -i installs system-wide")
	}
	for _, tool := range []string{"dpkg", "dpkg-query", "systemd-analyze", "runuser", "rpm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (scripts/test-services installs it): %v", tool, err)
		}
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "bext-scheduler").Output(); err == nil && strings.Contains(string(out), "installed") {
		t.Fatalf("a bext-scheduler package is installed on this machine already (%s): not touching it", out)
	}
	if _, err := user.Lookup("bext"); err == nil {
		t.Fatal("a bext user exists on this machine already: not touching it")
	}
	for _, p := range []string{"/etc/bext-scheduler", "/var/lib/bext"} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s exists on this machine already: not touching it", p)
		}
	}

	deb, rpm := buildPackages(t)
	checkRpm(t, rpm)

	// Purge and drop the user even when a check below fails. The package
	// keeps the user on purge (documented); the test created it, so it
	// removes it.
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "bext-scheduler").CombinedOutput(); err != nil {
			t.Errorf("cleanup: dpkg --purge: %v\n%s", err, out)
		}
		if _, err := user.Lookup("bext"); err == nil {
			if out, err := exec.Command("userdel", "bext").CombinedOutput(); err != nil {
				t.Errorf("cleanup: userdel bext: %v\n%s", err, out)
			}
		}
		if _, err := user.LookupGroup("bext"); err == nil {
			_ = exec.Command("groupdel", "bext").Run()
		}
	})
	if out, err := exec.Command("dpkg", "-i", deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg -i %s: %v\n%s", filepath.Base(deb), err, out)
	}

	// The user, created by the package's preinst.
	u, err := user.Lookup("bext")
	if err != nil {
		t.Fatalf("the package created no bext user: %v", err)
	}
	if u.Uid == "0" || u.HomeDir != "/var/lib/bext" {
		t.Errorf("bext user: uid %s home %s, want a system user with home /var/lib/bext", u.Uid, u.HomeDir)
	}
	if uid, _ := strconv.Atoi(u.Uid); uid >= 1000 {
		t.Errorf("bext uid %d is not a system uid", uid)
	}
	g, err := user.LookupGroup("bext")
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(g.Gid)

	// Secrets: root and the service group only. The config: readable by the
	// service, not by everyone.
	for p, want := range map[string]os.FileMode{pkgEnv: 0o640, pkgConfig: 0o640, pkgUnit: 0o644, pkgBin: 0o755} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		st := fi.Sys().(*syscall.Stat_t)
		wantGid := 0
		if strings.HasPrefix(p, "/etc/") {
			wantGid = gid
		}
		if st.Uid != 0 || int(st.Gid) != wantGid {
			t.Errorf("%s: owner %d:%d, want 0:%d", p, st.Uid, st.Gid, wantGid)
		}
	}

	// Both /etc files are conffiles: dpkg keeps an edited one on upgrade.
	out, err := exec.Command("dpkg-query", "-W", "-f=${Conffiles}", "bext-scheduler").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{pkgConfig, pkgEnv} {
		if !strings.Contains(string(out), p+" ") {
			t.Errorf("%s is not a conffile (kept on upgrade):\n%s", p, out)
		}
	}

	// Man pages and completions in every package.
	for _, p := range []string{
		"/usr/share/man/man1/bext-scheduler.1.gz",
		"/usr/share/man/man1/bext-scheduler-run.1.gz",
		"/usr/share/bash-completion/completions/bext-scheduler",
		"/usr/share/zsh/vendor-completions/_bext-scheduler",
		"/usr/share/fish/vendor_completions.d/bext-scheduler.fish",
		"/etc/bext-scheduler/jobs",
	} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}

	// The unit is deploy/systemd's, with the package's paths and nothing
	// else changed; systemd accepts it.
	installed, err := os.ReadFile(pkgUnit)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer("/usr/local/bin/bext-scheduler", pkgBin, "/etc/bext/", "/etc/bext-scheduler/").
		Replace(readRepoFile(t, unitPath))
	if got, want := unitDirectives(string(installed)), unitDirectives(want); got != want {
		t.Errorf("the packaged unit drifted from %s:\n--- packaged\n%s\n--- want\n%s", unitPath, got, want)
	}
	if out, err := exec.Command("systemd-analyze", "verify", pkgUnit).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", pkgUnit, err, out)
	}

	// The shipped config passes validate as ExecStartPre runs it: as the
	// bext user, the path from the unit's BEXT_CONFIG, an empty environment.
	if out, err := exec.Command("runuser", "-u", "bext", "--", "env", "-i", "BEXT_CONFIG="+pkgConfig, pkgBin, "validate").CombinedOutput(); err != nil {
		t.Errorf("validate of the shipped config as bext: %v\n%s", err, out)
	}
	cfg, err := config.Load(pkgConfig)
	if err != nil {
		t.Fatal(err)
	}
	if stop := unitStopTimeout(t, string(installed)); stop <= cfg.ShutdownGrace.Duration+jobs.DefaultKillGrace {
		t.Errorf("TimeoutStopSec %v is not above the shipped shutdown_grace %v + %v", stop, cfg.ShutdownGrace.Duration, jobs.DefaultKillGrace)
	}

	// An upgrade (here a reinstall, which dpkg runs as one) keeps an edited
	// config and env file, and the modes.
	for _, p := range []string{pkgConfig, pkgEnv} {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString("# edited by TestDebPackage\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("dpkg", "-i", deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg -i again (upgrade): %v\n%s", err, out)
	}
	for _, p := range []string{pkgConfig, pkgEnv} {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "# edited by TestDebPackage") {
			t.Errorf("%s lost the operator's edit on upgrade (%v)", p, err)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("%s after upgrade: %v %v, want mode 0640", p, fi.Mode(), err)
		}
	}

	// Purge: the package and its files go, the user stays (docs/OPERATING.md).
	if out, err := exec.Command("dpkg", "--purge", "bext-scheduler").CombinedOutput(); err != nil {
		t.Fatalf("dpkg --purge: %v\n%s", err, out)
	}
	for _, p := range []string{pkgBin, pkgUnit, "/etc/bext-scheduler", "/var/lib/bext", "/usr/share/man/man1/bext-scheduler.1.gz"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after dpkg --purge", p)
		}
	}
	if _, err := user.Lookup("bext"); err != nil {
		t.Errorf("purge removed the bext user, which docs/OPERATING.md says is kept: %v", err)
	}
}

// buildPackages runs goreleaser on the repository's config narrowed to
// linux/amd64, with its dist in a temporary directory, and returns the
// paths of the .deb and the .rpm.
func buildPackages(t *testing.T) (deb, rpm string) {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(readRepoFile(t, ".goreleaser.yaml")), &cfg); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	dist := t.TempDir()
	cfg["dist"] = dist
	for _, b := range cfg["builds"].([]any) {
		b.(map[string]any)["goos"] = []string{"linux"}
		b.(map[string]any)["goarch"] = []string{"amd64"}
	}
	body, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "goreleaser.yaml")
	if err := os.WriteFile(cfgPath, body, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command("go", "run", goreleaser, "release", "--snapshot", "--clean",
		"--skip=docker,sbom,archive", "--config", cfgPath)
	cmd.Dir = repo(".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("goreleaser: %v\n%s", err, out)
	}
	t.Logf("goreleaser built the deb and rpm in %v", time.Since(start).Round(time.Second))
	debs, _ := filepath.Glob(filepath.Join(dist, "*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("goreleaser made %d .deb and %d .rpm files in %s, want 1 each", len(debs), len(rpms), dist)
	}
	return debs[0], rpms[0]
}

// checkRpm reads the rpm's header (this machine installs debs only): the
// /etc files are %config(noreplace), 0640 root:bext, the service files are
// there, and %pre creates the user.
func checkRpm(t *testing.T, rpm string) {
	t.Helper()
	out, err := exec.Command("rpm", "-qp", "--queryformat",
		"[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILEFLAGS:fflags} %{FILENAMES}\\n]", rpm).CombinedOutput()
	if err != nil {
		t.Fatalf("rpm -qp %s: %v\n%s", filepath.Base(rpm), err, out)
	}
	files := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		files[f[len(f)-1]] = strings.Join(f[:len(f)-1], " ")
	}
	for _, p := range []string{pkgConfig, pkgEnv} {
		if got := files[p]; got != "-rw-r----- root:bext cn" {
			t.Errorf("rpm: %s is %q, want \"-rw-r----- root:bext cn\" (config, noreplace)", p, got)
		}
	}
	for _, p := range []string{pkgBin, pkgUnit, "/usr/share/man/man1/bext-scheduler.1.gz", "/usr/share/bash-completion/completions/bext-scheduler", "/usr/share/zsh/site-functions/_bext-scheduler"} {
		if _, ok := files[p]; !ok {
			t.Errorf("rpm: %s is not in the package", p)
		}
	}
	scripts, err := exec.Command("rpm", "-qp", "--scripts", rpm).CombinedOutput()
	if err != nil || !strings.Contains(string(scripts), "useradd --system") {
		t.Errorf("rpm: %%pre does not create the bext user (%v):\n%s", err, scripts)
	}
}

// unitDirectives is a unit without its comments and blank lines.
func unitDirectives(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func unitStopTimeout(t *testing.T, body string) time.Duration {
	t.Helper()
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "TimeoutStopSec="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("TimeoutStopSec=%s: %v", v, err)
			}
			return d
		}
	}
	t.Fatal("the unit sets no TimeoutStopSec")
	return 0
}

// TestGoreleaserConfig checks .goreleaser.yaml without building: it builds
// the binary as the image and `make build` do, for the documented targets,
// pins its tools as the Makefile does, and packages the /etc files as
// kept-on-upgrade config readable by root and the service group only.
func TestGoreleaserConfig(t *testing.T) {
	t.Parallel()
	var cfg struct {
		Before struct{ Hooks []string }
		Builds []struct {
			Main, Binary  string
			Env, Flags    []string
			Tags, Ldflags []string
			Goos, Goarch  []string
		}
		Sboms []struct {
			Cmd  string
			Args []string
		}
		DockersV2 []struct {
			Dockerfile string
			Platforms  []string
			BuildArgs  map[string]string `yaml:"build_args"`
		} `yaml:"dockers_v2"`
		Nfpms []struct {
			Formats  []string
			Bindir   string
			Scripts  map[string]string
			Contents []struct {
				Src, Dst, Type string
				FileInfo       struct {
					Mode         int
					Owner, Group string
				} `yaml:"file_info"`
			}
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(readRepoFile(t, ".goreleaser.yaml")))
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if len(cfg.Builds) != 1 || len(cfg.Nfpms) != 1 || len(cfg.Sboms) != 1 {
		t.Fatalf("want one build, one nfpm and one sbom entry: %+v", cfg)
	}
	b := cfg.Builds[0]
	if b.Main != "./cmd/bext-scheduler" || b.Binary != "bext-scheduler" {
		t.Errorf("build main %q binary %q", b.Main, b.Binary)
	}
	if !slicesEqualSet(b.Goos, "linux", "darwin") || !slicesEqualSet(b.Goarch, "amd64", "arm64") {
		t.Errorf("targets %v × %v, want linux and darwin × amd64 and arm64", b.Goos, b.Goarch)
	}
	ld := strings.Join(b.Ldflags, " ")
	for _, want := range []string{"-X main.version=", "-X main.commit="} {
		if !strings.Contains(ld, want) {
			t.Errorf("ldflags %q lack %s", ld, want)
		}
	}
	if !strings.Contains(strings.Join(b.Env, " "), "CGO_ENABLED=0") || !strings.Contains(strings.Join(b.Tags, " "), "timetzdata") {
		t.Errorf("env %v tags %v: want CGO_ENABLED=0 and timetzdata, as the image", b.Env, b.Tags)
	}
	if !strings.Contains(readRepoFile(t, "Makefile"), "GORELEASER := "+goreleaser+"\n") {
		t.Errorf("the Makefile does not pin %s as the test does", goreleaser)
	}
	if s := cfg.Sboms[0]; s.Cmd != "go" || !slices.Contains(s.Args, "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0") {
		t.Errorf("sbom: %s %v, want go run of the pinned cyclonedx-gomod", s.Cmd, s.Args)
	}
	for _, h := range cfg.Before.Hooks {
		if _, err := os.Stat(repo(h)); err != nil {
			t.Errorf("before hook %s: %v", h, err)
		}
	}

	// The image is built from these binaries: the Dockerfile's prebuilt
	// stage copies the one goreleaser puts at $TARGETPLATFORM/<binary>.
	if len(cfg.DockersV2) != 1 {
		t.Fatalf("want one dockers_v2 entry, have %d", len(cfg.DockersV2))
	}
	d := cfg.DockersV2[0]
	if d.Dockerfile != "Dockerfile" || d.BuildArgs["BINARY"] != "prebuilt" || !slicesEqualSet(d.Platforms, "linux/amd64", "linux/arm64") {
		t.Errorf("dockers_v2: %+v, want the Dockerfile with BINARY=prebuilt for linux/amd64 and linux/arm64", d)
	}
	df := readRepoFile(t, "Dockerfile")
	for _, want := range []string{"ARG BINARY=build\n", "FROM scratch AS prebuilt\n", "COPY ${TARGETPLATFORM}/" + b.Binary + " /out/bext-scheduler\n", "FROM ${BINARY} AS binary\n", "COPY --from=binary /out/bext-scheduler "} {
		if !strings.Contains(df, want) {
			t.Errorf("the Dockerfile lacks %q: the image would not take goreleaser's binary", want)
		}
	}

	n := cfg.Nfpms[0]
	if !slicesEqualSet(n.Formats, "deb", "rpm") || n.Bindir != "/usr/bin" {
		t.Errorf("nfpm formats %v bindir %s", n.Formats, n.Bindir)
	}
	for _, k := range []string{"preinstall", "postinstall", "preremove", "postremove"} {
		if _, err := os.Stat(repo(n.Scripts[k])); err != nil {
			t.Errorf("nfpm script %s: %v", k, err)
		}
	}
	seen := map[string]bool{}
	for _, c := range n.Contents {
		seen[c.Dst] = true
		if c.Dst == pkgConfig || c.Dst == pkgEnv {
			if c.Type != "config|noreplace" || c.FileInfo.Mode != 0o640 || c.FileInfo.Group != "bext" {
				t.Errorf("%s: type %q mode %o group %q, want config|noreplace 0640 group bext", c.Dst, c.Type, c.FileInfo.Mode, c.FileInfo.Group)
			}
		}
	}
	for _, p := range []string{pkgConfig, pkgEnv, pkgUnit} {
		if !seen[p] {
			t.Errorf("the packages do not install %s", p)
		}
	}
}

func slicesEqualSet(got []string, want ...string) bool {
	return len(got) == len(want) && !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(got, w) })
}

package deploy_test

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bext-dev/bext-scheduler/config"
	"github.com/bext-dev/bext-scheduler/jobs"
)

// composeFile is the part of the Compose specification docker-compose.yml
// uses. Decoding with KnownFields makes a misspelt key (depend_on) an error
// here, since no engine is around to reject it.
type composeFile struct {
	Name       string                    `yaml:"name"`
	Services   map[string]composeService `yaml:"services"`
	Volumes    map[string]any            `yaml:"volumes"`
	Extensions map[string]any            `yaml:",inline"` // x-* anchors
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   yaml.Node         `yaml:"depends_on"` // a list, or a map of conditions
	Ports       []string          `yaml:"ports"`
	Healthcheck *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Timeout  string   `yaml:"timeout"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
	Init            *bool  `yaml:"init"`
	StopGracePeriod string `yaml:"stop_grace_period"`
	Restart         string `yaml:"restart"`
}

type composeBuild struct {
	Context    string            `yaml:"context"`
	Dockerfile string            `yaml:"dockerfile"`
	Args       map[string]string `yaml:"args"`
}

// dependsOn lists the services s depends on, in either spelling.
func (s composeService) dependsOn(t *testing.T) []string {
	t.Helper()
	var names []string
	switch s.DependsOn.Kind {
	case 0:
	case yaml.SequenceNode:
		if err := s.DependsOn.Decode(&names); err != nil {
			t.Fatalf("depends_on: %v", err)
		}
	case yaml.MappingNode:
		var m map[string]any
		if err := s.DependsOn.Decode(&m); err != nil {
			t.Fatalf("depends_on: %v", err)
		}
		for k := range m {
			names = append(names, k)
		}
	default:
		t.Fatalf("depends_on at line %d is neither a list nor a map", s.DependsOn.Line)
	}
	return names
}

// mount is one short-syntax volume entry, "source:target[:mode]".
type mount struct{ source, target, mode string }

func (m mount) bind() bool {
	return strings.HasPrefix(m.source, ".") || strings.HasPrefix(m.source, "/")
}

func (s composeService) mounts(t *testing.T) []mount {
	t.Helper()
	var out []mount
	for _, v := range s.Volumes {
		f := strings.Split(v, ":")
		if len(f) < 2 || len(f) > 3 {
			t.Fatalf("volume %q: want source:target[:mode]", v)
		}
		m := mount{source: f[0], target: f[1]}
		if len(f) == 3 {
			m.mode = f[2]
		}
		out = append(out, m)
	}
	return out
}

// flag returns the value of --name in the service's command.
func (s composeService) flag(name string) string {
	for i, a := range s.Command {
		if a == name && i+1 < len(s.Command) {
			return s.Command[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader([]byte(readRepoFile(t, "docker-compose.yml"))))
	dec.KnownFields(true)
	var c composeFile
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for k := range c.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Fatalf("docker-compose.yml: unknown top-level key %q", k)
		}
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	return c
}

// nodes returns the bext-scheduler services: those that mount the config
// at the path the image reads it from.
func nodes(t *testing.T, c composeFile, configPath string) map[string]composeService {
	t.Helper()
	out := map[string]composeService{}
	for name, s := range c.Services {
		for _, m := range s.mounts(t) {
			if m.target == configPath {
				out[name] = s
			}
		}
	}
	return out
}

var interpRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-([^}]*))?\}`)

// interpolate expands ${VAR} and ${VAR:-default} as Compose does, from env.
func interpolate(t *testing.T, s string, env map[string]string) string {
	t.Helper()
	return interpRE.ReplaceAllStringFunc(s, func(m string) string {
		g := interpRE.FindStringSubmatch(m)
		v, ok := env[g[1]]
		switch {
		case g[2] == "" && !ok:
			t.Errorf("compose variable %s has no default and is not set", g[1])
		case strings.HasPrefix(g[2], ":-") && v == "", strings.HasPrefix(g[2], "-") && !ok:
			return g[3]
		}
		return v
	})
}

func TestComposeReferencesExist(t *testing.T) {
	c := loadCompose(t)
	for name, s := range c.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %s has neither image nor build", name)
		}
		for _, d := range s.dependsOn(t) {
			if _, ok := c.Services[d]; !ok {
				t.Errorf("service %s depends on %q, which is not a service", name, d)
			}
		}
		for _, m := range s.mounts(t) {
			if !m.bind() {
				if _, ok := c.Volumes[m.source]; !ok {
					t.Errorf("service %s mounts volume %q, which is not declared under volumes:", name, m.source)
				}
				continue
			}
			fi, err := os.Stat(repo(m.source))
			if err != nil {
				t.Errorf("service %s mounts %s, which is not in the repository: %v", name, m.source, err)
				continue
			}
			if !fi.Mode().IsRegular() {
				t.Errorf("service %s mounts %s: want a file", name, m.source)
			}
			if m.mode != "ro" {
				t.Errorf("service %s mounts %s read-write; config files should be :ro", name, m.source)
			}
		}
		if s.Build != nil {
			if _, err := os.Stat(repo(s.Build.Context + "/Dockerfile")); err != nil {
				t.Errorf("service %s builds %s, which has no Dockerfile: %v", name, s.Build.Context, err)
			}
		}
	}
}

func TestComposeNodesMatchTheImage(t *testing.T) {
	c := loadCompose(t)
	df := loadDockerfile(t)
	ns := nodes(t, c, df.env["BEXT_CONFIG"])
	if len(ns) != 3 {
		t.Fatalf("want 3 bext-scheduler nodes mounting %s, got %d", df.env["BEXT_CONFIG"], len(ns))
	}
	shutdownGrace := composeConfig(t, c, df, "redis").ShutdownGrace.Duration
	ids := map[string]string{}
	for name, s := range ns {
		if s.Build == nil || s.Build.Context != "." {
			t.Errorf("node %s is not built from this repository's Dockerfile", name)
		}
		if len(s.Command) == 0 || s.Command[0] != "run" {
			t.Errorf("node %s: command %q does not start with run", name, s.Command)
		}
		id := s.flag("--node-id")
		if id == "" {
			t.Errorf("node %s has no --node-id: every node would be named after its container id", name)
		} else if other, dup := ids[id]; dup {
			t.Errorf("nodes %s and %s share node id %q", name, other, id)
		}
		ids[id] = name
		host, port, err := net.SplitHostPort(s.flag("--listen"))
		if err != nil {
			t.Errorf("node %s: --listen %q: %v", name, s.flag("--listen"), err)
		} else if host != "0.0.0.0" || !slices.Contains(df.expose, port) {
			t.Errorf("node %s listens on %s:%s; want 0.0.0.0 and the EXPOSEd port %v", name, host, port, df.expose)
		}
		grace, err := time.ParseDuration(s.StopGracePeriod)
		if err != nil || grace <= shutdownGrace+jobs.DefaultKillGrace {
			t.Errorf("node %s: stop_grace_period %q must exceed shutdown_grace %v + the job kill grace %v",
				name, s.StopGracePeriod, shutdownGrace, jobs.DefaultKillGrace)
		}
		// tini in the image reaps killed jobs' children; init: true would
		// put a second init in front of it.
		if s.Init != nil && *s.Init && df.tini {
			t.Errorf("node %s sets init: true but the image's ENTRYPOINT is tini already", name)
		}
		if s.Init == nil && !df.tini {
			t.Errorf("node %s: the image has no init; set init: true so killed jobs' children are reaped", name)
		}
		for _, key := range []string{"REDIS_URL", "PG_URL"} {
			raw := interpolate(t, s.Environment[key], nil)
			u, err := url.Parse(raw)
			if err != nil || u.Hostname() == "" {
				t.Errorf("node %s: %s = %q is not a URL with a host", name, key, raw)
				continue
			}
			if _, ok := c.Services[u.Hostname()]; !ok {
				t.Errorf("node %s: %s points at host %q, which is not a service", name, key, u.Hostname())
			}
			if !slices.Contains(s.dependsOn(t), u.Hostname()) {
				t.Errorf("node %s does not depend on %s, which its %s names", name, u.Hostname(), key)
			}
		}
	}
}

// composeConfig loads the config the nodes mount, with the environment
// compose gives them and BEXT_BACKEND set as the operator would.
func composeConfig(t *testing.T, c composeFile, df dockerfile, backend string) *config.Config {
	t.Helper()
	env := nodeEnv(t, c, df, backend)
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(repo(nodeConfigSource(t, c, df)))
	if err != nil {
		t.Fatalf("the compose nodes' config with BEXT_BACKEND=%s: %v", backend, err)
	}
	return cfg
}

func nodeConfigSource(t *testing.T, c composeFile, df dockerfile) string {
	t.Helper()
	var src string
	for name, s := range nodes(t, c, df.env["BEXT_CONFIG"]) {
		for _, m := range s.mounts(t) {
			if m.target != df.env["BEXT_CONFIG"] {
				continue
			}
			if src != "" && m.source != src {
				t.Fatalf("node %s mounts %s, another node %s: the nodes must share one config", name, m.source, src)
			}
			src = m.source
		}
	}
	return src
}

// nodeEnv is the environment the first node gets, interpolated with the
// operator's BEXT_BACKEND. Every node must get the same one.
func nodeEnv(t *testing.T, c composeFile, df dockerfile, backend string) map[string]string {
	t.Helper()
	var env map[string]string
	names := make([]string, 0)
	ns := nodes(t, c, df.env["BEXT_CONFIG"])
	for name := range ns {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		got := map[string]string{}
		for k, v := range ns[name].Environment {
			got[k] = interpolate(t, v, map[string]string{"BEXT_BACKEND": backend})
		}
		if env != nil && fmt.Sprint(env) != fmt.Sprint(got) {
			t.Fatalf("node %s's environment differs from %s's", name, names[0])
		}
		env = got
	}
	return env
}

// TestComposeConfigValidates runs the real binary's validate on the nodes'
// config, once per backend the one-line switch selects.
func TestComposeConfigValidates(t *testing.T) {
	c := loadCompose(t)
	df := loadDockerfile(t)
	src := nodeConfigSource(t, c, df)
	for _, backend := range []string{"redis", "pg"} {
		t.Run(backend, func(t *testing.T) {
			env := nodeEnv(t, c, df, backend)
			r := runBin(t, env, "validate", "--config", repo(src))
			if r.Code != 0 {
				t.Fatalf("validate exit %d with BEXT_BACKEND=%s:\n%s", r.Code, backend, r.Stderr)
			}
			if want := "backend " + backend; !strings.Contains(r.Stdout, want) {
				t.Errorf("validate says %q, want %q", r.Stdout, want)
			}
			r = runBin(t, env, "next", "-n", "1", "--config", repo(src))
			if r.Code != 0 || !strings.Contains(r.Stdout, "require_global: cluster-wide lock") {
				t.Errorf("next (exit %d) shows no cluster-wide require_global schedule:\n%s%s", r.Code, r.Stdout, r.Stderr)
			}
		})
	}
	// With BEXT_BACKEND unset in the operator's shell, compose's default applies.
	env := map[string]string{}
	for k, v := range c.Services["node-a"].Environment {
		env[k] = interpolate(t, v, nil)
	}
	if env["BEXT_BACKEND"] != "redis" {
		t.Errorf("BEXT_BACKEND defaults to %q, want redis", env["BEXT_BACKEND"])
	}
}

// prometheusConfig is the part of prometheus.yml the checks read.
type prometheusConfig struct {
	Global        map[string]string `yaml:"global"`
	RuleFiles     []string          `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func TestPrometheusScrapesTheNodes(t *testing.T) {
	c := loadCompose(t)
	df := loadDockerfile(t)
	prom, ok := c.Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service")
	}
	configFile := "/etc/prometheus/prometheus.yml"
	for _, a := range prom.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			configFile = v
		}
	}
	mounted := map[string]string{} // container path → repository path
	for _, m := range prom.mounts(t) {
		mounted[m.target] = m.source
	}
	src, ok := mounted[configFile]
	if !ok {
		t.Fatalf("prometheus reads %s, which no volume mounts", configFile)
	}
	var pc prometheusConfig
	dec := yaml.NewDecoder(strings.NewReader(readRepoFile(t, src)))
	dec.KnownFields(true)
	if err := dec.Decode(&pc); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	if len(pc.RuleFiles) == 0 {
		t.Errorf("%s loads no rule files", src)
	}
	for _, rf := range pc.RuleFiles {
		host, ok := mounted[rf]
		if !ok {
			t.Errorf("%s loads rules from %s, which no volume of the prometheus service mounts", src, rf)
		} else if host != "./deploy/alerts.yml" {
			t.Errorf("%s is mounted from %s, want ./deploy/alerts.yml (the rules the tests check)", rf, host)
		}
	}

	want := map[string]bool{}
	for name, s := range nodes(t, c, df.env["BEXT_CONFIG"]) {
		_, port, _ := net.SplitHostPort(s.flag("--listen"))
		want[net.JoinHostPort(name, port)] = true
	}
	got := map[string]bool{}
	for _, sc := range pc.ScrapeConfigs {
		if sc.JobName != "bext-scheduler" {
			continue
		}
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("metrics_path %q: the nodes serve /metrics", sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				got[tg] = true
			}
		}
	}
	if fmt.Sprint(sortedKeys(got)) != fmt.Sprint(sortedKeys(want)) {
		t.Errorf("job bext-scheduler scrapes %v; the nodes listen at %v (the alert rules expect job=\"bext-scheduler\")",
			sortedKeys(got), sortedKeys(want))
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package helmtest_test

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/bext-dev/bext-scheduler/deploy/helmtest"
)

// A release of the chart as an operator installs it, and the environment
// its Secret gives the pods.
type chartCase struct {
	name    string
	release helmtest.Release
	// env is the Secret the operator made (existingSecret); nil when the
	// chart makes it, and then its own data is used.
	env      map[string]string
	replicas int32
	monitor  bool // ServiceMonitor and PrometheusRule rendered
}

var chartCases = []chartCase{
	{
		name:     "defaults",
		release:  helmtest.Release{Name: "bext", Namespace: "jobs"},
		replicas: 2,
	},
	{
		name: "production",
		release: helmtest.Release{Name: "bext-scheduler", Namespace: "bext",
			ValueFiles: []string{filepath.Join(helmtest.Root(), "deploy", "helm", "production.values.yaml")}},
		// The keys production.values.yaml tells the operator to put in
		// bext-scheduler-env.
		env: map[string]string{
			"PG_URL":              "postgres://bext@db.internal:5432/bext?sslmode=verify-full",
			"BEXT_API_READ_TOKEN": "read-secret",
			"WARM_TOKEN":          "warm-secret",
		},
		replicas: 3,
		monitor:  true,
	},
}

// TestChartRenders renders the chart for its defaults and for the
// production values, decodes every object strictly into the Kubernetes
// API types, and checks the pod against what the binary accepts: its
// flags, its config (the built binary's validate on the rendered
// ConfigMap, with the Secret's environment), its HTTP port and probes.
func TestChartRenders(t *testing.T) {
	t.Parallel()
	flags := runFlags(t)
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ms, err := helmtest.Render(tc.release)
			if err != nil {
				t.Fatal(err)
			}
			r := decodeAll(t, ms)
			checkObjects(t, tc, r, flags)
		})
	}
}

// TestChartLints runs Helm's own linter (`helm lint --strict`) on the
// chart with each case's values: a warning fails too.
func TestChartLints(t *testing.T) {
	t.Parallel()
	for _, tc := range chartCases {
		vals := map[string]any{}
		for _, f := range tc.release.ValueFiles {
			v, err := chartutil.ReadValuesFile(f)
			if err != nil {
				t.Fatal(err)
			}
			vals = chartutil.MergeTables(v.AsMap(), vals)
		}
		l := lint.All(helmtest.ChartDir(), vals, tc.release.Namespace, true)
		for _, m := range l.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("%s: helm lint: %s", tc.name, m)
			}
		}
	}
}

// TestChartRefuses: what validate cannot know (it sees no pod spec) the
// chart refuses at render time, naming the value.
func TestChartRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"terminationGraceExtraSeconds": 10}, "terminationGraceExtraSeconds is 10: it must be above 10"},
		{map[string]any{"shutdownGraceSeconds": 0}, "shutdownGraceSeconds is 0"},
		{map[string]any{"locking": map[string]any{"backend": "memory"}}, "locking.backend memory with replicaCount 2"},
		{map[string]any{"locking": map[string]any{"backend": "pg"}}, "secretEnv.PG_URL is empty: locking.backend pg reads its URL from it"},
	} {
		_, err := helmtest.Render(helmtest.Release{Name: "bext", Namespace: "jobs", Values: tc.values})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %v: got %v, want an error containing %q", tc.values, err, tc.want)
		}
	}
	// One node on the memory backend is a valid (if lonely) install.
	if _, err := helmtest.Render(helmtest.Release{Name: "bext", Namespace: "jobs", Values: map[string]any{
		"replicaCount": 1, "locking": map[string]any{"backend": "memory"}}}); err != nil {
		t.Errorf("one replica on memory: %v", err)
	}
}

// TestChartAlertsAreDeployAlerts: the chart's PrometheusRule reads its
// copy of the rules (a chart cannot reach files outside its directory);
// deploy/alerts.yml stays the one source.
func TestChartAlertsAreDeployAlerts(t *testing.T) {
	t.Parallel()
	src := readFile(t, filepath.Join(helmtest.Root(), "deploy", "alerts.yml"))
	cp := readFile(t, filepath.Join(helmtest.ChartDir(), "files", "alerts.yml"))
	if src != cp {
		t.Errorf("deploy/helm/bext-scheduler/files/alerts.yml differs from deploy/alerts.yml: cp deploy/alerts.yml deploy/helm/bext-scheduler/files/alerts.yml")
	}
}

// TestPlainManifestsCurrent: deploy/kubernetes/ is what the chart renders.
func TestPlainManifestsCurrent(t *testing.T) {
	t.Parallel()
	want, err := helmtest.PlainManifests()
	if err != nil {
		t.Fatal(err)
	}
	got := readFile(t, filepath.Join(helmtest.Root(), filepath.FromSlash(helmtest.PlainManifestsFile)))
	if got != want {
		t.Fatalf("%s is stale: run `make k8s-manifests`", helmtest.PlainManifestsFile)
	}
	// And it holds what the chart's default install does, less the Secret.
	r := decodeAll(t, []helmtest.Manifest{{Source: helmtest.PlainManifestsFile, YAML: got}})
	if r.secret != nil {
		t.Errorf("%s holds a Secret: the operator's own is meant (existingSecret)", helmtest.PlainManifestsFile)
	}
	tc := chartCase{name: "plain", release: helmtest.PlainRelease, replicas: 2,
		env: map[string]string{"REDIS_URL": "redis://redis:6379/0", "BEXT_API_READ_TOKEN": "read-secret"}}
	checkObjects(t, tc, r, runFlags(t))
}

// nodeConfig is what the checks read from the rendered TOML; the binary's
// validate checks the rest.
type nodeConfig struct {
	ShutdownGrace string `toml:"shutdown_grace"`
	HTTP          struct {
		Listen    string   `toml:"listen"`
		ReadToken string   `toml:"read_token"`
		Hosts     []string `toml:"hosts"`
	} `toml:"http"`
}

func checkObjects(t *testing.T, tc chartCase, r rendered, flags []string) {
	t.Helper()
	ns := tc.release.Namespace
	pod := r.dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if got := r.dep.Spec.Replicas; got == nil || *got != tc.replicas {
		t.Errorf("replicas = %v, want %d", got, tc.replicas)
	}

	// The command line: `run` and flags the binary has.
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("args %q: want the run subcommand first", c.Args)
	}
	args := map[string]string{}
	for _, a := range c.Args[1:] {
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("arg %q: want --flag=value", a)
			continue
		}
		if !slices.Contains(flags, name) {
			t.Errorf("arg %q: `bext-scheduler run` has no --%s (it has %v)", a, name, flags)
		}
		args[name] = val
	}

	// The node id: the pod's name, through the downward API. Kubernetes
	// expands $(VAR) in args only from the container's own env list.
	if args["node-id"] != "$(POD_NAME)" {
		t.Errorf("--node-id=%q, want $(POD_NAME)", args["node-id"])
	}
	if e := findEnv(c.Env, "POD_NAME"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env POD_NAME = %+v, want the downward API's metadata.name", e)
	}

	// The config: the ConfigMap's key, mounted read-only where --config points.
	cfgPath := args["config"]
	if cfgPath == "" {
		t.Fatal("no --config: the image's default config path is not the ConfigMap")
	}
	mount := findMount(c.VolumeMounts, path.Dir(cfgPath))
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("%s: no read-only mount there: %+v", path.Dir(cfgPath), c.VolumeMounts)
	}
	vol := findVolume(pod.Volumes, mount.Name)
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != r.cm.Name {
		t.Fatalf("volume %q is not the ConfigMap %q: %+v", mount.Name, r.cm.Name, vol)
	}
	toml1, ok := r.cm.Data[path.Base(cfgPath)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s (has %v)", r.cm.Name, path.Base(cfgPath), keys(r.cm.Data))
	}
	var cfg nodeConfig
	if err := toml.Unmarshal([]byte(toml1), &cfg); err != nil {
		t.Fatalf("the rendered config: %v\n%s", err, toml1)
	}

	// The environment: the Secret, whole.
	secretName := tc.release.Values["existingSecret"]
	env := tc.env
	if r.secret != nil {
		secretName = r.secret.Name
		env = map[string]string{}
		for k, v := range r.secret.StringData {
			env[k] = v
		}
		for k, v := range r.secret.Data {
			env[k] = string(v)
		}
		if env["BEXT_API_READ_TOKEN"] == "" {
			t.Error("the chart's Secret has no BEXT_API_READ_TOKEN: the API's reads would be open on the pod network")
		}
	}
	if secretName == nil || secretName == "" {
		secretName = findExistingSecret(t, tc)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != secretName {
		t.Errorf("envFrom = %+v, want the Secret %v", c.EnvFrom, secretName)
	}
	validate(t, toml1, env)

	// The port: one, named http, the one the config listens on, on every
	// interface (the kubelet and the Service reach the pod's address).
	host, port, err := net.SplitHostPort(cfg.HTTP.Listen)
	if err != nil {
		t.Fatalf("[http] listen %q: %v", cfg.HTTP.Listen, err)
	}
	if host == "localhost" || (net.ParseIP(host) != nil && net.ParseIP(host).IsLoopback()) {
		t.Errorf("[http] listen %q is loopback: probes and the Service cannot reach it", cfg.HTTP.Listen)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || strconv.Itoa(int(c.Ports[0].ContainerPort)) != port {
		t.Errorf("container ports %+v, want one named http on %s", c.Ports, port)
	}
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "http" {
			t.Errorf("probe for %s: %+v, want httpGet %s on port http", name, p, name)
		}
	}
	if len(r.svc.Spec.Ports) != 1 || r.svc.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("Service ports %+v, want one targeting http", r.svc.Spec.Ports)
	}

	// The Host check: the Service's names reach the API and page.
	for _, n := range []string{r.svc.Name, r.svc.Name + "." + ns + ".svc", r.svc.Name + "." + ns + ".svc.cluster.local"} {
		if !slices.Contains(cfg.HTTP.Hosts, n) {
			t.Errorf("[http] hosts %q lacks %q: the API would answer 421 through the Service", cfg.HTTP.Hosts, n)
		}
	}

	// Selectors: the Service, the PDB and the Deployment pick these pods.
	labels := r.dep.Spec.Template.Labels
	for what, sel := range map[string]map[string]string{
		"Deployment": r.dep.Spec.Selector.MatchLabels, "Service": r.svc.Spec.Selector, "PodDisruptionBudget": r.pdb.Spec.Selector.MatchLabels,
	} {
		if len(sel) == 0 {
			t.Errorf("%s selects every pod", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, the pods have %q", what, k, v, labels[k])
			}
		}
	}
	if r.pdb.Spec.MaxUnavailable == nil || r.pdb.Spec.MaxUnavailable.IntValue() < 1 || int32(r.pdb.Spec.MaxUnavailable.IntValue()) >= tc.replicas {
		t.Errorf("PodDisruptionBudget maxUnavailable %v: want at least 1 and fewer than the %d replicas", r.pdb.Spec.MaxUnavailable, tc.replicas)
	}

	// A lock backend outage makes every pod unready: a drain must not hang on it.
	if p := r.pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
		t.Errorf("PodDisruptionBudget unhealthyPodEvictionPolicy %v, want AlwaysAllow", p)
	}

	// Shutdown: the pod outlives shutdown_grace + 10s.
	grace, err := time.ParseDuration(cfg.ShutdownGrace)
	if err != nil {
		t.Fatalf("shutdown_grace %q: %v", cfg.ShutdownGrace, err)
	}
	if tg := pod.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= grace+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v, want above shutdown_grace %s + 10s", tg, grace)
	}

	checkSecurity(t, pod, c)

	if got := r.sm != nil && r.rule != nil; got != tc.monitor || (r.sm == nil) != (r.rule == nil) {
		t.Errorf("ServiceMonitor %v, PrometheusRule %v; want both %v", r.sm != nil, r.rule != nil, tc.monitor)
	}
	if r.sm != nil {
		if r.sm.Spec.JobLabel != "app.kubernetes.io/name" || r.svc.Labels["app.kubernetes.io/name"] != "bext-scheduler" {
			t.Errorf("ServiceMonitor jobLabel %q with Service label %q: deploy/alerts.yml wants job=\"bext-scheduler\"",
				r.sm.Spec.JobLabel, r.svc.Labels["app.kubernetes.io/name"])
		}
		if len(r.sm.Spec.Endpoints) != 1 || r.sm.Spec.Endpoints[0].Port != "http" || r.sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoints %+v, want /metrics on http", r.sm.Spec.Endpoints)
		}
	}
	if r.rule != nil {
		var want ruleFile
		if err := yaml.UnmarshalStrict([]byte(readFile(t, filepath.Join(helmtest.Root(), "deploy", "alerts.yml"))), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r.rule.Spec, want) {
			t.Error("PrometheusRule's groups are not deploy/alerts.yml's")
		}
	}
}

// checkSecurity: Kubernetes' "restricted" Pod Security Standard, and a
// writable /tmp on the read-only root.
func checkSecurity(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	ps, cs := pod.SecurityContext, c.SecurityContext
	if ps == nil || cs == nil {
		t.Fatal("no securityContext")
	}
	if !isTrue(ps.RunAsNonRoot) && !isTrue(cs.RunAsNonRoot) {
		t.Error("runAsNonRoot is not set")
	}
	if (ps.RunAsUser != nil && *ps.RunAsUser == 0) || (cs.RunAsUser != nil && *cs.RunAsUser == 0) {
		t.Error("runAsUser 0")
	}
	if cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if !isTrue(cs.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if cs.Capabilities == nil || !reflect.DeepEqual(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(cs.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v, want drop ALL and nothing added", cs.Capabilities)
	}
	for what, sc := range map[string]*corev1.SeccompProfile{"pod": ps.SeccompProfile, "container": cs.SeccompProfile} {
		if sc != nil && sc.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s seccompProfile %s", what, sc.Type)
		}
	}
	if ps.SeccompProfile == nil && cs.SeccompProfile == nil {
		t.Error("no seccompProfile: restricted wants RuntimeDefault")
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC || isTrue(cs.Privileged) {
		t.Error("host namespaces or privileged")
	}
	for _, dir := range []string{"/tmp", "/var/lib/bext"} {
		m := findMount(c.VolumeMounts, dir)
		if m == nil || m.ReadOnly || findVolume(pod.Volumes, m.Name) == nil || findVolume(pod.Volumes, m.Name).EmptyDir == nil {
			t.Errorf("%s: want a writable emptyDir there (the root is read-only; command jobs start in /var/lib/bext)", dir)
		}
	}
}

// validate runs the built binary's validate on the rendered config with
// exactly env (and the pod's POD_NAME), as the pod would see it; and
// without env, to show validate reads it.
func validate(t *testing.T, config string, env map[string]string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "bext.config.toml")
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(env map[string]string) (string, error) {
		cmd := exec.Command(bin, "validate", "--config", file)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "POD_NAME=bext-7d9c-x2v"}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(env); err != nil {
		t.Errorf("bext-scheduler validate on the rendered ConfigMap: %v\n%s\n%s", err, out, config)
	}
	out, err := run(nil)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("validate without the Secret's environment: %v (want exit 2 naming the missing variable)\n%s", err, out)
	}
}

var flagRE = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z][a-z-]*)\b`)

// runFlags is every flag `bext-scheduler run --help` lists.
func runFlags(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(bin, "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("run --help: %v\n%s", err, out)
	}
	var flags []string
	for _, m := range flagRE.FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	if !slices.Contains(flags, "config") || !slices.Contains(flags, "node-id") {
		t.Fatalf("run --help lists %v: the pattern no longer reads it\n%s", flags, out)
	}
	return flags
}

// findExistingSecret reads existingSecret from the case's value files.
func findExistingSecret(t *testing.T, tc chartCase) string {
	t.Helper()
	for _, f := range slices.Backward(tc.release.ValueFiles) {
		var v struct {
			ExistingSecret string `json:"existingSecret"`
		}
		if err := yaml.Unmarshal(bytes.TrimSpace([]byte(readFile(t, f))), &v); err != nil {
			t.Fatal(err)
		}
		if v.ExistingSecret != "" {
			return v.ExistingSecret
		}
	}
	t.Fatal("no Secret rendered and no existingSecret in the values")
	return ""
}

// TestChartMatchesTheImage: the pod runs the Dockerfile's image as it is
// built: its user, and an entrypoint that ends in the binary, so the
// Deployment's args start at the subcommand.
func TestChartMatchesTheImage(t *testing.T) {
	t.Parallel()
	df := readFile(t, filepath.Join(helmtest.Root(), "Dockerfile"))
	user := regexp.MustCompile(`(?m)^USER (\d+):(\d+)$`).FindStringSubmatch(df)
	entry := regexp.MustCompile(`(?m)^ENTRYPOINT \[(.*)\]$`).FindStringSubmatch(df)
	if user == nil || entry == nil {
		t.Fatal("the Dockerfile has no USER uid:gid or no exec-form ENTRYPOINT: this test reads those")
	}
	if !strings.HasSuffix(entry[1], `"/usr/local/bin/bext-scheduler"`) {
		t.Errorf("the image's ENTRYPOINT [%s] does not end in the binary: the chart's args would not reach it", entry[1])
	}
	ms, err := helmtest.Render(chartCases[0].release)
	if err != nil {
		t.Fatal(err)
	}
	sc := decodeAll(t, ms).dep.Spec.Template.Spec.SecurityContext
	if sc.RunAsUser == nil || strconv.FormatInt(*sc.RunAsUser, 10) != user[1] ||
		sc.RunAsGroup == nil || strconv.FormatInt(*sc.RunAsGroup, 10) != user[2] {
		t.Errorf("the pod runs as %v:%v, the image as %s:%s", sc.RunAsUser, sc.RunAsGroup, user[1], user[2])
	}
}

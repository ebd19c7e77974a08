// Package helmtest renders the bext-scheduler Helm chart
// (deploy/helm/bext-scheduler) with the Helm SDK, for the chart's tests and
// for the generator of the plain manifests in deploy/kubernetes/. It is a
// module of its own so that the node's module never links Helm.
package helmtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// ErrRender is returned when the chart does not load or render.
var ErrRender = errors.New("helmtest: chart does not render")

// Release names what `helm install` would be given.
type Release struct {
	Name, Namespace string
	// ValueFiles are merged in order, as helm's -f; then Values, as --set.
	ValueFiles []string
	Values     map[string]any
}

// PlainRelease is what deploy/kubernetes/ holds: the chart's defaults,
// except that the Secret is the operator's (no token is generated into a
// file under version control).
var PlainRelease = Release{
	Name:      "bext-scheduler",
	Namespace: "default",
	Values:    map[string]any{"existingSecret": "bext-scheduler-env"},
}

// PlainManifestsFile is where the plain manifests live, relative to the
// repository root.
const PlainManifestsFile = "deploy/kubernetes/bext-scheduler.yaml"

// Root is the repository's root directory: the nearest directory at or
// above the working directory whose go.mod declares the main module (this
// one has its own go.mod). Not runtime.Caller, whose file names -trimpath
// rewrites.
func Root() string {
	dir, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("helmtest: the repository root: %v", err))
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && mainModule(b) {
			return d
		}
		if filepath.Dir(d) == d {
			panic("helmtest: no go.mod of github.com/bext-dev/bext-scheduler at or above " + dir)
		}
	}
}

// mainModule reports whether a go.mod declares the main module.
func mainModule(gomod []byte) bool {
	for _, l := range strings.Split(string(gomod), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == "github.com/bext-dev/bext-scheduler"
		}
	}
	return false
}

// ChartDir is the chart's directory.
func ChartDir() string { return filepath.Join(Root(), "deploy", "helm", "bext-scheduler") }

// Render renders the chart as `helm template` does (no cluster: lookup
// finds nothing) and returns the manifests, each as "# Source: path" then
// its YAML, in template-path order; templates rendering to nothing are left
// out.
func Render(r Release) ([]Manifest, error) {
	ch, err := loader.Load(ChartDir())
	if err != nil {
		return nil, fmt.Errorf("%w: loading %s: %w", ErrRender, ChartDir(), err)
	}
	vals := map[string]any{}
	for _, f := range r.ValueFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrRender, f, err)
		}
		vals = chartutil.MergeTables(v.AsMap(), vals)
	}
	vals = chartutil.MergeTables(deepCopy(r.Values), vals)
	opts := chartutil.ReleaseOptions{Name: r.Name, Namespace: r.Namespace, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(ch, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("%w: values: %w", ErrRender, err)
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	var ms []Manifest
	for path, body := range out {
		if strings.TrimSpace(body) == "" || strings.HasSuffix(path, "NOTES.txt") {
			continue
		}
		ms = append(ms, Manifest{Source: path, YAML: body})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Source < ms[j].Source })
	return ms, nil
}

// Manifest is one rendered template.
type Manifest struct {
	Source string // the template's path in the chart, e.g. bext-scheduler/templates/service.yaml
	YAML   string
}

// Join writes manifests as one multi-document YAML stream, as `helm
// template` prints them.
func Join(ms []Manifest) string {
	var b strings.Builder
	b.WriteString("# Rendered from deploy/helm/bext-scheduler by `make k8s-manifests`; do not edit.\n")
	for _, m := range ms {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Source, strings.TrimSpace(m.YAML))
	}
	return b.String()
}

// PlainManifests renders PlainRelease as deploy/kubernetes/ holds it.
func PlainManifests() (string, error) {
	ms, err := Render(PlainRelease)
	if err != nil {
		return "", err
	}
	return Join(ms), nil
}

// WritePlainManifests regenerates deploy/kubernetes/.
func WritePlainManifests() error {
	s, err := PlainManifests()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(Root(), filepath.FromSlash(PlainManifestsFile)), []byte(s), 0o644)
}

// deepCopy keeps MergeTables from writing into the caller's maps (and into
// PlainRelease's).
func deepCopy(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopy(sub)
		}
		c[k] = v
	}
	return c
}

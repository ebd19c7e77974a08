package helmtest_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"

	"github.com/bext-dev/bext-scheduler/deploy/helmtest"
)

// rendered is a release's objects, each decoded strictly.
type rendered struct {
	cm     *corev1.ConfigMap
	secret *corev1.Secret
	dep    *appsv1.Deployment
	svc    *corev1.Service
	pdb    *policyv1.PodDisruptionBudget
	sm     *serviceMonitor
	rule   *prometheusRule
}

// The Prometheus Operator's kinds, as far as the chart writes them; a
// field the chart writes that is not here fails the strict decode, so a
// misspelling cannot pass.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		JobLabel  string               `json:"jobLabel"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            ruleFile          `json:"spec"`
}

type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert       string            `json:"alert,omitempty"`
			Record      string            `json:"record,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// k8sDecoder is apimachinery's strict YAML decoder over the core, apps and
// policy types: unknown or duplicate fields and wrong case are errors.
var k8sDecoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Yaml: true, Strict: true})
}()

func decodeAll(t *testing.T, ms []helmtest.Manifest) rendered {
	t.Helper()
	var r rendered
	once := func(kind string, have bool) {
		if have {
			t.Errorf("two %s objects", kind)
		}
	}
	for _, m := range ms {
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(m.YAML, -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			where := m.Source + " document " + strconv.Itoa(i)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if tm.APIVersion == "monitoring.coreos.com/v1" {
				var err error
				switch tm.Kind {
				case "ServiceMonitor":
					once(tm.Kind, r.sm != nil)
					r.sm = &serviceMonitor{}
					err = yaml.UnmarshalStrict([]byte(doc), r.sm)
				case "PrometheusRule":
					once(tm.Kind, r.rule != nil)
					r.rule = &prometheusRule{}
					err = yaml.UnmarshalStrict([]byte(doc), r.rule)
				default:
					t.Fatalf("%s: unexpected %s %s", where, tm.APIVersion, tm.Kind)
				}
				if err != nil {
					t.Fatalf("%s: %s: %v", where, tm.Kind, err)
				}
				continue
			}
			obj, _, err := k8sDecoder.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				once("ConfigMap", r.cm != nil)
				r.cm = o
			case *corev1.Secret:
				once("Secret", r.secret != nil)
				r.secret = o
			case *appsv1.Deployment:
				once("Deployment", r.dep != nil)
				r.dep = o
			case *corev1.Service:
				once("Service", r.svc != nil)
				r.svc = o
			case *policyv1.PodDisruptionBudget:
				once("PodDisruptionBudget", r.pdb != nil)
				r.pdb = o
			default:
				t.Fatalf("%s: unexpected %T", where, obj)
			}
		}
	}
	if r.cm == nil || r.dep == nil || r.svc == nil || r.pdb == nil {
		t.Fatalf("want a ConfigMap, a Deployment, a Service and a PodDisruptionBudget; got %+v", r)
	}
	return r
}

func findEnv(env []corev1.EnvVar, name string) *corev1.EnvVar {
	for i := range env {
		if env[i].Name == name {
			return &env[i]
		}
	}
	return nil
}

func findMount(ms []corev1.VolumeMount, dir string) *corev1.VolumeMount {
	for i := range ms {
		if ms[i].MountPath == dir {
			return &ms[i]
		}
	}
	return nil
}

func findVolume(vs []corev1.Volume, name string) *corev1.Volume {
	for i := range vs {
		if vs[i].Name == name {
			return &vs[i]
		}
	}
	return nil
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func isTrue(b *bool) bool { return b != nil && *b }

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

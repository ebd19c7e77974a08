package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// receiver is an OTLP/HTTP trace receiver: every span of every request
// it decodes goes on spans, with its resource's attributes; pings go on
// pings (their traceparent header).
type receiver struct {
	srv      *httptest.Server
	spans    chan recvSpan
	pings    chan string
	mu       sync.Mutex
	requests int
	errs     []string
}

type recvSpan struct {
	span     *tracepb.Span
	resource map[string]string
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{spans: make(chan recvSpan, 1000), pings: make(chan string, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/ping/") {
			select {
			case r.pings <- req.Header.Get("traceparent"):
			default:
			}
			return
		}
		r.mu.Lock()
		r.requests++
		r.mu.Unlock()
		body, err := io.ReadAll(req.Body)
		var msg coltrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &msg)
		}
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || err != nil {
			r.mu.Lock()
			r.errs = append(r.errs, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
			r.mu.Unlock()
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		for _, rs := range msg.GetResourceSpans() {
			res := attrs(rs.GetResource().GetAttributes())
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					select {
					case r.spans <- recvSpan{span: sp, resource: res}:
					default:
					}
				}
			}
		}
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) got() (requests int, errs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, r.errs
}

// attrs flattens OTLP attributes to strings (ints and doubles in their
// protobuf text form), enough to compare.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(v.GetBoolValue())
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = strconv.FormatFloat(v.GetDoubleValue(), 'g', -1, 64)
		}
	}
	return m
}

// traceConfig is a node whose locked schedule runs every second and
// writes its run id and TRACEPARENT to a file, with a ping_url on r.
func traceConfig(t *testing.T, r *receiver, out string) string {
	return writeFile(t, t.TempDir(), "bext.config.toml", `
node_id = "tracer-node"
shutdown_grace = "2s"
[http]
listen = "off"
[locking]
backend = "memory"
[[scheduled]]
id = "traced"
cron = "*/1 * * * * *"
hint = "require_global"
ping_url = "`+r.srv.URL+`/ping/traced"
command = ["/bin/sh", "-c", "echo \"$BEXT_RUN_ID [$TRACEPARENT]\" >> `+out+`; echo traced-ran"]
`)
}

// offEnv clears whatever OTEL_* the test's own environment has.
var offEnv = []string{"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_TRACES_EXPORTER=",
	"OTEL_SDK_DISABLED=", "OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES=", "TRACEPARENT="}

// TestRunTracesToOTLP runs the built node with OTEL_EXPORTER_OTLP_ENDPOINT
// on an in-process OTLP/HTTP receiver: a run's span carries the run's
// attributes and has the backend's decision as its child; the command
// got the run span's trace parent as TRACEPARENT, and the run's ping
// the same as its traceparent header.
func TestRunTracesToOTLP(t *testing.T) {
	t.Parallel()
	r := newReceiver(t)
	out := t.TempDir() + "/traceparents"
	env := append(offEnv, "OTEL_EXPORTER_OTLP_ENDPOINT="+r.srv.URL, "OTEL_BSP_SCHEDULE_DELAY=50")
	n := proctest.Start(t, bin, env, "run", "--config", traceConfig(t, r, out))
	n.WaitLog(regexp.MustCompile(`tracing runs to OpenTelemetry`), 30*time.Second)

	// Wait for a run span and its decision child, in whatever order and
	// batches they come.
	byID := map[string]recvSpan{}
	var run, decision recvSpan
	deadline := time.After(60 * time.Second)
	for run.span == nil {
		select {
		case sp := <-r.spans:
			byID[string(sp.span.GetSpanId())] = sp
		case <-deadline:
			reqs, errs := r.got()
			t.Fatalf("no run span with its decision child within 60s (%d requests, bad: %v, spans: %d)\n%s", reqs, errs, len(byID), n.Log())
		}
		for _, sp := range byID {
			if sp.span.GetName() != "bext.try_lock_tick" {
				continue
			}
			if p, ok := byID[string(sp.span.GetParentSpanId())]; ok && p.span.GetName() == "bext.run" {
				run, decision = p, sp
			}
		}
	}
	n.Signal(syscall.SIGTERM)
	if code := n.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM\n%s", code, n.Log())
	}

	ra := attrs(run.span.GetAttributes())
	for k, want := range map[string]string{"bext.schedule": "traced", "bext.node": "tracer-node", "bext.result": "success",
		"bext.attempts": "1", "bext.manual": "false"} {
		if ra[k] != want {
			t.Errorf("run span %s = %q, want %q (attributes %v)", k, ra[k], want, ra)
		}
	}
	for _, k := range []string{"bext.tick", "bext.run_id", "bext.fence", "bext.lateness_seconds"} {
		if ra[k] == "" {
			t.Errorf("run span lacks %s (attributes %v)", k, ra)
		}
	}
	if f, err := strconv.ParseInt(ra["bext.fence"], 10, 64); err != nil || f <= 0 {
		t.Errorf("run span fence %q, want a positive fencing token", ra["bext.fence"])
	}
	if len(run.span.GetParentSpanId()) != 0 {
		t.Errorf("run span has a parent: it should be a trace's root")
	}
	if v := attrs(decision.span.GetAttributes())["bext.verdict"]; v != "granted" {
		t.Errorf("decision span verdict %q, want granted", v)
	}
	if !(decision.span.GetStartTimeUnixNano() >= run.span.GetStartTimeUnixNano() &&
		decision.span.GetEndTimeUnixNano() <= run.span.GetEndTimeUnixNano()) {
		t.Errorf("decision span [%d, %d] is not within its run's [%d, %d]", decision.span.GetStartTimeUnixNano(),
			decision.span.GetEndTimeUnixNano(), run.span.GetStartTimeUnixNano(), run.span.GetEndTimeUnixNano())
	}
	if got := run.resource["service.name"]; got != "bext-scheduler" {
		t.Errorf("service.name %q, want bext-scheduler", got)
	}
	if got := run.resource["service.instance.id"]; got != "tracer-node" {
		t.Errorf("service.instance.id %q, want the node id", got)
	}
	if run.resource["service.version"] == "" {
		t.Errorf("resource lacks service.version: %v", run.resource)
	}

	// The command's TRACEPARENT names the run's span.
	want := "00-" + hexOf(run.span.GetTraceId()) + "-" + hexOf(run.span.GetSpanId()) + "-01"
	lines, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lines), ra["bext.run_id"]+" ["+want+"]") {
		t.Errorf("the job of run %s did not get TRACEPARENT=%s; it wrote:\n%s", ra["bext.run_id"], want, lines)
	}
	// The run's pings carry a run's trace parent.
	select {
	case tp := <-r.pings:
		if !regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`).MatchString(tp) {
			t.Errorf("a ping's traceparent header is %q, want a run's", tp)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("no ping arrived")
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestRunWithoutOTELExportsNothing: without the variables, or with
// OTEL_TRACES_EXPORTER=none beside an endpoint, the node builds no
// tracer: its jobs get no TRACEPARENT, and the receiver no request, not
// even at shutdown (when a tracer would send what it had queued).
func TestRunWithoutOTELExportsNothing(t *testing.T) {
	t.Parallel()
	for name, extra := range map[string][]string{
		"no variables":  nil,
		"exporter none": {"OTEL_TRACES_EXPORTER=none"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t)
			out := t.TempDir() + "/traceparents"
			env := append(append([]string{}, offEnv...), "OTEL_BSP_SCHEDULE_DELAY=50")
			if extra != nil {
				env = append(append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+r.srv.URL), extra...)
			}
			n := proctest.Start(t, bin, env, "run", "--config", traceConfig(t, r, out))
			n.WaitLogN(regexp.MustCompile(`traced-ran`), 2, 30*time.Second)
			n.Signal(syscall.SIGTERM)
			if code := n.Wait(15 * time.Second); code != 0 {
				t.Fatalf("exit %d after SIGTERM\n%s", code, n.Log())
			}
			if reqs, _ := r.got(); reqs != 0 {
				t.Errorf("the receiver got %d requests, want none", reqs)
			}
			if strings.Contains(n.Log(), "tracing runs") {
				t.Errorf("the node says it traces runs")
			}
			lines, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(lines), " []") || strings.Contains(string(lines), "[00-") {
				t.Errorf("a job got a TRACEPARENT:\n%s", lines)
			}
		})
	}
}

// TestRunRefusesAnotherTraceExporter: an OTEL_* setting the node cannot
// honour is bad input: exit 2, naming the variable.
func TestRunRefusesAnotherTraceExporter(t *testing.T) {
	t.Parallel()
	r := newReceiver(t)
	cfg := traceConfig(t, r, t.TempDir()+"/x")
	for _, kv := range []string{"OTEL_TRACES_EXPORTER=zipkin", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"} {
		env := append(append([]string{}, offEnv...), "OTEL_EXPORTER_OTLP_ENDPOINT="+r.srv.URL, kv)
		res := proctest.Run(t, bin, env, "run", "--config", cfg)
		name, _, _ := strings.Cut(kv, "=")
		if res.Code != 2 || !strings.Contains(res.Stderr, name) {
			t.Errorf("%s: exit %d, stderr %q; want 2 naming %s", kv, res.Code, res.Stderr, name)
		}
		noCrash(t, res)
	}
}

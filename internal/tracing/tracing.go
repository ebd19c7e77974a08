// Package tracing owns the node's OpenTelemetry traces: it reads the
// standard OTEL_* environment, and, when it asks for traces, exports a
// span per run, with its backend decision as a child, over OTLP/HTTP. It
// implements scheduler.RunTracer, so the scheduler itself never links the
// SDK. Off (the default) it builds nothing: New returns a nil *Tracer and
// the node gives the scheduler no tracer at all.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// ErrConfig: the OTEL_* environment asks for something this node cannot
// do (another exporter, the gRPC protocol). It names the variable.
var ErrConfig = errors.New("tracing: unsupported OpenTelemetry setting")

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const DefaultServiceName = "bext-scheduler"

// Span names and attribute keys (a contract: dashboards query them).
const (
	SpanRun      = "bext.run"
	SpanDecision = "bext.try_lock_tick"

	AttrSchedule = "bext.schedule"
	AttrTick     = "bext.tick"
	AttrRunID    = "bext.run_id"
	AttrFence    = "bext.fence"
	AttrNode     = "bext.node"
	AttrManual   = "bext.manual"
	AttrLateness = "bext.lateness_seconds"
	AttrAttempts = "bext.attempts"
	AttrResult   = "bext.result"
	AttrVerdict  = "bext.verdict"
)

// Options are what the environment does not say.
type Options struct {
	NodeID, Version string
	// Getenv reads the environment; nil is os.Getenv. The exporter and
	// the SDK read their own OTEL_* variables from the process's.
	Getenv func(string) string
}

// Tracer traces runs (scheduler.RunTracer). Shut it down once the
// scheduler stopped, so the last spans are sent.
type Tracer struct {
	tp *sdktrace.TracerProvider
	tr trace.Tracer
}

// Enabled reports whether env asks for traces: OTEL_TRACES_EXPORTER=otlp,
// or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with OTEL_TRACES_EXPORTER unset;
// never with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "otlp":
		return true, checkProtocol(getenv)
	case "none":
		return false, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
		return true, checkProtocol(getenv)
	default:
		return false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: only otlp (over HTTP) and none are supported", ErrConfig, exp)
	}
}

// checkProtocol refuses an OTLP protocol other than HTTP's: a collector
// told to expect gRPC would get nothing, silently.
func checkProtocol(getenv func(string) string) error {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch v := getenv(k); v {
		case "", "http/protobuf":
		default:
			return fmt.Errorf("%w: %s=%q: this node exports OTLP over HTTP only (http/protobuf)", ErrConfig, k, v)
		}
	}
	return nil
}

// New returns the node's tracer, or nil (and no error) when the
// environment does not ask for traces: then nothing is built, no
// goroutine runs, and the scheduler is given no tracer.
func New(ctx context.Context, opts Options) (*Tracer, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	on, err := Enabled(getenv)
	if err != nil || !on {
		return nil, err
	}
	// Defaults first: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
	// read after them, win.
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", DefaultServiceName),
			attribute.String("service.version", opts.Version),
			attribute.String("service.instance.id", opts.NodeID),
			attribute.String(AttrNode, opts.NodeID)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("%w: OTEL_RESOURCE_ATTRIBUTES: %w", ErrConfig, err)
	}
	// The exporter reads OTEL_EXPORTER_OTLP_* (endpoint, headers,
	// timeout, compression, certificates); it connects lazily, so a
	// collector that is down delays no start.
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: OTLP exporter: %w", ErrConfig, err)
	}
	// The batch processor reads OTEL_BSP_*, the provider
	// OTEL_TRACES_SAMPLER(_ARG) and OTEL_SPAN_*_LIMIT.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{tp: tp, tr: tp.Tracer("github.com/bext-dev/bext-scheduler")}, nil
}

// Shutdown sends the spans still queued and stops the exporter, within
// ctx.
func (t *Tracer) Shutdown(ctx context.Context) error {
	return t.tp.Shutdown(ctx)
}

// StartRun starts a run's span (scheduler.RunTracer): from the start of
// the backend decision that granted it when there was one (d, a child
// span), else from the run's start.
func (t *Tracer) StartRun(r scheduler.RunStart, d *scheduler.Decision) scheduler.RunSpan {
	start := r.Start
	if d != nil && !d.Start.IsZero() {
		start = d.Start
	}
	ctx, span := t.tr.Start(context.Background(), SpanRun, trace.WithNewRoot(), trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String(AttrSchedule, r.Schedule),
			attribute.String(AttrTick, r.Tick.UTC().Format(time.RFC3339Nano)),
			attribute.String(AttrRunID, r.RunID),
			attribute.Int64(AttrFence, r.Fence),
			attribute.String(AttrNode, r.Node),
			attribute.Bool(AttrManual, r.Manual),
			attribute.Float64(AttrLateness, r.Lateness.Seconds())))
	if d != nil {
		_, ds := t.tr.Start(ctx, SpanDecision, trace.WithTimestamp(d.Start), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String(AttrVerdict, d.Verdict), attribute.String(AttrSchedule, r.Schedule)))
		if d.Err != nil {
			ds.SetStatus(codes.Error, d.Err.Error())
		}
		ds.End(trace.WithTimestamp(d.End))
	}
	return &runSpan{span: span, parent: traceParent(span.SpanContext())}
}

// runSpan is one run's span (scheduler.RunSpan).
type runSpan struct {
	span   trace.Span
	parent string
}

func (s *runSpan) TraceParent() string { return s.parent }

func (s *runSpan) End(r scheduler.RunRecord) {
	s.span.SetAttributes(attribute.String(AttrResult, string(r.Result)), attribute.Int(AttrAttempts, r.Attempts))
	switch r.Result {
	case scheduler.ResultSuccess, scheduler.ResultCancelled, scheduler.ResultReplaced:
		// A cancelled run is a shutdown's (or a stop's), a replaced one a
		// later tick's: not a fault of the job.
	default:
		msg := string(r.Result)
		if r.Err != nil {
			msg = r.Err.Error()
		}
		s.span.SetStatus(codes.Error, msg)
	}
	s.span.End(trace.WithTimestamp(r.Start.Add(r.Duration)))
}

// traceParent is sc as a W3C traceparent header value; "" when invalid.
func traceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

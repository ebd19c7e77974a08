package tracing_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/tracing"
)

func TestEnabled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  map[string]string
		on   bool
		bad  string // the variable the error names; "" for none
	}{
		{name: "nothing set", env: nil},
		{name: "other OTEL variables only", env: map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_BSP_SCHEDULE_DELAY": "50"}},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{name: "exporter none beats endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "http protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true},
		{name: "another exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, bad: "OTEL_TRACES_EXPORTER"},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
			bad: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			on, err := tracing.Enabled(func(k string) string { return c.env[k] })
			if c.bad != "" {
				if !errors.Is(err, tracing.ErrConfig) || !strings.Contains(err.Error(), c.bad) {
					t.Fatalf("err %v, want ErrConfig naming %s", err, c.bad)
				}
				return
			}
			if err != nil || on != c.on {
				t.Fatalf("Enabled = %v, %v; want %v, nil", on, err, c.on)
			}
		})
	}
}

// TestNewOffBuildsNothing: off, New returns no tracer (and starts no
// goroutine: goleak in TestMain).
func TestNewOffBuildsNothing(t *testing.T) {
	t.Parallel()
	tr, err := tracing.New(context.Background(), tracing.Options{Getenv: func(string) string { return "" }})
	if tr != nil || err != nil {
		t.Fatalf("New = %v, %v; want nil, nil", tr, err)
	}
}

package node_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/bext-dev/bext-scheduler/node"
)

// logBuffer is a log sink safe for the node's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOpenReadsWarning: a node listening beyond loopback with no
// read_token says once, at start, that its API is open, naming the
// address; a loopback node, or one with a read token, does not.
func TestOpenReadsWarning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, http string
		warn       bool
	}{
		{"every interface, no read token", `listen = "0.0.0.0:0"`, true},
		{"every interface, read token", "listen = \"0.0.0.0:0\"\nread_token = \"r-0123456789\"", false},
		{"loopback", `listen = "127.0.0.1:0"`, false},
		{"localhost", `listen = "localhost:0"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logBuffer{}
			cfg := parse(t, "[locking]\nbackend = \"memory\"\n[http]\n"+tc.http+"\n")
			n, err := node.New(context.Background(), cfg, node.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- n.Run(ctx) }()
			<-n.Ready()
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var warned []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "open to anyone") {
					warned = append(warned, line)
				}
			}
			switch {
			case tc.warn && (len(warned) != 1 || !strings.Contains(warned[0], "level=WARN") ||
				!strings.Contains(warned[0], "addr="+n.Addr()) || !strings.Contains(warned[0], "read_token")):
				t.Errorf("want one warning naming %s and read_token, got %q\n%s", n.Addr(), warned, logs)
			case !tc.warn && len(warned) != 0:
				t.Errorf("warned with %s: %q", tc.http, warned)
			}
		})
	}
}

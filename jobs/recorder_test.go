package jobs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	// Runs are supervised, as in bext-scheduler: the test binary is
	// re-executed as the supervisor.
	Supervise()
	if os.Getenv(orphanParentEnv) != "" {
		orphanParent() // the helper process of TestCommandDiesWithItsScheduler
		return
	}
	goleak.VerifyTestMain(m)
}

// record is one captured log record, its attributes flattened to strings.
type record struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

// recorder is an slog.Handler that keeps every record and lets a test wait
// for a given output line instead of sleeping.
type recorder struct {
	mu      sync.Mutex
	records []record
	waiters map[string]chan struct{}
}

func newRecorder() *recorder { return &recorder{waiters: map[string]chan struct{}{}} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	got := record{Level: rec.Level, Msg: rec.Message, Attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool {
		got.Attrs[a.Key] = a.Value.Resolve().String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, got)
	if ch, ok := r.waiters[got.Attrs["line"]]; ok {
		close(ch)
		delete(r.waiters, got.Attrs["line"])
	}
	return nil
}

// seen returns a channel closed once an output record with this line is
// logged (registered before the job starts, so it cannot be missed).
func (r *recorder) seen(line string) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	r.waiters[line] = ch
	return ch
}

func (r *recorder) all() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]record(nil), r.records...)
}

// lines returns the logged output lines of one stream, in order.
func (r *recorder) lines(stream string) []string {
	var out []string
	for _, rec := range r.all() {
		if rec.Msg == "job output" && rec.Attrs["stream"] == stream {
			out = append(out, rec.Attrs["line"])
		}
	}
	return out
}

// liveGroupMembers lists the pids of process group pgid that are still
// alive. kill(-pgid, 0) alone is not enough here: this machine's PID 1 does
// not reap orphans, so a killed child stays a zombie (dead, but still a
// group member to kill(2)). Zombies are dead and do not count.
func liveGroupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	if err := unix.Kill(-pgid, 0); err == unix.ESRCH {
		return nil
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var live []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited while we looked
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces and parens.
		s := string(b)
		rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(rest) < 3 {
			continue
		}
		state, pgrp := rest[0], rest[2]
		if pgrp == strconv.Itoa(pgid) && state != "Z" && state != "X" {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			live = append(live, pid)
		}
	}
	return live
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

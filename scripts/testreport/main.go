// Command testreport reads `go test -json` on stdin and prints what a
// plain `go test` run prints (each package's ok/FAIL line, and the whole
// output of every test that failed), then the slowest tests, so that CI
// shows where the suite's time goes without a second run.
//
//	go test -json ./... | go run ./scripts/testreport -slowest 20
//
// Last it lists each failed test with the lines where it said why
// (`file_test.go:N: ...`), so that the tail of a long CI log, which is
// often all a reader gets, names the cause and not only a node's log.
//
// It exits 1 when a test or a package failed (or the input held no
// result at all: a build that broke before any test ran), so a pipeline
// under `set -o pipefail` fails for either reason.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of test2json's output (go doc test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type result struct {
	pkg, test string
	elapsed   float64
}

func main() {
	slowest := flag.Int("slowest", 20, "how many of the slowest tests to list")
	summary := flag.Bool("summary", false, "print only the slowest tests (the steps printed the rest)")
	flag.Parse()
	out, list := io.Writer(os.Stdout), io.Writer(os.Stdout)
	if *summary {
		out = io.Discard
	}
	os.Exit(run(os.Stdin, out, list, *slowest))
}

// run copies what go test would print to out, and the slowest tests to
// list.
func run(in io.Reader, out, list io.Writer, slowest int) int {
	// A test's output is kept until its result: printed when it failed,
	// dropped when it passed. Keys are "package\x00test".
	pending := map[string][]string{}
	var (
		tests       []result
		failures    []failure
		failed      bool
		sawResult   bool
		unparseable int
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			// Not test2json: a build error printed by go itself.
			fmt.Fprintln(out, sc.Text())
			unparseable++
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output":
			// The compiler's errors (go 1.24 on sends them as events, and
			// the package's own line says only "[build failed]").
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "output":
			if e.Test == "" {
				// Package-level lines: "ok", "FAIL", "PASS", panics
				// outside a test and the build's own output.
				if !strings.HasPrefix(e.Output, "PASS") && !strings.HasPrefix(e.Output, "=== ") {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			pending[key] = append(pending[key], e.Output)
		case "pass", "skip":
			sawResult = true
			if e.Test != "" && e.Action == "pass" {
				tests = append(tests, result{e.Package, e.Test, e.Elapsed})
			}
			delete(pending, key)
		case "fail":
			sawResult = true
			failed = true
			if e.Test != "" {
				tests = append(tests, result{e.Package, e.Test, e.Elapsed})
				f := failure{pkg: e.Package, test: e.Test}
				for _, l := range pending[key] {
					fmt.Fprint(out, l)
					if why, ok := said(l); ok && len(f.why) < maxWhy {
						f.why = append(f.why, why)
					}
				}
				failures = append(failures, f)
				delete(pending, key)
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testreport:", err)
		return 1
	}
	// A test that never reported (the binary was killed by a timeout or
	// a crash): show what it printed.
	for key, lines := range pending {
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(out, "--- no result: %s\n", strings.ReplaceAll(key, "\x00", " "))
		for _, l := range lines {
			fmt.Fprint(out, l)
		}
		failed = true
	}
	// Top-level tests, each with the longest of its own time and its
	// subtests': a parent whose subtests run in parallel reports only its
	// own body's time, which ends before they start.
	longest := map[string]result{}
	var order []string
	for _, r := range tests {
		name := r.test
		if i := strings.IndexByte(name, '/'); i >= 0 {
			name = name[:i]
		}
		key := r.pkg + "\x00" + name
		cur, ok := longest[key]
		if !ok {
			order = append(order, key)
			cur = result{pkg: r.pkg, test: name}
		}
		cur.elapsed = max(cur.elapsed, r.elapsed)
		longest[key] = cur
	}
	top := make([]result, 0, len(order))
	for _, k := range order {
		top = append(top, longest[k])
	}
	sort.SliceStable(top, func(i, j int) bool { return top[i].elapsed > top[j].elapsed })
	if len(top) > slowest {
		top = top[:slowest]
	}
	if len(top) > 0 {
		fmt.Fprintf(list, "\nslowest %d tests:\n", len(top))
		for _, r := range top {
			fmt.Fprintf(list, "%8.1fs  %s %s\n", r.elapsed, strings.TrimPrefix(r.pkg, "github.com/bext-dev/bext-scheduler/"), r.test)
		}
	}
	if len(failures) > 0 {
		fmt.Fprintf(list, "\n%d failed tests, and where each said why:\n", len(failures))
		for _, f := range failures {
			fmt.Fprintf(list, "--- FAIL: %s %s\n", strings.TrimPrefix(f.pkg, "github.com/bext-dev/bext-scheduler/"), f.test)
			for _, w := range f.why {
				fmt.Fprintf(list, "    %s\n", w)
			}
		}
	}
	if failed || (!sawResult && unparseable > 0) {
		return 1
	}
	return 0
}

// failure is a failed test and the first lines of what it reported.
type failure struct {
	pkg, test string
	why       []string
}

// maxWhy bounds the lines kept per failed test: a test that logs a
// node's whole output through t.Log still gets one digest line each.
const maxWhy = 8

// said reports whether a line of a test's output is one of its own
// t.Error/t.Fatal/t.Log lines ("    name_test.go:123: message"), and
// returns it trimmed and cut to one screen line.
func said(line string) (string, bool) {
	l := strings.TrimSpace(line)
	colon := strings.Index(l, ".go:")
	if colon <= 0 || strings.ContainsAny(l[:colon], " \t=") {
		return "", false
	}
	rest := l[colon+len(".go:"):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || !strings.HasPrefix(rest[n:], ": ") {
		return "", false
	}
	if len(l) > 300 {
		l = l[:300] + "…"
	}
	return l, true
}

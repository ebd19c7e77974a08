package main

import (
	"strings"
	"testing"
)

// A failing test's output is shown, a passing one's is not, the package
// lines are, and the slowest list ranks top-level tests by elapsed time.
func TestReport(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"quiet line\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1.5}`,
		`{"Action":"output","Package":"p","Test":"TestB/sub","Output":"sub detail\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB/sub","Elapsed":9}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"boom happened\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:42: A's g ran after its pause\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"        time=2026 level=INFO msg=x at.go:3: no\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB","Elapsed":9.5}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t11s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":11}`,
		`{"Action":"output","Package":"q","Output":"ok  \tq\t2s\n"}`,
		`{"Action":"pass","Package":"q","Elapsed":2}`,
	}, "\n")
	var out strings.Builder
	if rc := run(strings.NewReader(in), &out, &out, 1); rc != 1 {
		t.Errorf("rc = %d, want 1 for a failed test", rc)
	}
	got := out.String()
	for _, want := range []string{"boom happened", "sub detail", "FAIL\tp\t11s", "ok  \tq\t2s", "slowest 1 tests:", "9.5s  p TestB"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// The tail names the cause: the failed tests, each with its own
	// file:line messages and not the log lines around them.
	_, digest, _ := strings.Cut(got, "failed tests")
	if !strings.Contains(digest, "--- FAIL: p TestB\n    b_test.go:42: A's g ran after its pause") || strings.Contains(digest, "level=INFO") {
		t.Errorf("the failure digest is wrong:\n%s", digest)
	}
	if strings.Contains(got, "quiet line") {
		t.Errorf("a passing test's output was printed:\n%s", got)
	}
	if strings.Contains(got, "TestA") {
		t.Errorf("slowest 1 should list only TestB:\n%s", got)
	}

	// A package that does not compile: the compiler's words are shown.
	out.Reset()
	build := `{"ImportPath":"p [p.test]","Action":"build-output","Output":"x_test.go:3:28: undefined: nope\n"}
{"ImportPath":"p [p.test]","Action":"build-fail"}
{"Action":"output","Package":"p","Output":"FAIL\tp [build failed]\n"}
`
	if rc := run(strings.NewReader(build), &out, &out, 20); rc != 1 || !strings.Contains(out.String(), "undefined: nope") {
		t.Errorf("rc = %d, output %q; want 1 and the compiler's error", rc, out.String())
	}

	out.Reset()
	if rc := run(strings.NewReader("# build failed\nsyntax error\n"), &out, &out, 20); rc != 1 {
		t.Errorf("rc = %d for a build error with no result, want 1", rc)
	}
	out.Reset()
	if rc := run(strings.NewReader(`{"Action":"pass","Package":"q","Test":"TestC","Elapsed":1}`+"\n"), &out, &out, 20); rc != 0 {
		t.Errorf("rc = %d for a pass, want 0", rc)
	}
}

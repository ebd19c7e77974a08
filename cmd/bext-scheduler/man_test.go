package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// TestManPages: the packages ship these pages, so every visible command
// gets one, the hidden generator itself does not, and the pages name the
// flags the binary accepts.
func TestManPages(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "man1")
	r := proctest.Run(t, bin, nil, "man", "--dir", dir)
	if r.Code != 0 {
		t.Fatalf("man --dir: exit %d\n%s", r.Code, r.Stderr)
	}
	for _, page := range []string{"bext-scheduler.1", "bext-scheduler-run.1", "bext-scheduler-validate.1", "bext-scheduler-lock-run.1"} {
		if _, err := os.Stat(filepath.Join(dir, page)); err != nil {
			t.Errorf("no page %s: %v", page, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bext-scheduler-man.1")); err == nil {
		t.Error("the hidden man command has a page of its own")
	}
	b, err := os.ReadFile(filepath.Join(dir, "bext-scheduler-run.1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `\fB--config\fP`) || !strings.Contains(string(b), ".TH \"BEXT-SCHEDULER\" \"1\"") {
		t.Errorf("bext-scheduler-run.1 lacks the header or --config:\n%s", b)
	}
}

func TestManNeedsDir(t *testing.T) {
	t.Parallel()
	r := proctest.Run(t, bin, nil, "man")
	noCrash(t, r)
	if r.Code != exitUsage || !strings.Contains(r.Stderr, "--dir") {
		t.Fatalf("man without --dir: exit %d, want %d naming --dir\n%s", r.Code, exitUsage, r.Stderr)
	}
}

// TestManDateFromSourceDateEpoch: a release dates its pages by the commit,
// so two builds of one commit ship identical pages; a bad value is named.
func TestManDateFromSourceDateEpoch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := proctest.Run(t, bin, []string{"SOURCE_DATE_EPOCH=86400"}, "man", "--dir", dir)
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "bext-scheduler.1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"Jan 1970"`) {
		t.Errorf("SOURCE_DATE_EPOCH=86400 did not date the page Jan 1970:\n%.300s", b)
	}
	r = proctest.Run(t, bin, []string{"SOURCE_DATE_EPOCH=yesterday"}, "man", "--dir", dir)
	noCrash(t, r)
	if r.Code != exitUsage || !strings.Contains(r.Stderr, "SOURCE_DATE_EPOCH") {
		t.Errorf("SOURCE_DATE_EPOCH=yesterday: exit %d, want %d naming it\n%s", r.Code, exitUsage, r.Stderr)
	}
}

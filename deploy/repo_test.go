package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNoBuildOutputCommitted fails when git tracks a compiled binary (an
// executable or object file in any common format) or a file named like
// build output: a binary in the repository rides in every clone and every
// Docker build context, and is never the one the sources build.
func TestNoBuildOutputCommitted(t *testing.T) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = repo(".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	magics := []struct {
		name  string
		magic []byte
	}{
		{"an ELF binary", []byte("\x7fELF")},
		{"a Mach-O binary", []byte{0xcf, 0xfa, 0xed, 0xfe}},
		{"a Mach-O binary", []byte{0xfe, 0xed, 0xfa, 0xcf}},
		{"a Windows executable", []byte("MZ")},
		{"a Go archive", []byte("!<arch>\n")},
	}
	buildName := regexp.MustCompile(`(^|/)(bin|dist)/|\.(test|exe|o|a|so|prof)$|(^|/)__debug_bin`)
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 10 {
		t.Fatalf("git ls-files lists %d files; is this a checkout?", len(files))
	}
	for _, f := range files {
		if buildName.MatchString(f) {
			t.Errorf("%s is tracked: its name is build output (.gitignore should keep it out)", f)
			continue
		}
		head := make([]byte, 8)
		fh, err := os.Open(repo(f))
		if err != nil {
			continue // deleted in the work tree but not yet in the index
		}
		n, _ := io.ReadFull(fh, head)
		fh.Close()
		for _, m := range magics {
			if bytes.HasPrefix(head[:n], m.magic) {
				t.Errorf("%s is tracked and is %s: remove it with git rm and build it instead", f, m.name)
			}
		}
	}
}

// TestMakeBuildMatchesTheImage checks that `make build` compiles with the
// build tags the image uses: without timetzdata a node built by make reads
// the host's zone data and may compute zoned ticks unlike the containers.
func TestMakeBuildMatchesTheImage(t *testing.T) {
	tagsOf := func(s string) string {
		m := regexp.MustCompile(`-tags[= ]+(\S+)`).FindStringSubmatch(s)
		if m == nil {
			return ""
		}
		return strings.Trim(m[1], `"'`)
	}
	var image string
	for _, r := range loadDockerfile(t).runs {
		if strings.Contains(r, "go build") {
			image = tagsOf(r)
		}
	}
	if image == "" {
		t.Fatal("the Dockerfile's go build sets no -tags; this test expects timetzdata there")
	}
	var make string
	for line := range strings.SplitSeq(readRepoFile(t, "Makefile"), "\n") {
		if strings.Contains(line, "build") && strings.Contains(line, "-o $(BIN)") {
			make = tagsOf(line)
		}
	}
	if make != image {
		t.Errorf("make build uses -tags %q, the image %q", make, image)
	}
}

// TestOperatingShellBlocksRunInAFreshShell runs the one-line commands of
// docs/OPERATING.md that set their own environment (VAR=... bin/bext-scheduler
// ...), in an environment holding only PATH and HOME: what the doc shows must
// work in the reader's fresh shell, not only in one that happens to export a
// variable it never mentions.
func TestOperatingShellBlocksRunInAFreshShell(t *testing.T) {
	var lines []string
	inSh := false
	sc := bufio.NewScanner(strings.NewReader(readRepoFile(t, "docs/OPERATING.md")))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "```sh"):
			inSh = true
		case strings.HasPrefix(l, "```"):
			inSh = false
		case inSh && regexp.MustCompile(`^([A-Z_]+=\S+ )+bin/bext-scheduler (validate|next|locks) `).MatchString(l):
			lines = append(lines, l)
		}
	}
	if len(lines) < 2 {
		t.Fatalf("found %d self-contained bext-scheduler lines in docs/OPERATING.md, want the Postgres ones", len(lines))
	}
	for _, l := range lines {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", strings.Replace(l, "bin/bext-scheduler", strconv.Quote(bin), 1))
		cmd.Dir = repo(".")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("in a fresh shell, %s\nfailed (%v):\n%s", l, err, out)
		}
	}
}

// TestDemoTranscriptShowsRealFences checks the fencing tokens quoted in the
// docs' transcripts: every fence is at least the backend's clock in
// microseconds, so a transcript showing "fence 1" teaches the wrong size.
func TestDemoTranscriptShowsRealFences(t *testing.T) {
	re := regexp.MustCompile(`\(fence (\d+)\)`)
	found := 0
	for _, doc := range []string{"docs/OPERATING.md", "README.md"} {
		for _, m := range re.FindAllStringSubmatch(readRepoFile(t, doc), -1) {
			found++
			n, _ := strconv.ParseInt(m[1], 10, 64)
			if n < 1_000_000_000_000_000 { // 2001-09-09 in microseconds
				t.Errorf("%s shows fence %s; real fences are microsecond timestamps (16 digits)", doc, m[1])
			}
		}
	}
	if found == 0 {
		t.Error("no (fence N) in the docs' transcripts: did the demo output change?")
	}
}

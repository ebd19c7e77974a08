package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromium finds the browser: $BEXT_TEST_CHROMIUM, else Debian's
// chromium on PATH. Not finding it fails the test: CI must have it
// (scripts/test-services installs it).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BEXT_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found (looked for $BEXT_TEST_CHROMIUM, chromium, chromium-browser, google-chrome): " +
		"run scripts/test-services, or apt-get install chromium")
	return ""
}

// browser is one headless Chromium with a fresh profile, and what its
// page reported: console errors, uncaught exceptions, log entries of
// level error (CSP violations, failed loads), and every request sent.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string // the test's temp dir: screenshots go here

	mu       sync.Mutex
	errors   []string
	requests []*network.Request
	onEvent  func(ev any) // a test's own listener (runs in the tab's loop)
}

// newBrowser starts Chromium for the test; it is stopped at the test's end.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	dir := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		// The machine has no network: without these Chromium keeps
		// trying to reach Google's hosts.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.WindowSize(1280, 900),
	}
	b := &browser{t: t, dir: dir}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf), chromedp.WithListener(b.listen))
	b.ctx = ctx
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc() // waits for the browser process to exit
	})
	// The first call starts the browser, which lives as long as this
	// call's context: b.ctx, not one with a timeout.
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, cdplog.Enable, cdp.Empty{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{})
		return err
	})); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return b
}

// listen records what the page reports. It runs in the tab's loop: it
// returns fast and sends no command.
func (b *browser) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, string(a.Value)+a.Description)
			}
			b.errors = append(b.errors, "console."+string(e.Type)+": "+strings.Join(parts, " "))
		}
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.errors = append(b.errors, "exception: "+msg)
	case *cdplog.EventEntryAdded:
		if e.Entry.Level == cdplog.EntryLevelError {
			b.errors = append(b.errors, fmt.Sprintf("log (%s): %s %s", e.Entry.Source, e.Entry.Text, e.Entry.URL))
		}
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, e.Request)
	}
	if b.onEvent != nil {
		b.onEvent(ev)
	}
}

// setOnEvent adds the test's own listener.
func (b *browser) setOnEvent(f func(ev any)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onEvent = f
}

// run runs actions, failing the test on an error.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.shot("failed")
		b.t.Fatalf("%s: %v\nerrors so far: %v", what, err, b.Errors())
	}
}

// waitJS waits until expr is truthy in the page (the page polls it on
// each animation frame and answers once it holds: no sleep here).
func (b *browser) waitJS(what, expr string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[any](expr, chromedp.WithPollingTimeout(timeout))); err != nil {
		b.shot("timeout")
		html, _ := chromedp.Run(b.ctx, chromedp.OuterHTML(chromedp.CSS("main")))
		b.t.Fatalf("waiting for %s (%s): %v\n<main>: %s", what, expr, err, html)
	}
}

// evalAs evaluates expr in the page and returns its value.
func evalAs[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// shot saves a screenshot of the whole page under the test's temp dir
// and logs its path.
func (b *browser) shot(name string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	path := filepath.Join(b.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Errorf("writing %s: %v", path, err)
		return ""
	}
	b.t.Logf("screenshot: %s", path)
	// BEXT_TEST_SCREENSHOTS keeps a copy (how docs/status-page.png was made).
	if keep := os.Getenv("BEXT_TEST_SCREENSHOTS"); keep != "" {
		_ = os.WriteFile(filepath.Join(keep, b.t.Name()[strings.LastIndex(b.t.Name(), "/")+1:]+"-"+name+".png"), png, 0o644)
	}
	return path
}

// Errors returns what the page reported as errors so far.
func (b *browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// Requests returns the requests the page sent so far.
func (b *browser) Requests() []*network.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*network.Request(nil), b.requests...)
}

// noErrors fails the test if the page reported an error other than the
// answers the test provoked (allowed: substrings of expected ones).
func (b *browser) noErrors(when string, allowed ...string) {
	b.t.Helper()
next:
	for _, e := range b.Errors() {
		for _, a := range allowed {
			if strings.Contains(e, a) {
				continue next
			}
		}
		b.t.Errorf("%s: the page reported an error: %s", when, e)
	}
}

// Package browser holds the status page's tests in a real headless
// Chromium (Debian's chromium, driven over the DevTools protocol by
// chromedp) against a real node: the built binary, started by
// internal/proctest, on the memory backend and on Redis. They fail, never
// skip, when Chromium cannot be found: scripts/test-services installs it.
package browser

// Package e2e proves, on a real cluster, what bext-scheduler promises: each
// require_global tick runs once, on one node, however nodes die, stall or
// drift. Its tests start several real bext-scheduler processes against a
// real Redis (a private redis-server per test, so it can be stopped) or the
// machine's Postgres (behind a fault proxy per node), run a job that writes
// through a fenced protected resource (internal/ledger), inject faults, and
// check the ledger: runs per tick, overlapping runs, stale writes refused.
//
// `go test ./e2e/` runs the short scenarios (a few ticks each, in parallel);
// `make cluster-test` runs TestLongRun (build tag e2elong), several minutes
// per backend with faults at random. docs/RELIABILITY.md has its results.
package e2e

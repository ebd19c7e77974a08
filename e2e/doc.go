// Package e2e proves, on a real cluster, what bext-scheduler promises: each
// require_global tick runs once, on one node, however nodes die, stall or
// drift. Its tests start several real bext-scheduler processes against a
// real Redis (a private redis-server per test, so it can be stopped) or the
// machine's Postgres (behind a fault proxy per node), run a job that writes
// through a fenced protected resource (internal/ledger), inject faults, and
// check the ledger: runs per tick, overlapping runs, stale writes refused.
//
// `go test ./e2e/` runs the short scenarios (a few ticks each, in
// parallel), among them the handover proofs: graceful handovers lose no tick,
// a killed holder's lease is respected and ticks then resume, a single
// node stopped across a tick runs it late, and a rolling deploy of 20s jobs
// under overlap = "skip" never overlaps. `make cluster-test` runs
// TestLongRun and TestRollingDeployFull (build tag e2elong): several
// minutes per backend with faults at random, and the full rolling deploy.
// docs/RELIABILITY.md has their results.
package e2e

// Package sim runs a whole bext-scheduler cluster in one process under
// faults drawn from a seed, and checks what the cluster did against a
// ledger the harness keeps itself.
//
// The nodes are real schedulers (package scheduler: the firing loop, the
// batcher, catch-up, release, the run watch), all on one fake clock,
// sharing one memory backend (its decision is locking.DecideTick, the
// reference the Redis and Postgres backends follow). Each node reaches the
// backend through a link (link.go) that loses replies before or after the
// backend applied the call, fails calls and stalls, and applies some calls
// twice (link_dup.go), as the seed says. Nodes crash, restart, stop
// gracefully and freeze (freeze.go: a GC pause, SIGSTOP); their clocks
// disagree, some beyond max_clock_skew. Operators pause and resume
// schedules, reload one with another timing, trigger a run and backfill a
// tick (plan_ops.go, cluster_ops.go). Some schedules have a spread, one
// runs in a zone through a DST change, some jobs ignore SIGTERM
// (workload.go). The jobs write every attempt to the ledger (ledger.go),
// and check.go (with check_ops.go) holds the invariants the ledger must
// satisfy.
//
// One seed decides the plan (plan.go): schedules, nodes, offsets and every
// fault window. Decisions made per call are hashed from the seed and the
// call's identity, not drawn in call order, so goroutine interleavings move
// them as little as possible; they still move some (a failing seed fails
// again in about three replays of five). The clock moves a step at a time,
// and after each step the harness waits until every goroutine is blocked
// (quiesce.go).
//
// TestSim runs 300 seeds (-seeds, -first), or one (-seed N, to replay a
// failure); violations of holes already known and routed are reported
// without failing the test unless -strict (check.go). Nothing here is
// linked into the production binary: only this package's tests import it.
package sim

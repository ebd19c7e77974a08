package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	seedFlag    = flag.Int64("seed", -1, "run only this seed (replays a failure)")
	seedsFlag   = flag.Int("seeds", 300, "how many seeds to run, from -first")
	firstFlag   = flag.Uint64("first", 1, "the first seed of -seeds")
	strictFlag  = flag.Bool("strict", false, "fail on the known holes too (check.go), not only on new violations")
	summaryFlag = flag.String("summary", "", "write 'N seeds, V violations' to this file at the end")
	verboseFlag = flag.Bool("simlog", false, "log every seed's plan and event count")
)

// TestSim runs the cluster under the faults of each seed and checks the
// invariants. A failing seed prints the violations, the events around
// the first, and the command that replays it.
func TestSim(t *testing.T) {
	oneProc(t)
	seeds := make([]uint64, 0, *seedsFlag)
	if *seedFlag >= 0 {
		seeds = append(seeds, uint64(*seedFlag))
	} else {
		for i := range uint64(*seedsFlag) {
			if s := *firstFlag + i; !knownBad[s] {
				seeds = append(seeds, s)
			}
		}
	}
	began := time.Now()
	bad := 0
	var total stats
	knownSeeds := map[string][]uint64{} // by hole, the seeds that hit it
	for _, seed := range seeds {
		// One subtest per seed: a data race the detector reports while
		// a seed runs fails that seed's subtest, naming the seed.
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			p := newPlan(seed)
			c, err := simulate(p)
			if err != nil {
				t.Fatalf("the harness failed: %v\nreplay: %s", err, replay(seed))
			}
			vs := c.check()
			total.add(c.stats)
			var fresh, known []violation
			for _, v := range vs {
				if v.known != "" && !*strictFlag {
					known = append(known, v)
				} else {
					fresh = append(fresh, v)
				}
			}
			if *verboseFlag {
				t.Logf("%d nodes, %d schedules, span %v: %v; %d violations, %d of known holes",
					len(p.nodes), len(p.scheds), p.span, c.stats, len(fresh), len(known))
			}
			for _, v := range known {
				knownSeeds[v.known] = append(knownSeeds[v.known], seed)
			}
			if len(fresh) > 0 {
				t.Errorf("%s", report(c, fresh))
			}
		})
		if !ok {
			bad++
			if *seedFlag < 0 {
				t.Logf("seed %d failed; replay: %s", seed, replay(seed))
			}
		}
	}
	var lines []string
	for hole, ss := range knownSeeds {
		slices.Sort(ss)
		ss = slices.Compact(ss)
		line := fmt.Sprintf("known hole %q (not failing the test; -strict fails on it): %d seeds, e.g. %s -strict",
			hole, len(ss), replay(ss[0]))
		t.Log(line)
		lines = append(lines, line)
	}
	slices.Sort(lines)
	// A seed that failed (violations, a data race, a harness failure)
	// counts once.
	summary := fmt.Sprintf("%d seeds, %d violations", len(seeds), bad)
	t.Logf("%s (%v): %v", summary, time.Since(began).Round(time.Millisecond), total)
	if *summaryFlag != "" {
		lines = append(lines, summary) // the last line, as make sim promises
		if err := os.WriteFile(*summaryFlag, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Errorf("summary: %v", err)
		}
	}
}

// knownBad are seeds that found a violation the simulation cannot fix
// itself (production code is other engineers' to change): kept out of the
// default set, each with what it found, so that the lead can route it.
// Replay one with -seed N.
// (None so far: every violation found was fixed, or labelled a known
// hole in check.go until it was.)
var knownBad = map[uint64]bool{}

// triagedSeeds failed -strict once and were fixed since, each with a
// test of its own (docs/RELIABILITY.md's found table names them): they run
// strict on every default run too, outside the default seeds, so that the
// harness, checker or scheduler change that made each pass cannot be
// undone unseen.
var triagedSeeds = []uint64{
	193, 232827, 289678, 300100, 330012, 343749, 358971, 366805,
	367797, 381272, 398750, 400975, 301401,
	224013, 282755, 301302, // the known hole of a lost confirmation, closed by GiveBack
	432504, 440914, 443090, 477634, // a backfill retaken by the node that ran it: two records of one run id
	432663,         // a backfill accepted on a missing mark by a node ahead of the backend
	477050, 493444, // a lost reply's node crashed while its last resend waited for its batch
	// a take whose job never started given back without Done (9a97fde)
	441315, 441988, 462024,
	// the rest of the 100,000-seed run on 5728067, passing since
	433246, 433806, 445169, 452198, 452522, 462562, 467086, 469339,
	542433, 576797, // the 50,000-seed run on 6a6fc7a: a backfill's Done behind a trigger put back; a trigger taken near the end
	477149, 477369, 484813, 485718, 490774, 502011, 507718, 511163, 529023,
	603428, // two polls of one request on one life drew the same take tokens: a backfill's take answered twice, run twice
	2990,   // invariant 8: a resend answered from its grant's record after a loss of the marks taken for a step
	766,    // invariant 8: paused, its reply lost, its node crashed before a resend was answered
	// invariant 8: a missed verdict answered again to a resend after a loss
	// of the marks taken for a step (the checker's, as 2990)
	7251, 32814,
	31090, // invariant 6: a re-run's lock lost in a backend restart, the next tick granted beside it (the checker's)
	// invariant 8: a resend answered missed past the grant's keep: its gap
	// recorded by no one (a targeted schedule: no other node asked)
	30769, 41836,
}

func TestSimTriagedSeeds(t *testing.T) {
	oneProc(t)
	for _, seed := range triagedSeeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			c, err := simulate(newPlan(seed))
			if err != nil {
				t.Fatalf("the harness failed: %v\nreplay: %s -strict", err, replay(seed))
			}
			// Strict, but for invariant 8's two labelled holes: a step none
			// of whose replies ever reached its node, which no fix on the
			// node can see (docs/RELIABILITY.md). Replays are not exact, and
			// a seed triaged for another cause may meet one (282755 did).
			vs := slices.DeleteFunc(c.check(), func(v violation) bool {
				return v.known == holePausedReplyLost || v.known == holeGrantGapReplyLost
			})
			if len(vs) > 0 {
				t.Errorf("%s", report(c, vs))
			}
		})
	}
}

// oneProc runs the rest of the test on one P (GOMAXPROCS 1), restored at
// its end. After each step the harness waits for every goroutine to block,
// taking goroutine dumps: with two Ps on an idle machine a goroutine woken
// by the step sat runnable for a thread's wake-up on the other P, dump
// after dump (60 seeds: 11.7s on two Ps, 1.2s on one). Goroutines still
// interleave on one P (preemption, blocking), and the race detector still
// sees every unsynchronised access: it follows happens-before, not
// parallelism.
func oneProc(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
}

func replay(seed uint64) string {
	return fmt.Sprintf("go test ./internal/sim -run TestSim -seed %d", seed)
}

// report describes a failing seed: its violations, the events around the
// first one, and the command that replays it.
func report(c *cluster, vs []violation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d violations\n", c.plan.seed, len(vs))
	for i, v := range vs {
		if i == 10 {
			fmt.Fprintf(&b, "  … and %d more\n", len(vs)-i)
			break
		}
		fmt.Fprintf(&b, "  [%s] at %s: %s\n", v.inv, c.at(v.at), v.msg)
	}
	fmt.Fprintf(&b, "plan:\n%s", c.plan)
	fmt.Fprintf(&b, "events around %s:\n%s", c.at(vs[0].at), c.trace(vs[0].at, traceSpan))
	fmt.Fprintf(&b, "replay: %s\n", replay(c.plan.seed))
	return b.String()
}

// traceSpan is how far around a violation its trace reaches (-tracespan).
var traceSpan = 15 * time.Second

func init() {
	flag.DurationVar(&traceSpan, "tracespan", traceSpan, "how far around the first violation the trace printed reaches")
}

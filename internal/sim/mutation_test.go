//go:build simmut

package sim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/mutation"
)

// mutationSeeds bounds the seeds TestMutations tries per mutation: the
// default set of TestSim.
const mutationSeeds = 300

// TestMutations proves that the simulation bites: for each
// mutation of the production code (package internal/mutation, compiled in
// only with the simmut build tag), it runs the default seeds from 1 with
// the mutation on until one breaks the invariant the mutation is meant to
// break, and fails if none of them does. A seed counts only when the same
// seed without the mutation, run twice, breaks that invariant in neither
// run: a violation the unmutated code also shows (a known hole) proves
// nothing about the mutation. Violations count whatever their known-hole
// tag. It logs, per mutation, how many seeds it took.
//
//	go test -tags simmut -race -count=1 -run TestMutations ./internal/sim
func TestMutations(t *testing.T) {
	oneProc(t)
	cases := []struct {
		m   mutation.Name
		inv string
	}{
		{mutation.IgnoreMark, invTwice},
		{mutation.NoResend, invLost},
		{mutation.ReleaseDeferred, invLiveness},
		{mutation.PauseOutsideStep, invPaused},
		{mutation.NoLeaseTimer, invLease},
		{mutation.NoHistory, invHistory},
		{mutation.NoFenceFloor, invFence},
		{mutation.NoSkipRecords, invAudit},
	}
	if len(cases) != len(mutation.All) {
		t.Fatalf("%d mutations tested, %d exist: test every one", len(cases), len(mutation.All))
	}
	var table []string
	for _, tc := range cases {
		ok := t.Run(string(tc.m), func(t *testing.T) {
			for seed := uint64(1); seed <= mutationSeeds; seed++ {
				v, hit := breaks(t, seed, tc.m, tc.inv)
				if !hit {
					continue
				}
				if _, base := breaks(t, seed, "", tc.inv); base {
					continue
				}
				if _, base := breaks(t, seed, "", tc.inv); base {
					continue
				}
				line := fmt.Sprintf("%-32s -> %-50s caught at seed %d (%d seeds)", tc.m, tc.inv, seed, seed)
				t.Logf("%s: %s", line, v.msg)
				table = append(table, line)
				return
			}
			t.Errorf("mutation %s: no violation of %q in %d seeds: the simulation does not catch it", tc.m, tc.inv, mutationSeeds)
		})
		if !ok {
			table = append(table, fmt.Sprintf("%-32s -> %-50s NOT CAUGHT", tc.m, tc.inv))
		}
	}
	t.Logf("mutations:\n  %s", strings.Join(table, "\n  "))
}

// breaks runs seed with mutation m on ("" for none) and returns the first
// violation of invariant inv, if any, known hole or not. A harness failure
// fails the test.
func breaks(t *testing.T, seed uint64, m mutation.Name, inv string) (violation, bool) {
	t.Helper()
	mutation.Set(m)
	defer mutation.Set("")
	c, err := simulate(newPlan(seed))
	if err != nil {
		t.Fatalf("seed %d, mutation %q: the harness failed: %v", seed, m, err)
	}
	for _, v := range c.check() {
		if v.inv == inv {
			return v, true
		}
	}
	return violation{}, false
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/bext-dev/bext-scheduler/internal/ops/opstest"
	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// auditRow is one row of `audit --json` (every field present, null when
// empty: pointers tell null from zero).
type auditRow struct {
	Schedule        string    `json:"schedule"`
	Tick            time.Time `json:"tick"`
	Fate            string    `json:"fate"`
	Reason          *string   `json:"reason"`
	Node            *string   `json:"node"`
	RunID           *string   `json:"run_id"`
	Fence           *int64    `json:"fence"`
	LatenessSeconds *float64  `json:"lateness_seconds"`
	DurationSeconds *float64  `json:"duration_seconds"`
	Result          *string   `json:"result"`
	Attempts        *int      `json:"attempts"`
	Manual          *bool     `json:"manual"`
}

func str(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

// ledgerRun is one run as its job saw it: the ledger the audit is held
// against.
type ledgerRun struct {
	RunID string
	Tick  time.Time
	Node  string
	Fence int64
	Ended bool
}

// fenceJob records each run in dir/runs as "RUN_ID TICK NODE FENCE", then
// sleeps for what dir/sleep says, then appends "end".
func fenceJob(dir string) string {
	return fmt.Sprintf(`f=$(mktemp "%[1]s/runs/$BEXT_SCHEDULE_ID.XXXXXX") && echo "$BEXT_RUN_ID $BEXT_TICK_TIME $BEXT_NODE_ID $BEXT_FENCING_TOKEN" > "$f" && sleep "$(cat %[1]s/sleep 2>/dev/null || echo 0)" && echo end >> "$f"`, dir)
}

func (c *opsCluster) ledgerRuns(schedule string) []ledgerRun {
	c.t.Helper()
	files, err := filepath.Glob(filepath.Join(c.dir, "runs", schedule+".*"))
	if err != nil {
		c.t.Fatal(err)
	}
	var out []ledgerRun
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			c.t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		fields := strings.Fields(lines[0])
		if len(fields) != 4 {
			continue // being written
		}
		tick, err := time.Parse(time.RFC3339Nano, fields[1])
		if err != nil {
			c.t.Fatalf("%s: BEXT_TICK_TIME %q: %v", f, fields[1], err)
		}
		fence, _ := strconv.ParseInt(fields[3], 10, 64)
		out = append(out, ledgerRun{RunID: fields[0], Tick: tick, Node: fields[2], Fence: fence,
			Ended: len(lines) > 1 && lines[1] == "end"})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tick.Before(out[j].Tick) })
	return out
}

// span is a stretch of real time, widened by a second each side when
// asked whether a tick falls in it (a tick is decided a little after it is
// due, and a fault takes a moment to act).
type span struct{ from, to time.Time }

func (s span) has(t time.Time) bool {
	return !t.Before(s.from.Add(-time.Second)) && !t.After(s.to.Add(time.Second))
}

// inside reports whether t lies well inside s: a tick the fault surely
// covered.
func (s span) inside(t time.Time) bool {
	return t.After(s.from.Add(time.Second)) && t.Before(s.to.Add(-time.Second))
}

// TestClusterAuditAccountsForEveryTick: three nodes run an every-second
// require_global schedule for about 40 seconds through a pause and a
// resume, a 5-second stop of every node, a kill -9 of the holder, a
// trigger and a backfill. `audit --json` over the window must classify
// every tick as the jobs' own ledger and the fault schedule say: a tick
// that ran, with the node and fence its job saw (the killed run too,
// result running: its node died before its end); one that did not,
// skipped with the reason of its window (paused, stopped or missed
// across the stop, overlap around the kill); none lost. Then a mark set
// ahead by hand makes the ticks after it lost: `audit` exits 1 and
// `status` flags the mark.
func TestClusterAuditAccountsForEveryTick(t *testing.T) {
	t.Parallel()
	for _, b := range opstest.Shared() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			lockingTOML, st := b.New(t)
			c := newOpsCluster(t, lockingTOML, st, `
[history]
keep = 500
audit_every = "1s"
[[scheduled]]
id = "g"
cron = "*/1 * * * * *"
hint = "require_global"
expected_runtime = "1s"
command = ["/bin/sh", "-c", '@FENCEJOB@']
`)
			// newOpsCluster's @JOB@ has no fence: rewrite the config with
			// fenceJob.
			cfg, err := os.ReadFile(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(c.cfg, []byte(strings.ReplaceAll(string(cfg), "@FENCEJOB@", fenceJob(c.dir))), 0o644); err != nil {
				t.Fatal(err)
			}
			c.setSleep("0.2")
			ids := []string{"node-1", "node-2", "node-3"}
			start := time.Now()
			for _, id := range ids {
				c.start(id, "")
			}
			waitFor(t, "eight runs", 30*time.Second, func() bool { return len(c.ledgerRuns("g")) >= 8 })

			// A pause of 4 seconds.
			paused := span{from: time.Now()}
			cli(t, c.cfg, 0, "pause", "g", "--note", "audit test")
			time.Sleep(5 * time.Second) // the pause's length is the test's own choice; nothing to wait for
			cli(t, c.cfg, 0, "resume", "g")
			paused.to = time.Now()
			waitFor(t, "runs after the resume", 30*time.Second, func() bool {
				rs := c.ledgerRuns("g")
				return len(rs) > 3 && rs[len(rs)-3].Tick.After(paused.to)
			})

			// Every node stopped for 5 seconds: beyond the catch-up window
			// (one period) of every tick but the last.
			for _, id := range ids {
				c.nodes[id].p.Signal(syscall.SIGTERM)
			}
			for _, id := range ids {
				c.nodes[id].p.Wait(30 * time.Second)
			}
			// From the last exit: a node still finishing its run in its
			// shutdown grace holds the lock, an overlap to the others.
			stopped := span{from: time.Now()}
			time.Sleep(5 * time.Second) // the outage's length
			for _, id := range ids {
				c.start(id, "")
			}
			stopped.to = time.Now()
			waitFor(t, "runs after the restart", 30*time.Second, func() bool {
				rs := c.ledgerRuns("g")
				return len(rs) > 3 && rs[len(rs)-3].Tick.After(stopped.to)
			})

			// kill -9 of the holder in the middle of a 3-second run.
			c.setSleep("3")
			var victim ledgerRun
			waitFor(t, "a long run going", 30*time.Second, func() bool {
				for _, r := range c.ledgerRuns("g") {
					if r.Tick.After(stopped.to) && !r.Ended {
						victim = r
						return true
					}
				}
				return false
			})
			// Its start is in history (written at once, as it started): a
			// node killed within that write's round trip of the start
			// leaves its tick with no record, which audit calls lost.
			waitFor(t, "the long run's start in history", 10*time.Second, func() bool {
				for _, h := range c.allHistory("g") {
					if h.RunID == victim.RunID {
						return true
					}
				}
				return false
			})
			killed := span{from: time.Now()}
			c.nodes[victim.Node].p.Signal(syscall.SIGKILL)
			c.nodes[victim.Node].p.Wait(30 * time.Second)
			c.setSleep("0.2")
			c.start(victim.Node, "")
			waitFor(t, "a run after the kill", 30*time.Second, func() bool {
				rs := c.ledgerRuns("g")
				return len(rs) > 0 && rs[len(rs)-1].Tick.After(killed.from.Add(time.Second)) && rs[len(rs)-1].Node != ""
			})
			killed.to = time.Now()

			// A trigger, and a backfill of two ticks the pause skipped.
			c.trigger("g")
			bf := paused.from.Truncate(time.Second).Add(2 * time.Second)
			cli(t, c.cfg, 0, "backfill", "g", "--from", bf.UTC().Format(time.RFC3339), "--to", bf.Add(time.Second).UTC().Format(time.RFC3339))
			waitFor(t, "the backfilled ticks ran", 60*time.Second, func() bool {
				n := 0
				for _, r := range c.ledgerRuns("g") {
					if (r.Tick.Equal(bf) || r.Tick.Equal(bf.Add(time.Second))) && r.Ended {
						n++
					}
				}
				return n == 2
			})
			time.Sleep(2 * time.Second) // the last records reach history (flushed every 250ms)
			end := time.Now()

			from, to := start.Truncate(time.Second).Add(time.Second), end.Truncate(time.Second).Add(-2*time.Second)
			r := cli(t, c.cfg, 0, "audit", "g", "--from", from.UTC().Format(time.RFC3339), "--to", to.UTC().Format(time.RFC3339), "--json")
			var rows []auditRow
			if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
				t.Fatalf("audit --json: %v\n%s", err, r.Stdout)
			}
			// A manual run's BEXT_TICK_TIME is the second it was accepted,
			// which can be a scheduled tick's too (that tick then skipped
			// as overlap, the manual run holding the lock): the scheduled
			// ticks are held against the scheduled runs alone.
			manual := map[string]bool{}
			for _, row := range rows {
				if row.Manual != nil && *row.Manual && row.RunID != nil {
					manual[*row.RunID] = true
				}
			}
			ledger := map[int64][]ledgerRun{}
			byRunID := map[string]ledgerRun{}
			for _, lr := range c.ledgerRuns("g") {
				if !manual[lr.RunID] {
					ledger[lr.Tick.UnixNano()] = append(ledger[lr.Tick.UnixNano()], lr)
				}
				byRunID[lr.RunID] = lr
			}
			fates := map[string]int{}
			seen := map[string]bool{}
			for _, row := range rows {
				fates[row.Fate]++
				what := fmt.Sprintf("tick %s: %s (reason %s, node %s)", row.Tick.UTC().Format("15:04:05.000"), row.Fate, str(row.Reason), str(row.Node))
				if row.Fate == "lost" {
					t.Errorf("%s: no tick may be lost", what)
					continue
				}
				runs := ledger[row.Tick.UnixNano()]
				switch {
				case row.Fate == "ran":
					// The run its job saw: same run id, node, fence and tick
					// (a trigger's BEXT_TICK_TIME has whole seconds).
					lr, ok := byRunID[str(row.RunID)]
					seen[str(row.RunID)] = true
					switch {
					case !ok:
						t.Errorf("%s run id %s: the ledger has no such run", what, str(row.RunID))
					case row.Node == nil || row.Fence == nil || lr.Node != *row.Node || lr.Fence != *row.Fence ||
						lr.Tick.Sub(row.Tick).Abs() >= time.Second:
						t.Errorf("%s: the ledger says %+v", what, lr)
					case lr.RunID == victim.RunID && str(row.Result) != "running":
						t.Errorf("%s: the killed run's result is %s, want running (its node died before its end)", what, str(row.Result))
					}
				case len(runs) > 0:
					t.Errorf("%s: its job ran on %s with fence %d", what, runs[0].Node, runs[0].Fence)
				case row.Fate == "skipped":
					reason := str(row.Reason)
					var ok bool
					switch reason {
					case "paused":
						ok = paused.has(row.Tick)
					case "stopped":
						ok = stopped.has(row.Tick)
					case "missed", "overlap":
						// Across the stop, around the kill, and anywhere a
						// loaded machine decided a tick late or a run
						// outlived its second.
						ok = !paused.inside(row.Tick)
					}
					if !ok {
						t.Errorf("%s: no fault of that kind was under way", what)
					}
					if stopped.inside(row.Tick) && reason != "stopped" && reason != "missed" {
						t.Errorf("%s: every node was stopped then", what)
					}
				case row.Fate == "pending":
					if row.Tick.Before(end.Add(-10 * time.Second)) {
						t.Errorf("%s: pending long after its tick", what)
					}
				default:
					t.Errorf("%s: the ledger has no run of it", what)
				}
			}
			// Every run the jobs saw in the window is a row (the trigger's
			// too: a row of its own, manual).
			for id, lr := range byRunID {
				if lr.Tick.After(from) && !lr.Tick.After(to) && !seen[id] {
					t.Errorf("the ledger's run of %s (%+v) is not in the audit", lr.Tick.UTC().Format("15:04:05.000"), lr)
				}
			}
			for _, want := range []string{"ran", "skipped"} {
				if fates[want] == 0 {
					t.Errorf("no tick %s: %v", want, fates)
				}
			}
			t.Logf("audit over %v: %v", to.Sub(from), fates)
			text := cli(t, c.cfg, 0, "audit", "g", "--from", from.UTC().Format(time.RFC3339), "--to", to.UTC().Format(time.RFC3339))
			t.Logf("audit g (text):\n%s", text.Stdout)
			if t.Failed() {
				t.Logf("audit:\n%s", r.Stdout)
				return
			}

			// A mark set ahead by hand: the ticks after it are lost.
			ahead := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			raised := time.Now()
			setMarkByHand(t, lockingTOML, "g", ahead)
			var lost []auditRow
			waitFor(t, "audit exits 1 with ticks lost after the mark was raised", 90*time.Second, func() bool {
				r := proctest.Run(t, bin, nil, "audit", "g", "--from", raised.UTC().Format(time.RFC3339), "--json", "--config", c.cfg)
				if r.Code != 1 {
					return false
				}
				lost = lost[:0]
				var rows []auditRow
				if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
					t.Fatalf("audit --json: %v\n%s", err, r.Stdout)
				}
				for _, row := range rows {
					if row.Fate == "lost" {
						lost = append(lost, row)
					}
				}
				return len(lost) >= 3
			})
			for _, row := range lost {
				if row.Tick.Before(raised.Add(-time.Second)) {
					t.Errorf("tick %s before the mark was raised is lost", row.Tick.UTC().Format(time.RFC3339Nano))
				}
			}
			// The alert's metric names the schedule, on the one node that
			// audits it.
			waitFor(t, "bext_scheduler_ticks_lost{schedule=\"g\"} on a node", 30*time.Second, func() bool {
				total := 0.0
				for _, n := range c.nodes {
					total += n.metric(t, "bext_scheduler_ticks_lost", `schedule="g"`)
				}
				return total >= 1
			})
			sum := proctest.Run(t, bin, nil, "audit", "--json", "--config", c.cfg)
			var counts []struct {
				Schedule string `json:"schedule"`
				Lost     int    `json:"lost"`
			}
			if err := json.Unmarshal([]byte(sum.Stdout), &counts); err != nil || sum.Code != 1 || len(counts) != 1 ||
				counts[0].Schedule != "g" || counts[0].Lost < len(lost) {
				t.Errorf("audit (summary) exit %d, %v, want 1 and g's %d lost ticks or more:\n%s\n%s", sum.Code, err, len(lost), sum.Stdout, sum.Stderr)
			}
			stat := cli(t, c.cfg, 0, "status")
			if want := "MARK AHEAD: g: its tick mark says " + ahead.Format(time.RFC3339); !strings.Contains(stat.Stdout, want) {
				t.Errorf("status does not flag g's mark (want %q):\n%s", want, stat.Stdout)
			}
		})
	}
}

// setMarkByHand writes schedule's tick mark in the backend the way
// docs/OPERATING.md tells an operator to ("A tick mark ahead of the
// clock"), as anyone who can write the backend could: a Redis SET of
// '<key_prefix>{<id>}:mark', a Postgres UPDATE of bext_lock_fences.
func setMarkByHand(t *testing.T, lockingTOML, schedule string, mark time.Time) {
	t.Helper()
	field := func(name string) string {
		m := regexp.MustCompile(name + ` = "([^"]*)"`).FindStringSubmatch(lockingTOML)
		if m == nil {
			t.Fatalf("no %s in %s", name, lockingTOML)
		}
		return m[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	us := mark.UnixMicro()
	switch {
	case strings.Contains(lockingTOML, `backend = "redis"`):
		opt, err := goredis.ParseURL(field("url"))
		if err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(opt)
		defer c.Close()
		if err := c.Set(ctx, field("key_prefix")+"{"+schedule+"}:mark", us, 0).Err(); err != nil {
			t.Fatal(err)
		}
	case strings.Contains(lockingTOML, `backend = "pg"`):
		conn, err := pgx.Connect(ctx, field("url"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		tag, err := conn.Exec(ctx, `UPDATE bext_lock_fences SET tick_mark = $1 WHERE namespace = $2 AND key = $3`, us, field("namespace"), schedule)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("setting %s's mark: %v, %d rows", schedule, err, tag.RowsAffected())
		}
	default:
		t.Fatalf("no hand-written mark for %s", lockingTOML)
	}
}

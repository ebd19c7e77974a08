// Command cronrss measures what robfig/cron v3 costs per schedule, the
// way scripts/fleet measures a bext-scheduler node: the process's RSS once
// every schedule is added and the cron is started, divided by the number
// of schedules (the Go runtime's own few MiB included, as they are in the
// node's figure). It is the baseline of the target "under 2x robfig/cron's
// RSS per schedule".
//
// Each schedule is what scripts/fleet gen writes: the spec "0 0 1 1 *" in
// Europe/Paris (one shared zone, as bext-scheduler shares it) and a job
// that knows its id and its command, as a closure.
//
//	go run ./scripts/cronrss -n 100000
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

func main() {
	n := flag.Int("n", 100_000, "schedules")
	spec := flag.String("spec", "0 0 1 1 *", "cron spec of every schedule")
	zone := flag.String("tz", "Europe/Paris", "time zone of every schedule")
	flag.Parse()
	if err := run(*n, *spec, *zone); err != nil {
		fmt.Fprintln(os.Stderr, "cronrss:", err)
		os.Exit(1)
	}
}

func run(n int, spec, zone string) error {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return err
	}
	start := time.Now()
	c := cron.New(cron.WithLocation(loc))
	var ran int
	for i := range n {
		id := fmt.Sprintf("s%06d", i)
		argv := []string{"/bin/true"}
		if _, err := c.AddFunc(spec, func() {
			if id != "" && len(argv) > 0 {
				ran++
			}
		}); err != nil {
			return err
		}
	}
	c.Start()
	defer c.Stop()
	ready := time.Since(start)
	rss, err := vmRSS()
	if err != nil {
		return err
	}
	fmt.Printf("robfig/cron v3: %d schedules %q in %s, ready after %.2f s, RSS %d MiB, RSS per schedule: %d B\n",
		n, spec, zone, ready.Seconds(), rss>>20, rss/int64(n))
	return nil
}

// vmRSS is this process's resident set size in bytes, from /proc.
func vmRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status")
}

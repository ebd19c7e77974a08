package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

const dstConfig = `
[[scheduled]]
id = "paris-nightly"
cron = "30 2 * * *"
timezone = "Europe/Paris"
command = ["true"]

[[scheduled]]
id = "ny-spread"
cron = "CRON_TZ=America/New_York 30 1 * * *"
spread = "10m"
command = ["true"]
`

// nextOut runs `next` and returns its stdout, failing on a non-zero
// exit.
func nextOut(t *testing.T, args ...string) string {
	t.Helper()
	r := proctest.Run(t, bin, nil, append([]string{"next"}, args...)...)
	if r.Code != 0 {
		t.Fatalf("next %v: exit %d\n%s", args, r.Code, r.Stderr)
	}
	return r.Stdout
}

// TestNextFrom: --from shows a daylight-saving night as it will run, in
// the zone that fires (timezone or CRON_TZ=), with the spread offset.
func TestNextFrom(t *testing.T) {
	t.Parallel()
	p := writeFile(t, t.TempDir(), "dst.toml", dstConfig)
	off := cronspec.SpreadOffset("ny-spread", 10*time.Minute)
	nyTick := func(day string) string { // 01:30 EDT + the offset
		at, err := time.Parse(time.RFC3339, day+"T01:30:00-04:00")
		if err != nil {
			t.Fatal(err)
		}
		return at.Add(off).Format(time.RFC3339)
	}

	fall := nextOut(t, "--config", p, "-n", "2", "--from", "2026-10-24T12:00:00Z")
	for _, want := range []string{
		"Europe/Paris", "America/New_York", // the zone that fires, CRON_TZ= included
		"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00", // once on the fall-back night
		"+" + off.String() + " of 10m0s", nyTick("2026-10-25"),
	} {
		if !strings.Contains(fall, want) {
			t.Errorf("next --from 2026-10-24T12:00:00Z lacks %q:\n%s", want, fall)
		}
	}
	if strings.Contains(fall, "2026-10-25T02:30:00+01:00") {
		t.Errorf("02:30 runs twice on the fall-back night:\n%s", fall)
	}

	spring := nextOut(t, "--config", p, "-n", "1", "--from", "2026-03-28T12:00:00+01:00")
	if !strings.Contains(spring, "2026-03-29T03:00:00+02:00") { // 02:30 does not exist: right after the gap
		t.Errorf("the skipped 02:30 does not run at 03:00 CEST:\n%s", spring)
	}
}

func TestNextFromBadTimeExit2(t *testing.T) {
	t.Parallel()
	p := writeFile(t, t.TempDir(), "dst.toml", dstConfig)
	for _, from := range []string{"yesterday", "2026-10-25", "2026-10-25 02:30:00", ""} {
		args := []string{"next", "--config", p, "--from", from}
		if from == "" {
			args = args[:len(args)-1] // --from with no value
		}
		r := proctest.Run(t, bin, nil, args...)
		if r.Code != exitUsage {
			t.Errorf("next --from %q: exit %d, want %d\n%s", from, r.Code, exitUsage, r.Stderr)
			continue
		}
		noCrash(t, r)
		if from != "" && !strings.Contains(r.Stderr, "RFC 3339") {
			t.Errorf("next --from %q: stderr does not say what is wanted:\n%s", from, r.Stderr)
		}
	}
}

func TestCronTZAgainstTimezoneExit2(t *testing.T) {
	t.Parallel()
	p := writeFile(t, t.TempDir(), "tz.toml", `
[[scheduled]]
id = "x"
cron = "CRON_TZ=America/New_York 0 9 * * *"
timezone = "Europe/Paris"
command = ["true"]
`)
	for _, cmd := range []string{"validate", "next"} {
		r := proctest.Run(t, bin, nil, cmd, "--config", p)
		if r.Code != exitUsage || !strings.Contains(r.Stderr, "tz.toml:4:") ||
			!strings.Contains(r.Stderr, `disagrees with timezone "Europe/Paris"`) {
			t.Errorf("%s: exit %d, want %d and the problem at tz.toml:4\n%s", cmd, r.Code, exitUsage, r.Stderr)
		}
	}
}

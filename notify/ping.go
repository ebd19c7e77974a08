package notify

import (
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// The healthchecks.io pinging protocol (https://healthchecks.io/docs/):
// POST <url>/start when the run starts, <url> on success, <url>/fail or
// <url>/<exit status 1..255> on failure; ?rid=<uuid> pairs a start with
// its end. Cronitor, Uptime Kuma's push monitors and self-hosted
// Healthchecks speak it too (or the part of it they need).

// exitCoder is an error that carries a command's exit status (jobs'
// ExitError, exec.ExitError): -1 when a signal killed it.
type exitCoder interface{ ExitCode() int }

// resultSuffix is the path suffix of a run's result ping: "" for success,
// the exit status when the error carries one (1..255), "fail" otherwise.
// ok is false for a cancelled run (shutdown's grace ran out: not the job's
// failure, and a rolling restart must not page): the monitor sees a start
// without an end, which its grace time covers, and the next run's start
// replaces it. Nor is there one for a tick not run (granted too late to
// run): no job ran, and a monitor whose ping does not come is the alert.
func resultSuffix(res scheduler.RunResult, err error) (string, bool) {
	switch res {
	case scheduler.ResultSuccess:
		return "", true
	case scheduler.ResultCancelled, scheduler.ResultReplaced, scheduler.ResultNotRun:
		return "", false
	case scheduler.ResultFailure:
		var ec exitCoder
		if errors.As(err, &ec) {
			if c := ec.ExitCode(); c >= 1 && c <= 255 {
				return strconv.Itoa(c), true
			}
		}
	}
	return "fail", true // failure without a status, timeout, lock_lost
}

// pingURL appends suffix to raw's path and rid to its query (the
// healthchecks.io "slug" URLs may carry a query of their own, ?create=1).
// raw was validated by config; if it does not parse it is used as is, so
// the send fails and is logged (redacted) rather than silently skipped.
func pingURL(raw, suffix, runID string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	if suffix != "" {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/" + suffix
		u.RawPath = ""
	}
	if rid := runUUID(runID); rid != "" {
		q := u.Query()
		q.Set("rid", rid)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

var (
	hex32 = regexp.MustCompile(`^[0-9a-fA-F]{32}$`)
	uuid  = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// runUUID is the run id as healthchecks.io wants a rid: a UUID. The
// scheduler's run ids are 128 random bits in hex, written here in the
// 8-4-4-4-12 form; an id of another shape is not sent ("" ), since the
// monitor would refuse the whole ping.
func runUUID(id string) string {
	switch {
	case uuid.MatchString(id):
		return strings.ToLower(id)
	case hex32.MatchString(id):
		id = strings.ToLower(id)
		return id[:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:]
	}
	return ""
}

// Package config owns bext-scheduler's TOML configuration: the types that
// mirror the file, loading (includes, ${VAR} expansion, defaults) and
// validation that reports every problem with the file and line it comes from.
//
// It checks the file only: nothing here connects to a lock backend or runs a
// job. URLs are secrets (they carry passwords), so no Problem, error or
// Redacted copy ever shows one unredacted.
package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/hints"
)

// ErrInvalid is matched (errors.Is) by every error Load, Parse and Validate
// return, so the CLI can exit 2 for any configuration problem.
var ErrInvalid = errors.New("config: invalid")

// MaxFileSize bounds a configuration file (and each included file). Larger
// files are refused before they are read whole. 32 MiB holds 100,000
// schedules in one file (loading is linear in its size).
const MaxFileSize = 32 << 20

// MaxIncludeBytes bounds the files a config's include globs match, all
// together: a glob wider than meant (a home directory, a log tree) is an
// error, not a node that reads gigabytes at every start and reload. Files
// are counted at their size before they are read.
const MaxIncludeBytes = 64 << 20

// Config mirrors the TOML file. Load fills defaults and resolves every
// schedule; a Config built by hand should be checked with Validate.
type Config struct {
	NodeID string `toml:"node_id"` // default: os.Hostname()
	// Tags are this node's tags ("role=db", "zone=a"): a schedule with
	// nodes runs only on the nodes that have every tag it names. run's
	// --tag adds to them.
	Tags          []string `toml:"tags"`
	ShutdownGrace Duration `toml:"shutdown_grace"` // default 30s
	// Include holds globs, relative to this file's directory, naming more
	// files that hold only [[scheduled]] tables.
	Include []string `toml:"include"`
	HTTP    HTTP     `toml:"http"`
	History History  `toml:"history"`
	Log     Log      `toml:"log"`
	Locking Locking  `toml:"locking"`
	Cluster Cluster  `toml:"cluster"`
	Jobs    Jobs     `toml:"jobs"`
	Notify  Notify   `toml:"notify"`
	// Groups are the concurrency groups ([groups.NAME]) schedules name
	// with group: at most MaxRunning runs of their schedules at once in
	// the cluster.
	Groups    map[string]Group `toml:"groups"`
	Metrics   Metrics          `toml:"metrics"`
	Scheduled []Schedule       `toml:"scheduled"`

	// Path is the absolute path of the main file, set by Load and Parse.
	Path string `toml:"-"`

	file string     // the main file's name as given, for messages
	at   *positions // dotted key path → line in the main file
	// referenced lists the environment variables the files read through
	// ${VAR}, in order of first use: they are masked from command jobs.
	referenced []string
}

// Command-job environment modes ([jobs] env_mode and a schedule's).
const (
	// EnvInherit passes the scheduler's environment to command jobs, minus
	// the variables the config reads through ${VAR} (unless allowed).
	EnvInherit = "inherit"
	// EnvClean starts command jobs from env_allow only.
	EnvClean = "clean"
)

// DefaultCleanAllow is what env_mode = "clean" passes when env_allow is not
// set: what programs need to find themselves and speak the right language.
var DefaultCleanAllow = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// Group is a [groups.NAME] table.
type Group struct {
	// MaxRunning is how many runs of the group's schedules may run at
	// once in the cluster (1 to locking.MaxSlots). Required.
	MaxRunning int `toml:"max_running"`
}

// Metrics is the [metrics] table.
type Metrics struct {
	// PerScheduleHistograms: whether bext_scheduler_run_duration_seconds
	// and bext_scheduler_tick_lateness_seconds have a series per schedule
	// (about 17 each) or one per node. Unset: per schedule while the node
	// holds at most AutoHistogramSchedules schedules.
	PerScheduleHistograms *bool `toml:"per_schedule_histograms"`
}

// AutoHistogramSchedules is the number of schedules up to which the two
// histograms are per schedule when [metrics] per_schedule_histograms is
// unset: past it they would be most of a node's memory and series.
const AutoHistogramSchedules = 1000

// HistogramsPerSchedule reports whether a node holding n schedules keeps
// the two histograms per schedule.
func (m Metrics) HistogramsPerSchedule(n int) bool {
	if m.PerScheduleHistograms != nil {
		return *m.PerScheduleHistograms
	}
	return n <= AutoHistogramSchedules
}

// Jobs is the [jobs] table: defaults for every command job.
type Jobs struct {
	// EnvMode is "inherit" (default) or "clean". See EnvInherit, EnvClean.
	EnvMode string `toml:"env_mode"`
	// EnvAllow names variables passed in either mode (in inherit mode it
	// unmasks ${VAR} sources). Default for clean: DefaultCleanAllow.
	EnvAllow []string `toml:"env_allow"`
}

// Notify is the [notify] table: where failure streaks and the other
// events are told.
type Notify struct {
	// URL receives one JSON POST per event of Events (by default per
	// failure streak, the first failure then the recovery, and per
	// pause_after_failures); "" sends none but to the schedules that set
	// notify_url. Shown only redacted: webhook URLs carry their secret in
	// the path.
	URL string `toml:"url"`
	// Events chooses the events sent, among NotifyEvents; unset:
	// DefaultNotifyEvents. An empty list sends none.
	Events []string `toml:"events"`
	// Timeout bounds each attempt of every notification and ping_url
	// ping; default 5s, at most 5s.
	Timeout Duration `toml:"timeout"`
}

// The events [notify] events chooses among (notify.Events, a contract).
var NotifyEvents = []string{"failure", "recovery", "paused", "overrun", "too_fast", "missed", "lost"}

// DefaultNotifyEvents are the events sent when [notify] events is unset.
var DefaultNotifyEvents = []string{"failure", "recovery", "paused"}

// EventsOrDefault is the events sent: Events, or DefaultNotifyEvents when
// unset.
func (n Notify) EventsOrDefault() []string {
	if n.Events == nil {
		return DefaultNotifyEvents
	}
	return n.Events
}

// HTTP is the [http] table: the listener of /metrics, /healthz, /readyz
// and the operators' API.
type HTTP struct {
	// Listen is host:port; "" or "off" disables the listener.
	// Default "127.0.0.1:9464".
	Listen string `toml:"listen"`
	// Token is the bearer token the API's writes (trigger, pause, resume,
	// backfill) need; "" refuses every write. Usually "${VAR}". A secret:
	// String and Redacted mask it.
	Token string `toml:"token"`
	// ReadToken, when set, is needed for the API's reads too (the write
	// token is accepted for them as well). A secret like Token.
	ReadToken string `toml:"read_token"`
	// MaxConnections caps the connections served at once; more wait in the
	// kernel's queue. Default DefaultMaxConnections, 1 to
	// MaxMaxConnections. The node lowers it further to half its
	// descriptor limit, so a flood of connections cannot take the
	// descriptors its jobs need.
	MaxConnections int `toml:"max_connections"`
	// Hosts are the extra host names (no port) a request's Host header may
	// carry, besides the listen address, loopback names and addresses, and,
	// on a 0.0.0.0 or :: listen, any IP address. Another Host is refused
	// (421), so a web page cannot reach the API through a name of its own
	// that resolves here (DNS rebinding).
	Hosts []string `toml:"hosts"`
}

// String shows the settings with the tokens masked, so logging the struct
// cannot leak them.
func (h HTTP) String() string {
	return fmt.Sprintf("{listen=%q token=%s read_token=%s max_connections=%d hosts=%q}",
		h.Listen, maskSet(h.Token), maskSet(h.ReadToken), h.MaxConnections, h.Hosts)
}

// maskSet shows whether a secret is set, never the secret.
func maskSet(s string) string {
	if s == "" {
		return `""`
	}
	return redacted
}

// History is the [history] table: the run history kept in the backend.
type History struct {
	// Keep is how many runs per schedule are kept (newest first); default
	// cluster.DefaultKeep.
	Keep int `toml:"keep"`
	// AuditEvery is how often the cluster audits each schedule's recent
	// ticks for bext_scheduler_ticks_lost (one live node per schedule, three
	// small reads each); default DefaultAuditEvery.
	AuditEvery Duration `toml:"audit_every"`
}

// Enabled reports whether the HTTP listener should run.
func (h HTTP) Enabled() bool { return h.Listen != "" && h.Listen != "off" }

// Log is the [log] table.
type Log struct {
	Level  string `toml:"level"`  // debug | info | warn | error; default info
	Format string `toml:"format"` // text | json; default text
}

// Backend names, as spelled in [locking] backend.
const (
	BackendNone   = ""
	BackendMemory = "memory"
	BackendRedis  = "redis"
	BackendPG     = "pg"
)

// Locking is the [locking] table.
// Cluster is the [cluster] table: how the nodes share the work.
type Cluster struct {
	// HandoffDelay is how long a node that is not a tick's preferred node
	// waits, at the first rank, before it asks for the tick itself (later
	// ranks wait up to twice as long); "0s" turns the handoff off: every
	// node asks at once. Default DefaultHandoffDelay, or half of
	// max_clock_skew when that is less.
	HandoffDelay Duration `toml:"handoff_delay"`
}

// Handoff is the effective handoff delay for max_clock_skew skew; 0 is off.
func (c Cluster) Handoff(skew time.Duration) time.Duration {
	return min(c.HandoffDelay.Duration, skew/2)
}

type Locking struct {
	Backend      string   `toml:"backend"`        // "" (none) | memory | redis | pg
	SafetyMargin Duration `toml:"safety_margin"`  // added to every TTL; default 5s
	MaxClockSkew Duration `toml:"max_clock_skew"` // try-lock-tick's skew tolerance; default 1s
	Redis        Redis    `toml:"redis"`
	PG           PG       `toml:"pg"`
}

// HintBackend says what kind of backend Backend names, for hints.Resolve.
// An unknown backend reports hints.None.
func (l Locking) HintBackend() hints.Backend {
	switch l.Backend {
	case BackendMemory:
		return hints.Local
	case BackendRedis, BackendPG:
		return hints.Distributed
	}
	return hints.None
}

// Redis is [locking.redis].
type Redis struct {
	URL       string   `toml:"url"`        // required when backend = "redis"
	KeyPrefix string   `toml:"key_prefix"` // default "bext:lock:"
	OpTimeout Duration `toml:"op_timeout"` // default 2s
}

// String shows the settings with the URL redacted, so logging the struct
// cannot leak its password.
func (r Redis) String() string {
	return fmt.Sprintf("{url=%s key_prefix=%q op_timeout=%v}", RedactURL(r.URL), r.KeyPrefix, r.OpTimeout)
}

// PG is [locking.pg].
type PG struct {
	URL         string   `toml:"url"`          // required when backend = "pg"; URL or keyword DSN
	Namespace   string   `toml:"namespace"`    // hashed into every advisory key; default "bext"
	MaxSessions int      `toml:"max_sessions"` // sessions that may pin a lock; default 16
	OpTimeout   Duration `toml:"op_timeout"`   // default 5s
}

// String shows the settings with the URL redacted.
func (p PG) String() string {
	return fmt.Sprintf("{url=%s namespace=%q max_sessions=%d op_timeout=%v}",
		RedactURL(p.URL), p.Namespace, p.MaxSessions, p.OpTimeout)
}

// Overlap policies.
const (
	OverlapSkip    = "skip"    // skip a tick while this node still runs the previous one
	OverlapAllow   = "allow"   // run ticks concurrently
	OverlapQueue   = "queue"   // one tick waits for the running run, then starts
	OverlapReplace = "replace" // one tick stops the running run, waits for its lock, then starts
)

// What becomes of a run whose node died (on_node_loss).
const (
	OnNodeLossSkip  = "skip"  // nothing: the tick ran nowhere to its end
	OnNodeLossRerun = "rerun" // another node runs it again, once
)

// Schedule is one [[scheduled]] table. A schedule runs either Command or
// HTTP, never both.
type Schedule struct {
	ID              string   `toml:"id"`               // unique; the lock key
	Plugin          string   `toml:"plugin"`           // optional label, as in bext
	Cron            string   `toml:"cron"`             // 5 or 6 fields, descriptors, CRON_TZ=
	Timezone        string   `toml:"timezone"`         // IANA name; default UTC
	Hint            string   `toml:"hint"`             // default prefer_global
	ExpectedRuntime Duration `toml:"expected_runtime"` // default 1m
	Jitter          Duration `toml:"jitter"`           // default 0
	Timeout         Duration `toml:"timeout"`          // default none (0)
	Overlap         string   `toml:"overlap"`          // skip | allow | queue | replace; default skip
	// CatchupWindow is how late a tick may still start, once: nil (unset)
	// means one period of the schedule, "0s" never late. See Catchup.
	CatchupWindow *Duration `toml:"catchup_window"`
	// Spread bounds a stable per-schedule offset added to every tick
	// (cronspec.SpreadOffset); default 0. It must be below the shortest
	// time between two ticks.
	Spread Duration `toml:"spread"`
	// Retries is how many times a failed run is retried within its tick,
	// lock held; RetryBackoff the wait before the first retry, doubling.
	// Default 0 and 0 (the scheduler's default backoff applies when only
	// retries is set).
	Retries      int      `toml:"retries"`
	RetryBackoff Duration `toml:"retry_backoff"`
	// PauseAfterFailures pauses the schedule cluster-wide after that many
	// failed runs in a row; default 0, never.
	PauseAfterFailures int `toml:"pause_after_failures"`
	// Except lists the dates with no tick, in the schedule's zone:
	// "2026-12-25", or "*-01-01" for every year. Start and End bound the
	// ticks (both included); zero for no bound. In a file: RFC 3339
	// strings or TOML date-times with an offset. cronspec.WithCalendar
	// applies them to Spec.
	Except     []string  `toml:"except"`
	Start, End time.Time `toml:"-"`
	// Nodes targets the schedule: only nodes whose tags include every one
	// of these ask for its ticks ("role=db"). Empty: every node.
	Nodes []string `toml:"nodes"`
	// Group names the concurrency group ([groups.NAME]) the schedule's
	// runs count in; GroupWait makes a tick that finds it full wait for a
	// slot within its catch-up window instead of skipping (group_full).
	// GroupMax is the group's max_running, set by Load.
	Group     string `toml:"group"`
	GroupWait bool   `toml:"group_wait"`
	GroupMax  int    `toml:"-"`
	// OnNodeLoss says what becomes of a run whose node died mid-run:
	// OnNodeLossSkip (default: the tick is lost, as history shows) or
	// OnNodeLossRerun (another node runs it again, once, within the
	// tick's catch-up window).
	OnNodeLoss string `toml:"on_node_loss"`

	// A command job: argv (no shell), working directory, extra environment.
	Command []string          `toml:"command"`
	Dir     string            `toml:"dir"`
	Env     map[string]string `toml:"env"`
	// EnvMode and EnvAllow override [jobs] for this schedule. Validate
	// resolves them (EnvMode never "" after it) and sets EnvMask.
	EnvMode  string   `toml:"env_mode"`
	EnvAllow []string `toml:"env_allow"`
	EnvMask  []string `toml:"-"` // the config's ${VAR} sources

	// An HTTP job.
	HTTP *HTTPJob `toml:"http"`
	// GoJob: the job is a Go function the embedding program supplies
	// (node.Options.Jobs), so the schedule sets neither command nor
	// [scheduled.http]. Never read from a file: set by Parse's
	// WithGoJobs, or by hand before Validate.
	GoJob bool `toml:"-"`

	// PingURL is a dead-man's switch speaking the healthchecks.io
	// protocol, pinged once per run by the node that ran it; "" for none.
	// A secret: shown only redacted.
	PingURL string `toml:"ping_url"`
	// NotifyURL receives this schedule's [notify] events instead of
	// [notify] url; "" for that one. A secret like PingURL.
	NotifyURL string `toml:"notify_url"`
	// MinRuntime: a successful run faster than it is a too_fast anomaly;
	// 0 (default) for none. Below ExpectedRuntime.
	MinRuntime Duration `toml:"min_runtime"`

	File string `toml:"-"` // the file it was declared in, as named in messages
	Line int    `toml:"-"` // the line of its [[scheduled]] header; 0 when unknown

	// Resolved by Load and Validate. Location is the zone the schedule
	// fires in (timezone, or the cron's CRON_TZ= prefix); Spec gives the
	// ticks as they fire, Offset (the spread offset) included.
	Location  *time.Location `toml:"-"`
	Spec      cronspec.Spec  `toml:"-"`
	Offset    time.Duration  `toml:"-"`
	HintValue hints.Hint     `toml:"-"`

	at keyLines // lines of its keys ("cron", "http.url"), when loaded from a file
}

// NoCatchup is Catchup's answer for an explicit catchup_window = "0s":
// never run a tick late (the node maps it to scheduler.NoCatchup; config
// does not import the engine).
const NoCatchup time.Duration = -1

// Catchup is the schedule's catch-up window: 0 (the default, one period)
// when unset, and NoCatchup for an explicit "0s".
func (s *Schedule) Catchup() time.Duration {
	switch {
	case s.CatchupWindow == nil:
		return 0
	case s.CatchupWindow.Duration == 0:
		return NoCatchup
	}
	return s.CatchupWindow.Duration
}

// HTTPJob is [scheduled.http]: an HTTP request as the job.
type HTTPJob struct {
	URL     string            `toml:"url"`
	Method  string            `toml:"method"` // default GET, or POST when Body is set
	Headers map[string]string `toml:"headers"`
	Body    string            `toml:"body"`
	Timeout Duration          `toml:"timeout"` // default 30s
	// SuccessCodes lists the statuses that count as success; empty means
	// any 2xx.
	SuccessCodes []int `toml:"success_codes"`
}

// Duration is a time.Duration spelled in TOML as a Go duration string
// ("30s", "2m", "1h30m"). Negative durations are rejected.
type Duration struct{ time.Duration }

// UnmarshalText parses a non-negative Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as Go spells it.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (want a Go duration such as \"30s\", \"2m\" or \"1h30m\")", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return v, nil
}

// Problem is one thing wrong with the configuration.
type Problem struct {
	File string
	Line int // 1-based; 0 when unknown
	Msg  string
}

// String formats the problem as "file:line: msg" (or "file: msg").
func (p Problem) String() string {
	switch {
	case p.File == "" && p.Line == 0:
		return p.Msg
	case p.Line == 0:
		return p.File + ": " + p.Msg
	}
	return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
}

// where is "file:line" (or "file").
func (p Problem) where() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// Error holds every problem found. It matches ErrInvalid, and also the
// cause of a file that could not be read (fs.ErrNotExist, fs.ErrPermission).
type Error struct {
	Problems []Problem

	causes []error
}

// Error lists the problems, one per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the causes of unreadable files, so errors.Is(err,
// fs.ErrNotExist) tells a missing file from a bad one.
func (e *Error) Unwrap() []error { return e.causes }

// Referenced returns the environment variables the config read through
// ${VAR}: their values may be secrets, and are masked wherever the
// scheduler stores or shows text a job produced.
func (c *Config) Referenced() []string { return append([]string(nil), c.referenced...) }

// ReleaseSchedules drops the schedules' tables and the key positions kept
// for messages. A running node calls it once it has built its own
// schedules from them: it never reads them again, and at 100,000
// schedules they hold about a kilobyte each. The top-level settings stay
// (a reload compares them).
func (c *Config) ReleaseSchedules() {
	c.Scheduled = nil
	c.at = nil
}

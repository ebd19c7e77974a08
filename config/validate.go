package config

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bext-dev/bext-scheduler/cronspec"
	"github.com/bext-dev/bext-scheduler/hints"
	"github.com/bext-dev/bext-scheduler/locking"
)

// Validate checks c and resolves each schedule's Location, Spec and
// HintValue. It reports every problem it finds, as an *Error, not just the
// first. Load and Parse call it; call it yourself on a Config built by hand.
func (c *Config) Validate() error {
	b := &builder{problems: c.validate()}
	return b.err()
}

// validate returns c's problems, resolving schedules as it goes.
func (c *Config) validate() []Problem {
	v := validator{file: c.file}
	if v.file == "" {
		v.file = c.Path
	}
	at := c.at.line

	if err := locking.CheckKey(c.NodeID); err != nil {
		v.add(at("node_id"), "node_id: %s", keyProblem(err, "the host name is unknown; set node_id"))
	}
	for i, tag := range c.Tags {
		if err := CheckTag(tag); err != nil {
			v.add(at("tags"), "tags[%d]: %v", i, err)
		}
	}
	v.positive(c.ShutdownGrace, "shutdown_grace", at("shutdown_grace"),
		"running jobs need some time to finish at shutdown")
	if c.HTTP.Enabled() {
		if err := CheckListen(c.HTTP.Listen); err != nil {
			v.add(at("http.listen"), "http.listen %q: %v (or \"off\" to disable)", c.HTTP.Listen, err)
		}
	}
	v.token(c.HTTP.Token, "http.token", at("http.token"))
	v.token(c.HTTP.ReadToken, "http.read_token", at("http.read_token"))
	if m := c.HTTP.MaxConnections; m < 1 || m > MaxMaxConnections {
		v.add(at("http.max_connections"), "http.max_connections is %d; want 1 to %d (connections served at once)", m, MaxMaxConnections)
	}
	for i, h := range c.HTTP.Hosts {
		// The value is not quoted: it may have come from ${VAR}.
		if err := CheckHost(h); err != nil {
			key := "http.hosts." + strconv.Itoa(i)
			v.add(at(key), "http.hosts[%d]: %v", i, err)
		}
	}
	if k := c.History.Keep; k < 1 || k > MaxHistoryKeep {
		v.add(at("history.keep"), "history.keep is %d; want 1 to %d (runs kept per schedule)", k, MaxHistoryKeep)
	}
	if d := c.History.AuditEvery.Duration; d < time.Second {
		v.add(at("history.audit_every"), "history.audit_every is %v; want 1s or more", d)
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error": // "" is the default, info
	default:
		v.add(at("log.level"), "log.level: unknown level %q (want debug, info, warn or error)", c.Log.Level)
	}
	switch c.Log.Format {
	case "", "text", "json": // "" is the default, text
	default:
		v.add(at("log.format"), "log.format: unknown format %q (want text or json)", c.Log.Format)
	}
	v.locking(&c.Locking, at)
	v.cluster(c.Cluster, c.Locking.MaxClockSkew.Duration, at)
	v.notify(c.Notify, at)
	v.envMode(c.Jobs.EnvMode, "jobs.env_mode", at("jobs.env_mode"))
	v.envNames(c.Jobs.EnvAllow, "jobs.env_allow", at)

	// Sized once: grown from empty, its rehashing was a tenth of the
	// validation of 100,000 schedules.
	names := make([]string, 0, len(c.Groups))
	for name := range c.Groups {
		names = append(names, name)
	}
	slices.Sort(names) // one order of problems, whatever the map's
	for _, name := range names {
		key := "groups." + name
		if err := CheckGroupName(name); err != nil {
			v.add(at(key), "[groups.%s]: %v", name, err)
		}
		if m := c.Groups[name].MaxRunning; m < 1 || m > locking.MaxSlots {
			v.add(at(key+".max_running"), "[groups.%s] max_running is %d; want 1 to %d (runs of its schedules at once in the cluster)", name, m, locking.MaxSlots)
		}
		if c.Locking.Backend == "" {
			v.add(at(key), "[groups.%s]: a group's count is kept in the lock backend: set [locking] backend (\"memory\" on a single node)", name)
		}
	}
	first := make(map[string]*Schedule, len(c.Scheduled))
	for i := range c.Scheduled {
		s := &c.Scheduled[i]
		v.schedule(s, c.Locking)
		v.group(s, c.Groups)
		c.resolveEnv(s, &v)
		if s.ID == "" {
			continue
		}
		if f, dup := first[s.ID]; dup {
			v.atSchedule(s, "id", "duplicate id %q: also declared at %s", s.ID, Problem{File: f.File, Line: f.at.lineOr("id", f.Line)}.where())
			continue
		}
		first[s.ID] = s
	}
	return v.problems
}

// validator collects problems; file names the main file.
type validator struct {
	file     string
	problems []Problem
	// fires caches never by spec: schedules of one expression share their
	// spec, and a fleet repeats a handful of expressions.
	fires map[cronspec.Spec]bool
}

// never reports whether spec has no tick in the next five years from now
// (robfig/cron's search horizon: its Next returns the zero time past it).
// Such a cron ("0 0 30 2 *") parses, and a node would hold it forever
// without running it. The wall clock, not an injected one: the question
// is about the calendar the node will run in.
func (v *validator) never(spec cronspec.Spec) bool {
	fires, ok := v.fires[spec]
	if !ok {
		fires = !spec.Next(time.Now()).IsZero()
		if v.fires == nil {
			v.fires = map[cronspec.Spec]bool{}
		}
		v.fires[spec] = fires
	}
	return !fires
}

func (v *validator) add(line int, format string, args ...any) {
	v.problems = append(v.problems, Problem{File: v.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// atSchedule reports a problem with key of s, at the key's line when known.
func (v *validator) atSchedule(s *Schedule, key, format string, args ...any) {
	if key != "" && s.at.mistyped(key) {
		return // the value of the wrong type was reported: it is the problem
	}
	msg := fmt.Sprintf(format, args...)
	if s.ID != "" && key != "id" {
		msg = fmt.Sprintf("schedule %q: %s", s.ID, msg)
	}
	file := s.File
	if file == "" {
		file = v.file
	}
	v.problems = append(v.problems, Problem{File: file, Line: s.at.lineOr(key, s.Line), Msg: msg})
}

func (v *validator) nonNegative(d Duration, name string, line int) {
	if d.Duration < 0 {
		v.add(line, "%s: negative duration %v", name, d.Duration)
	}
}

// positive rejects zero as well as negative durations, for settings where
// zero would silently disable a protection.
func (v *validator) positive(d Duration, name string, line int, why string) {
	switch {
	case d.Duration < 0:
		v.add(line, "%s: negative duration %v", name, d.Duration)
	case d.Duration == 0:
		v.add(line, "%s: must be more than 0 (%s)", name, why)
	}
}

// cluster checks [cluster]. A handoff delay above half of max_clock_skew
// is refused when the operator wrote it: the scheduler never lets a turn
// come later than that (a tick handed over must stay on time), so it
// would silently not be what was asked for. The default is quietly capped
// at half of a small max_clock_skew instead.
func (v *validator) cluster(c Cluster, skew time.Duration, at func(string) int) {
	d := c.HandoffDelay.Duration
	line := at("cluster.handoff_delay")
	switch {
	case d < 0:
		v.add(line, "cluster.handoff_delay: negative duration %v", d)
	case d > skew/2 && skew > 0 && (line > 0 || d != DefaultHandoffDelay):
		v.add(line, "cluster.handoff_delay: %v is more than half of locking.max_clock_skew (%v): a tick handed to another node must still start on time; lower it, or \"0s\" to turn the handoff off", d, skew)
	}
}

func (v *validator) locking(l *Locking, at func(string) int) {
	v.positive(l.SafetyMargin, "locking.safety_margin", at("locking.safety_margin"),
		"it covers lock-backend latency and clock-rate differences in every TTL")
	v.positive(l.MaxClockSkew, "locking.max_clock_skew", at("locking.max_clock_skew"),
		"no two clocks agree exactly, and a lock granted later than tick + max_clock_skew does not run the tick")
	backendLine := at("locking.backend")
	switch l.Backend {
	case BackendNone, BackendMemory:
	case BackendRedis:
		r := l.Redis
		switch {
		case r.URL == "":
			v.add(backendLine, "locking.backend = \"redis\" needs locking.redis.url")
		default:
			if err := checkRedisURL(r.URL); err != nil {
				v.add(at("locking.redis.url"), "locking.redis.url %s: %v", RedactURL(r.URL), err)
			} else if why := backendURLProblem(BackendRedis, r.URL); why != "" {
				v.add(at("locking.redis.url"), "locking.redis.url %s: %s", RedactURL(r.URL), why)
			}
		}
		if r.OpTimeout.Duration <= 0 {
			v.add(at("locking.redis.op_timeout"), "locking.redis.op_timeout must be more than zero")
		}
	case BackendPG:
		p := l.PG
		switch {
		case p.URL == "":
			v.add(backendLine, "locking.backend = \"pg\" needs locking.pg.url")
		default:
			if err := checkPGURL(p.URL); err != nil {
				v.add(at("locking.pg.url"), "locking.pg.url %s: %v", RedactURL(p.URL), err)
			} else if why := backendURLProblem(BackendPG, p.URL); why != "" {
				v.add(at("locking.pg.url"), "locking.pg.url %s: %s", RedactURL(p.URL), why)
			}
		}
		if p.Namespace == "" {
			v.add(at("locking.pg.namespace"), "locking.pg.namespace is empty")
		}
		if p.MaxSessions < 1 {
			v.add(at("locking.pg.max_sessions"), "locking.pg.max_sessions is %d; it must be at least 1", p.MaxSessions)
		}
		if p.OpTimeout.Duration <= 0 {
			v.add(at("locking.pg.op_timeout"), "locking.pg.op_timeout must be more than zero")
		}
	default:
		v.add(backendLine, "locking.backend: unknown backend %q (want memory, redis or pg, or leave it out)", l.Backend)
	}
}

// schedule checks one schedule and resolves its Location, Spec and HintValue.
func (v *validator) schedule(s *Schedule, l Locking) {
	if err := locking.CheckKey(s.ID); err != nil {
		v.atSchedule(s, "id", "schedule id: %s", keyProblem(err, "empty id: every schedule needs a unique id (it is the lock key)"))
	} else if strings.ContainsAny(s.ID, "{}") {
		// Rejected, not escaped: the Redis backend stores the id inside a
		// {hash tag} so that the lock, its fence and its mark share a slot;
		// a brace would end the tag early (or open another), scattering
		// them across Redis Cluster slots. An escape would make the stored
		// key differ from the id operators see in `next`, `locks` and
		// redis-cli. The rule holds on every backend, so switching backend
		// stays a one-line change.
		v.atSchedule(s, "id", "schedule id %q: '{' and '}' are not allowed (the Redis backend keeps the id in a {hash tag})", s.ID)
	}

	s.Location = time.UTC
	if s.Timezone != "" {
		loc, err := cronspec.LoadLocation(s.Timezone)
		if err != nil {
			v.atSchedule(s, "timezone", "unknown timezone %q (want an IANA name such as \"Europe/Paris\")", s.Timezone)
		} else {
			s.Location = loc
		}
	}
	s.Spec, s.Offset = nil, 0
	calendarOK := v.checkCalendar(s) // reported whatever the cron's fate
	if s.Cron == "" {
		v.atSchedule(s, "cron", "cron is missing")
	} else if spec, err := cronspec.Parse(s.Cron, s.Location); err != nil {
		v.atSchedule(s, "cron", "bad cron %q: %s", s.Cron, strings.TrimPrefix(strings.TrimPrefix(err.Error(), "scheduler: "), "cron expression: "))
	} else if spec, ok := v.calendar(s, spec, calendarOK); !ok {
		// reported
	} else if v.never(spec) && !cronspec.Ended(spec, time.Now()) {
		if cronspec.CalendarText(spec) != "" {
			v.atSchedule(s, "cron", "cron %q: no tick in the next five years once except, start and end are applied: it never fires", s.Cron)
		} else {
			v.atSchedule(s, "cron", "cron %q: no tick in the next five years: it never fires (a day the month does not have?)", s.Cron)
		}
	} else {
		s.Spec = spec
		v.zoneAndSpread(s)
	}

	s.HintValue = ""
	if h, err := hints.Parse(s.Hint); err != nil {
		v.atSchedule(s, "hint", "unknown hint %q (want node_local, require_global or prefer_global)", s.Hint)
	} else {
		s.HintValue = h
		known := l.Backend == BackendNone || l.HintBackend() != hints.None
		if _, err := hints.Resolve(h, l.HintBackend()); known && errors.Is(err, hints.ErrNoBackend) {
			v.atSchedule(s, "hint", "hint %q needs a lock backend: set [locking] backend (memory, redis or pg)", h)
		}
	}
	switch s.Overlap {
	case "", OverlapSkip, OverlapAllow, OverlapQueue, OverlapReplace:
	default:
		v.atSchedule(s, "overlap", "unknown overlap %q (want skip, allow, queue or replace)", s.Overlap)
	}
	v.onNodeLoss(s, l)
	for _, d := range []struct {
		key string
		d   Duration
	}{{"expected_runtime", s.ExpectedRuntime}, {"jitter", s.Jitter}, {"timeout", s.Timeout}, {"spread", s.Spread}} {
		if d.d.Duration < 0 {
			v.atSchedule(s, d.key, "%s: negative duration %v", d.key, d.d.Duration)
		}
	}

	if s.Retries < 0 {
		v.atSchedule(s, "retries", "retries is %d; it must be 0 or more", s.Retries)
	}
	if s.RetryBackoff.Duration < 0 {
		v.atSchedule(s, "retry_backoff", "retry_backoff: negative duration %v", s.RetryBackoff.Duration)
	}
	if s.PauseAfterFailures < 0 {
		v.atSchedule(s, "pause_after_failures", "pause_after_failures is %d; it must be 0 (never) or more", s.PauseAfterFailures)
	}
	if s.Nodes != nil && len(s.Nodes) == 0 {
		v.atSchedule(s, "nodes", "nodes is empty: no node would run it; name the tags its nodes need, such as [\"role=db\"], or remove the key for every node")
	}
	for i, tag := range s.Nodes {
		if err := CheckTag(tag); err != nil {
			v.atSchedule(s, "nodes", "nodes[%d]: %v", i, err)
		}
	}
	v.pingAndMinRuntime(s)

	if s.CatchupWindow != nil && s.CatchupWindow.Duration < 0 {
		v.atSchedule(s, "catchup_window", "catchup_window: negative duration %v (\"0s\" never runs a late tick)", s.CatchupWindow.Duration)
	}

	switch {
	case s.GoJob && (s.Command != nil || s.HTTP != nil):
		v.atSchedule(s, "command", "its job is a Go function of the program; it sets no command or [scheduled.http]")
	case s.GoJob:
	case s.Command == nil && s.HTTP == nil:
		if s.at.mistyped("command") || s.at.mistyped("http") {
			break // reported: its job is there, in the wrong type
		}
		v.atSchedule(s, "", "no job: set command = [...] or a [scheduled.http] table")
	case s.Command != nil && s.HTTP != nil:
		v.atSchedule(s, "command", "both command and [scheduled.http] are set; a schedule runs one job")
	case s.Command != nil:
		v.command(s)
	default:
		v.httpJob(s)
	}
}

// notify checks the [notify] table.
func (v *validator) notify(n Notify, at func(string) int) {
	if n.URL != "" {
		if err := checkHTTPURL(n.URL); err != nil {
			v.add(at("notify.url"), "notify.url %s: %v", RedactURL(n.URL), err)
		}
	}
	for _, e := range n.Events {
		if !slices.Contains(NotifyEvents, e) {
			v.add(at("notify.events"), "notify.events: unknown event %q (want %s)", e, orList(NotifyEvents))
		}
	}
	switch d := n.Timeout.Duration; {
	case d < 0: // 0 is the default (a Config built by hand); a file's "0s" is refused at load
		v.add(at("notify.timeout"), "notify.timeout: negative duration %v", d)
	case d > MaxNotifyTimeout:
		v.add(at("notify.timeout"), "notify.timeout %v is over %v: a ping must never wait long for its monitor", d, MaxNotifyTimeout)
	}
}

// pingAndMinRuntime checks ping_url, notify_url and min_runtime.
func (v *validator) pingAndMinRuntime(s *Schedule) {
	if s.PingURL != "" {
		if err := checkHTTPURL(s.PingURL); err != nil {
			v.atSchedule(s, "ping_url", "ping_url %s: %v", RedactURL(s.PingURL), err)
		}
	}
	if s.NotifyURL != "" {
		if err := checkHTTPURL(s.NotifyURL); err != nil {
			v.atSchedule(s, "notify_url", "notify_url %s: %v", RedactURL(s.NotifyURL), err)
		}
	}
	switch m := s.MinRuntime.Duration; {
	case m < 0:
		v.atSchedule(s, "min_runtime", "min_runtime: negative duration %v", m)
	case m > 0 && s.ExpectedRuntime.Duration > 0 && m >= s.ExpectedRuntime.Duration:
		v.atSchedule(s, "min_runtime", "min_runtime %v is not below expected_runtime %v: every run would be too fast or overrun", m, s.ExpectedRuntime.Duration)
	}
}

// checkCalendar checks except, start and end, reporting every bad one. A
// schedule whose end has passed is valid: it fires no more (a config is
// not broken by the date), and `next` shows no tick.
func (v *validator) checkCalendar(s *Schedule) bool {
	ok := true
	for _, e := range s.Except {
		if err := cronspec.ParseExcept(e); err != nil {
			v.atSchedule(s, "except", "%s", strings.TrimPrefix(err.Error(), cronspec.ErrCalendar.Error()+": "))
			ok = false
		}
	}
	if !s.Start.IsZero() && !s.End.IsZero() && s.End.Before(s.Start) {
		v.atSchedule(s, "end", "end %s is before start %s", s.End.Format(time.RFC3339), s.Start.Format(time.RFC3339))
		ok = false
	}
	return ok
}

// calendar applies except, start and end to spec, when checkCalendar
// found them good (ok).
func (v *validator) calendar(s *Schedule, spec cronspec.Spec, ok bool) (cronspec.Spec, bool) {
	if !ok {
		return nil, false
	}
	spec, err := cronspec.WithCalendar(spec, cronspec.Calendar{Except: s.Except, Start: s.Start, End: s.End})
	if err != nil { // checked above; kept for a rule added there only
		v.atSchedule(s, "except", "%s", strings.TrimPrefix(err.Error(), cronspec.ErrCalendar.Error()+": "))
		return nil, false
	}
	return spec, true
}

// zoneAndSpread checks what the parsed cron says against timezone and
// spread, and resolves the zone the schedule fires in and its offset.
func (v *validator) zoneAndSpread(s *Schedule) {
	if zone, ok := cronspec.CronTZ(s.Cron); ok && s.Timezone != "" && zone != s.Timezone {
		v.atSchedule(s, "cron", "cron's time zone %q disagrees with timezone %q: keep one of them", zone, s.Timezone)
	}
	if loc := cronspec.Location(s.Spec); loc != nil {
		s.Location = loc
	}
	if s.Spread.Duration <= 0 {
		return
	}
	if p := cronspec.MinPeriod(s.Spec); p > 0 && s.Spread.Duration >= p {
		v.atSchedule(s, "spread", "spread %v is not below the schedule's shortest time between ticks (%v)", s.Spread.Duration, p)
		return
	}
	// The one place a spread is applied (the scheduler and ops call it
	// too, and leave a spec that carries its offset as it is).
	s.Spec = cronspec.ApplySpread(s.Spec, s.ID, s.Spread.Duration)
	s.Offset = cronspec.Offset(s.Spec)
}

func (v *validator) command(s *Schedule) {
	if len(s.Command) == 0 || s.Command[0] == "" {
		v.atSchedule(s, "command", "empty command: the first element must name the program to run")
	}
	for k, val := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			v.atSchedule(s, "env."+k, "env: bad variable name %q", k)
		} else if strings.ContainsRune(val, 0) {
			v.atSchedule(s, "env."+k, "env: value of %s contains a NUL byte", k)
		}
	}
}

func (v *validator) httpJob(s *Schedule) {
	h := s.HTTP
	if err := checkHTTPURL(h.URL); err != nil {
		v.atSchedule(s, "http.url", "http.url %s: %v", RedactURL(h.URL), err)
	}
	switch strings.ToUpper(h.Method) {
	case "", http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		v.atSchedule(s, "http.method", "http.method: unknown method %q (want GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS)", h.Method)
	}
	for name, val := range h.Headers {
		if !isToken(name) {
			v.atSchedule(s, "http.headers."+name, "http.headers: bad header name %q", name)
		} else if strings.ContainsAny(val, "\r\n\x00") {
			v.atSchedule(s, "http.headers."+name, "http.headers: value of %q contains a line break", name)
		}
	}
	if h.Timeout.Duration < 0 {
		v.atSchedule(s, "http.timeout", "http.timeout: negative duration %v", h.Timeout.Duration)
	}
	for i, code := range h.SuccessCodes {
		if code < 100 || code > 599 {
			v.atSchedule(s, "http.success_codes."+strconv.Itoa(i), "http.success_codes: %d is not an HTTP status", code)
		}
	}
}

// resolveEnv settles s's command environment from its own keys, then
// [jobs], then the defaults, and masks the config's ${VAR} sources.
func (c *Config) resolveEnv(s *Schedule, v *validator) {
	if s.EnvMode != "" {
		switch s.EnvMode {
		case EnvInherit, EnvClean:
		default:
			v.atSchedule(s, "env_mode", "unknown env_mode %q (want inherit or clean)", s.EnvMode)
		}
	}
	for i, n := range s.EnvAllow {
		if n == "" || strings.ContainsAny(n, "=\x00") {
			v.atSchedule(s, "env_allow."+strconv.Itoa(i), "env_allow: bad variable name %q", n)
		}
	}
	if s.EnvMode == "" {
		s.EnvMode = c.Jobs.EnvMode
	}
	if s.EnvMode == "" {
		s.EnvMode = EnvInherit
	}
	if s.EnvAllow == nil {
		s.EnvAllow = c.Jobs.EnvAllow
	}
	if s.EnvAllow == nil && s.EnvMode == EnvClean {
		s.EnvAllow = DefaultCleanAllow
	}
	s.EnvMask = c.referenced
}

func (v *validator) envMode(mode, key string, line int) {
	switch mode {
	case "", EnvInherit, EnvClean:
	default:
		v.add(line, "%s: unknown mode %q (want inherit or clean)", key, mode)
	}
}

func (v *validator) envNames(names []string, key string, at func(string) int) {
	for i, n := range names {
		if n == "" || strings.ContainsAny(n, "=\x00") {
			v.add(at(key+"."+strconv.Itoa(i)), "%s: bad variable name %q", key, n)
		}
	}
}

// token checks an API token: it travels in an Authorization header, so it
// must be printable and free of spaces. The message never shows it.
func (v *validator) token(tok, key string, line int) {
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c == 0x7f {
			v.add(line, "%s: the token holds a space or control character (it is sent as \"Authorization: Bearer <token>\")", key)
			return
		}
	}
}

// keyProblem words a locking.CheckKey error; empty explains an empty key.
func keyProblem(err error, empty string) string {
	msg := strings.TrimPrefix(err.Error(), locking.ErrInvalid.Error()+": ")
	if msg == "empty key" {
		return empty
	}
	return msg
}

// CheckListen reports whether addr is a host:port the HTTP server can listen
// on; the CLI checks --listen with it too.
func CheckListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// CheckHost reports whether h can be an [http] hosts entry: a host name or
// IP address as a Host header carries it, without port or scheme.
func CheckHost(h string) error {
	switch {
	case h == "":
		return errors.New("empty; want a host name such as \"bext.example.com\"")
	case net.ParseIP(h) != nil:
		return nil
	case strings.Contains(h, "://"):
		return errors.New("want a host name, not a URL (no scheme)")
	case strings.Contains(h, ":"):
		return errors.New("want a host name without a port (any port is accepted)")
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return errors.New("not a host name (letters, digits, '-', '_' and '.' only)")
		}
	}
	return nil
}

// The URL checks never quote the URL or url.Parse's error (both can hold
// the password): callers print RedactURL(raw).
func checkRedisURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a valid URL")
	}
	switch u.Scheme {
	case "redis", "rediss":
		if u.Host == "" {
			return errors.New("no host")
		}
	case "unix":
		if u.Path == "" {
			return errors.New("no socket path")
		}
	default:
		return errors.New("want a redis://, rediss:// or unix:// URL")
	}
	return nil
}

func checkPGURL(raw string) error {
	if !strings.Contains(raw, "://") {
		if !strings.Contains(raw, "=") {
			return errors.New("want a postgres:// URL or a keyword DSN (host=... dbname=...)")
		}
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a valid URL")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return errors.New("want a postgres:// or postgresql:// URL")
	}
	return nil
}

func checkHTTPURL(raw string) error {
	if raw == "" {
		return errors.New("is missing")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("want an http:// or https:// URL")
	}
	if u.Host == "" {
		return errors.New("no host")
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110), as header names are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// orList words names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// MaxTagLen bounds a node tag and a schedule's nodes entry.
const MaxTagLen = 128

// CheckTag reports what is wrong with a node tag (the config's tags, run's
// --tag, a schedule's nodes): a tag is compared as an exact string, so
// one with spaces, commas or control characters is almost surely a typo
// (a list written as one string) that would never match.
func CheckTag(tag string) error {
	switch {
	case tag == "":
		return errors.New("a tag is empty")
	case len(tag) > MaxTagLen:
		return fmt.Errorf("tag %.20q… is %d bytes, more than %d", tag, len(tag), MaxTagLen)
	case strings.ContainsAny(tag, ", "):
		return fmt.Errorf("tag %q holds a space or a comma: write each tag as its own string, such as [\"role=db\", \"zone=a\"]", tag)
	}
	for _, r := range tag {
		if r < 0x21 || r == 0x7f || !utf8.ValidRune(r) || r == utf8.RuneError {
			return fmt.Errorf("tag %q holds a control character, a space or invalid UTF-8", tag)
		}
	}
	return nil
}

// onNodeLoss checks s's on_node_loss: a re-run takes the schedule's own
// lock (it proves the dead node's lease ended), so it needs one: a lock
// backend, a locked hint, and the schedule's lock, not a tick's (overlap
// = "allow").
func (v *validator) onNodeLoss(s *Schedule, l Locking) {
	if strings.HasPrefix(s.ID, locking.RerunKeyPrefix) {
		v.atSchedule(s, "id", "id %q begins with %q, which names the re-run markers of on_node_loss", s.ID, locking.RerunKeyPrefix)
	}
	switch s.OnNodeLoss {
	case "", OnNodeLossSkip:
		return
	case OnNodeLossRerun:
	default:
		v.atSchedule(s, "on_node_loss", "unknown on_node_loss %q (want skip or rerun)", s.OnNodeLoss)
		return
	}
	switch {
	case s.HintValue == hints.NodeLocal:
		v.atSchedule(s, "on_node_loss", "on_node_loss = \"rerun\" needs a locked schedule: node_local runs have no lock whose lease tells that their node died")
	case l.Backend == BackendNone:
		v.atSchedule(s, "on_node_loss", "on_node_loss = \"rerun\" needs a lock backend: set [locking] backend (redis or pg; memory on a single node)")
	case s.Overlap == OverlapAllow:
		v.atSchedule(s, "on_node_loss", "on_node_loss = \"rerun\" needs the schedule's lock: use overlap skip, queue or replace, not allow")
	}
}

// group checks s's group keys against the declared groups and sets
// GroupMax.
func (v *validator) group(s *Schedule, groups map[string]Group) {
	if strings.HasPrefix(s.ID, locking.SlotKeyPrefix) {
		v.atSchedule(s, "id", "id %q begins with %q, which names the slots of concurrency groups", s.ID, locking.SlotKeyPrefix)
	}
	if s.Group == "" {
		if s.GroupWait {
			v.atSchedule(s, "group_wait", "group_wait is set but the schedule has no group")
		}
		return
	}
	g, ok := groups[s.Group]
	if !ok {
		v.atSchedule(s, "group", "group %q is not declared: add [groups.%s] with max_running", s.Group, s.Group)
		return
	}
	s.GroupMax = g.MaxRunning
}

// CheckGroupName reports what is wrong with a concurrency group's name:
// letters, digits, '.', '_' and '-', at most 64 bytes (it is part of the
// slots' lock keys).
func CheckGroupName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("a group name is 1 to 64 bytes, not %d", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("group name %q: use letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}

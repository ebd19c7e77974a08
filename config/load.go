package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Load reads the file at path and any files its include globs match,
// expands ${VAR}, fills defaults and validates. When anything is wrong the
// error is an *Error listing every problem; it matches ErrInvalid, and
// fs.ErrNotExist when the file is missing.
func Load(path string, opts ...Option) (*Config, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, &Error{Problems: []Problem{{File: path, Msg: err.Error()}}, causes: []error{err}}
	}
	return Parse(data, path, opts...)
}

// Option changes how Load and Parse read a config.
type Option func(*loadOptions)

type loadOptions struct{ goJobs []string }

// WithGoJobs names the schedules whose job the embedding program supplies
// as a Go function (node.Options.Jobs): each must be declared, and sets
// neither command nor [scheduled.http] (Schedule.GoJob).
func WithGoJobs(ids ...string) Option {
	return func(o *loadOptions) { o.goJobs = append(o.goJobs, ids...) }
}

// Parse is Load on the main file's bytes; path names the file in messages
// and include globs are resolved relative to its directory.
func Parse(data []byte, path string, opts ...Option) (*Config, error) {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	if blank(data) {
		// Almost always a mistake (a truncated deploy, the wrong path, a
		// directory mounted as a file): a node running it would idle forever.
		return nil, &Error{Problems: []Problem{{File: path, Msg: "the config is empty: it sets nothing (see examples/bext.config.toml)"}}}
	}
	b := &builder{}
	c := b.parseMain(data, path)
	if c != nil {
		b.markGoJobs(c, o.goJobs)
		for _, p := range c.validate() {
			// A value whose ${VAR} failed is reported once, for the variable.
			if !b.unexpanded[fileLine{p.File, p.Line}] {
				b.problems = append(b.problems, p)
			}
		}
	}
	b.hideExpanded()
	if err := b.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// markGoJobs sets GoJob on the schedules ids names, and reports an id
// no schedule has.
func (b *builder) markGoJobs(c *Config, ids []string) {
	for _, id := range ids {
		found := false
		for i := range c.Scheduled {
			if c.Scheduled[i].ID == id {
				c.Scheduled[i].GoJob, found = true, true
			}
		}
		if !found {
			b.problems = append(b.problems, Problem{File: c.Path, Msg: fmt.Sprintf("Go job %q: no [[scheduled]] has that id", id)})
		}
	}
}

// builder collects the problems of one Load.
type builder struct {
	file     string // the file being read, as named in messages
	problems []Problem
	causes   []error
	// unexpanded holds the lines whose ${VAR} could not be expanded.
	unexpanded map[fileLine]bool
	// referenced lists the variables ${VAR} read, in every file.
	referenced []string
	// expanded lists the values ${VAR} changed, to keep them out of
	// messages (hideExpanded).
	expanded []expansion
}

type fileLine struct {
	file string
	line int
}

func (b *builder) add(line int, format string, args ...any) {
	b.problems = append(b.problems, Problem{File: b.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (b *builder) err() error {
	if len(b.problems) == 0 {
		return nil
	}
	// Files in the order they were read (the main file first), lines in order.
	rank := map[string]int{}
	for _, p := range b.problems {
		if _, ok := rank[p.File]; !ok {
			rank[p.File] = len(rank)
		}
	}
	sort.SliceStable(b.problems, func(i, j int) bool {
		pi, pj := b.problems[i], b.problems[j]
		if pi.File != pj.File {
			return rank[pi.File] < rank[pj.File]
		}
		return pi.Line < pj.Line
	})
	return &Error{Problems: b.problems, causes: b.causes}
}

// The documents as decoded. Each embeds the public type and shadows its
// Duration fields with `any`: a bad duration must be one more problem with a
// line, not an error that stops the decoder (and a duration may be written
// as "${VAR}", which only parses after expansion).
type (
	mainDoc struct {
		Config
		ShutdownGrace any        `toml:"shutdown_grace"`
		Locking       lockingDoc `toml:"locking"`
		Cluster       clusterDoc `toml:"cluster"`
		Notify        notifyDoc  `toml:"notify"`
		Scheduled     []schedDoc `toml:"scheduled"`
	}
	clusterDoc struct {
		Cluster
		HandoffDelay any `toml:"handoff_delay"`
	}
	notifyDoc struct {
		Notify
		Timeout any `toml:"timeout"`
	}
	lockingDoc struct {
		Locking
		SafetyMargin any      `toml:"safety_margin"`
		MaxClockSkew any      `toml:"max_clock_skew"`
		Redis        redisDoc `toml:"redis"`
		PG           pgDoc    `toml:"pg"`
	}
	redisDoc struct {
		Redis
		OpTimeout any `toml:"op_timeout"`
	}
	pgDoc struct {
		PG
		OpTimeout any `toml:"op_timeout"`
	}
	schedDoc struct {
		Schedule
		ExpectedRuntime any `toml:"expected_runtime"`
		Jitter          any `toml:"jitter"`
		Timeout         any `toml:"timeout"`
		CatchupWindow   any `toml:"catchup_window"`
		Spread          any `toml:"spread"`
		RetryBackoff    any `toml:"retry_backoff"`
		MinRuntime      any `toml:"min_runtime"`
		// except, start and end take TOML dates and date-times as well as
		// strings.
		Except any      `toml:"except"`
		Start  any      `toml:"start"`
		End    any      `toml:"end"`
		HTTP   *httpDoc `toml:"http"`
	}
	httpDoc struct {
		HTTPJob
		Timeout any `toml:"timeout"`
	}
	// includeDoc is an included file: [[scheduled]] tables only.
	includeDoc struct {
		Scheduled []schedDoc `toml:"scheduled"`
	}
)

// parseMain decodes the main file and its includes into a Config with
// defaults filled. It returns nil when the main file cannot be decoded.
func (b *builder) parseMain(data []byte, path string) *Config {
	b.file = path
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	def := defaultConfig()
	doc := mainDoc{Config: def}
	// The shadowing structs are what the decoder fills: they need the
	// defaults too (their Duration fields keep them, being shadowed).
	doc.Locking.Locking = def.Locking
	doc.Locking.Redis.Redis = def.Locking.Redis
	doc.Locking.PG.PG = def.Locking.PG
	doc.Notify.Notify = def.Notify
	doc.Cluster.Cluster = def.Cluster
	// A main file that ends in plain [[scheduled]] tables (a fleet in one
	// file) has them read by the include fast path (fast.go) and only the
	// head through the decoder: 100,000 schedules in one file took 2.4 s
	// to validate, against 0.26 s in includes.
	var tail []Schedule
	mark := len(b.problems)
	if head, ok := b.plainTail(data, &tail); ok {
		data = head
	}
	tailProblems := len(b.problems) - mark
	at, ok := b.decode(data, &doc, false)
	if !ok {
		// Decoded whole, the file would stop at the head's error: the
		// tail's problems are not reported.
		b.problems = slices.Delete(b.problems, mark, mark+tailProblems)
		return nil
	}
	b.expandAll(reflect.ValueOf(&doc), nil, at)

	c := doc.Config
	c.Path, c.file, c.at = abs, path, at
	c.Locking = doc.Locking.Locking
	c.Locking.Redis = doc.Locking.Redis.Redis
	c.Locking.PG = doc.Locking.PG.PG
	c.Notify = doc.Notify.Notify
	c.Cluster = doc.Cluster.Cluster
	b.duration(&c.Cluster.HandoffDelay, doc.Cluster.HandoffDelay, "cluster.handoff_delay", at.line("cluster.handoff_delay"), false)
	b.duration(&c.Notify.Timeout, doc.Notify.Timeout, "notify.timeout", at.line("notify.timeout"), true)
	b.duration(&c.ShutdownGrace, doc.ShutdownGrace, "shutdown_grace", at.line("shutdown_grace"), false)
	b.duration(&c.Locking.SafetyMargin, doc.Locking.SafetyMargin, "locking.safety_margin", at.line("locking.safety_margin"), false)
	b.duration(&c.Locking.MaxClockSkew, doc.Locking.MaxClockSkew, "locking.max_clock_skew", at.line("locking.max_clock_skew"), false)
	b.duration(&c.Locking.Redis.OpTimeout, doc.Locking.Redis.OpTimeout, "locking.redis.op_timeout", at.line("locking.redis.op_timeout"), true)
	b.duration(&c.Locking.PG.OpTimeout, doc.Locking.PG.OpTimeout, "locking.pg.op_timeout", at.line("locking.pg.op_timeout"), true)
	if c.NodeID == "" {
		c.NodeID, _ = os.Hostname() // validate reports it if still empty
	}
	c.Scheduled = b.schedules(doc.Scheduled, at)
	switch {
	case len(c.Scheduled) == 0:
		// The tail is the file's schedules (a head that plainTail cut
		// holds none): copying 100,000 into a new slice, under the
		// write barriers of a collection running meanwhile, was a
		// quarter of loading them from one file.
		c.Scheduled = tail
	case len(tail) > 0:
		c.Scheduled = append(c.Scheduled, tail...)
	}
	b.includes(&c)
	c.referenced = b.referenced
	return &c
}

// plainTail splits a main file at its first [[scheduled]] table when all
// from there on is what the include fast path takes: the schedules go into
// *tail, and head is the file before them, to be decoded as usual. ok is
// false, with nothing recorded, when the file must be decoded whole: no
// such table at the start of a line, the word "scheduled" or a multi-line
// string before it (a table the head would decode, or a string the cut
// would split), or a tail the fast path refuses. The tail is read with the
// head's lines blanked, so every line it reports is the file's.
func (b *builder) plainTail(data []byte, tail *[]Schedule) (head []byte, ok bool) {
	const table = "[[scheduled]]"
	cut := bytes.Index(data, []byte(table))
	if cut < 0 || (cut > 0 && data[cut-1] != '\n') || len(data) > MaxFileSize || bytes.IndexByte(data, 0) >= 0 {
		return nil, false
	}
	head = data[:cut]
	if bytes.Contains(head, []byte("scheduled")) || bytes.Contains(head, []byte(`"""`)) || bytes.Contains(head, []byte("'''")) {
		return nil, false
	}
	lines := bytes.Count(head, []byte{'\n'})
	padded := make([]byte, lines, lines+len(data)-cut)
	for i := range padded {
		padded[i] = '\n'
	}
	padded = append(padded, data[cut:]...)
	// Sized once, as includes sizes its slice: grown table by table, the
	// copies of a slice of big structs made a one-file load quadratic.
	*tail = make([]Schedule, 0, bytes.Count(padded, []byte(table)))
	if !b.fastInclude(padded, tail) {
		*tail = nil
		return nil, false
	}
	return head, true
}

// decode strictly decodes data into doc, recording syntax errors and
// unknown keys. ok is false when nothing useful was decoded.
func (b *builder) decode(data []byte, doc any, include bool) (at *positions, ok bool) {
	if len(data) > MaxFileSize {
		b.add(0, "file is %d bytes, over the %d byte limit", len(data), MaxFileSize)
		return nil, false
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		b.add(1+bytes.Count(data[:i], []byte("\n")), "file contains a NUL byte (not a text file?)")
		return nil, false
	}
	mistyped, err := b.decodeTyped(&data, doc)
	var strict *toml.StrictMissingError
	var de *toml.DecodeError
	switch {
	case errors.As(err, &strict):
		for i := range strict.Errors {
			e := &strict.Errors[i]
			line, _ := e.Position()
			key := strings.Join(e.Key(), ".")
			switch {
			case include && (len(e.Key()) == 0 || e.Key()[0] != "scheduled"):
				b.add(line, "%q: an included file may hold only [[scheduled]] tables", key)
			case strings.Contains(e.Error(), "table"):
				b.add(line, "unknown table [%s]", key)
			default:
				b.add(line, "unknown key %q", key)
			}
		}
	case errors.As(err, &de):
		line, col := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		if m := typeMismatch.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("wrong type: got a TOML %s, want %s", m[1], goTypeInTOML(m[2]))
		} else {
			msg = "syntax error: " + msg
		}
		if k := de.Key(); len(k) > 0 {
			msg = fmt.Sprintf("%s: %s", strings.Join(k, "."), msg)
		}
		b.add(line, "%s (column %d)", msg, col)
		return nil, false
	case err != nil:
		b.add(0, "cannot decode: %v", err)
		return nil, false
	}
	if include {
		at = indexLines(data, includeSchema)
	} else {
		at = indexLines(data, mainSchema)
	}
	at.markMistyped(mistyped)
	for _, k := range at.folded {
		b.add(k.line, "key %q: TOML keys are case-sensitive; write %q", k.got, k.want)
	}
	return at, true
}

// maxTypeErrors bounds how many wrong-typed values one file reports; past
// it the decoder's next error stops the file as a syntax error would.
const maxTypeErrors = 100

// decodeTyped strictly decodes *data into doc. go-toml stops at the first
// value of the wrong type, which would hide every other problem of the
// file: each such value is reported, its whole key = value statement is
// blanked out of *data (new lines kept, so every line number stays true),
// and the decode starts again from doc's original contents (its
// defaults). The error returned is the last decode's; mistyped lists the
// values blanked, so that what their absence would cause (a schedule with
// "no job" when its command was a string) is not reported too.
func (b *builder) decodeTyped(data *[]byte, doc any) (mistyped []typedKey, err error) {
	dv := reflect.ValueOf(doc).Elem()
	initial := reflect.New(dv.Type()).Elem()
	initial.Set(dv)
	for range maxTypeErrors {
		err := toml.NewDecoder(bytes.NewReader(*data)).DisallowUnknownFields().Decode(doc)
		var de *toml.DecodeError
		if !errors.As(err, &de) {
			return mistyped, err
		}
		msg, ok := typeProblem(de)
		if !ok {
			return mistyped, err
		}
		line, col := de.Position()
		blanked, ok := blankStatement(*data, line, col)
		if !ok {
			return mistyped, err
		}
		b.add(line, "%s (column %d)", msg, col)
		mistyped = append(mistyped, typedKey{line: line, key: de.Key()})
		*data = blanked
		dv.Set(initial)
	}
	return mistyped, toml.NewDecoder(bytes.NewReader(*data)).DisallowUnknownFields().Decode(doc)
}

// typedKey is a value of the wrong type: its line, and its key as the
// decoder names it ("scheduled", "command": no table index).
type typedKey struct {
	line int
	key  []string
}

// typeProblem words a wrong-typed value's DecodeError; ok is false for any
// other decode error.
func typeProblem(de *toml.DecodeError) (string, bool) {
	m := typeMismatch.FindStringSubmatch(strings.TrimPrefix(de.Error(), "toml: "))
	if m == nil {
		return "", false
	}
	msg := fmt.Sprintf("wrong type: got a TOML %s, want %s", m[1], goTypeInTOML(m[2]))
	if k := de.Key(); len(k) > 0 {
		msg = fmt.Sprintf("%s: %s", strings.Join(k, "."), msg)
	}
	return msg, true
}

// blankStatement replaces with spaces the top-level statement (key = value,
// or table header) of data that holds line:col, up to the next statement,
// keeping new lines. ok is false when none holds it.
func blankStatement(data []byte, line, col int) ([]byte, bool) {
	off := 0
	for l := 1; l < line && off < len(data); l++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return nil, false
		}
		off += i + 1
	}
	off += max(col-1, 0)
	// Statement starts: the offset of each top-level expression's first key.
	var starts []int
	p := unstable.Parser{}
	p.Reset(data)
	for p.NextExpression() {
		e := p.Expression()
		it := e.Key()
		if !it.Next() {
			continue
		}
		// From the start of the line: a table header's key comes after
		// its "[[" and a quoted key after its quote, and blanking from
		// there on left "[[scheduled]]" as "  scheduled]]", a syntax
		// error of the next table. A TOML statement has its line to
		// itself, so the line's start is the statement's.
		st := int(it.Node().Raw.Offset)
		starts = append(starts, bytes.LastIndexByte(data[:st], '\n')+1)
	}
	if p.Error() != nil {
		return nil, false
	}
	from, to := -1, len(data)
	for i, st := range starts {
		if st <= off {
			from = st
			if i+1 < len(starts) {
				to = starts[i+1]
			} else {
				to = len(data)
			}
		}
	}
	if from < 0 {
		return nil, false
	}
	out := bytes.Clone(data)
	for i := from; i < to; i++ {
		if out[i] != '\n' && out[i] != '\r' {
			out[i] = ' '
		}
	}
	return out, true
}

// The key trees of the two kinds of file, for the case check.
var (
	mainSchema    = schemaOf(reflect.TypeFor[mainDoc]())
	includeSchema = schemaOf(reflect.TypeFor[includeDoc]())
)

// typeMismatch matches go-toml's message for a value of the wrong type,
// which names our internal Go types; goTypeInTOML says it in TOML words.
var typeMismatch = regexp.MustCompile(`^cannot decode TOML (\w+) into .* of type (.+)$`)

func goTypeInTOML(t string) string {
	switch t {
	case "string":
		return "a string"
	case "int", "int64":
		return "an integer"
	case "bool":
		return "a boolean"
	case "[]string":
		return "an array of strings"
	case "[]int":
		return "an array of integers"
	case "map[string]string":
		return "a table of strings"
	}
	if strings.HasPrefix(t, "config.") || strings.HasPrefix(t, "*config.") || strings.HasPrefix(t, "[]config.") {
		return "a table"
	}
	return t
}

// schedules turns decoded [[scheduled]] tables into Schedules with their
// defaults, file and lines.
func (b *builder) schedules(docs []schedDoc, at *positions) []Schedule {
	out := make([]Schedule, 0, len(docs))
	for i := range docs {
		d := &docs[i]
		s := d.Schedule
		s.File = b.file
		s.at = keyLines{pos: at, index: i}
		s.Line = s.at.line("")
		dur := func(dst *Duration, v any, key string, positive bool) {
			if v == nil { // unset: keep the default (and build no label)
				return
			}
			label := fmt.Sprintf("schedule %q: %s", s.ID, key)
			if s.ID == "" {
				label = s.at.prefix() + "." + key
			}
			b.duration(dst, v, label, s.at.line(key), positive)
		}
		dur(&s.ExpectedRuntime, d.ExpectedRuntime, "expected_runtime", true)
		dur(&s.Jitter, d.Jitter, "jitter", false)
		dur(&s.Timeout, d.Timeout, "timeout", false)
		dur(&s.Spread, d.Spread, "spread", false)
		dur(&s.RetryBackoff, d.RetryBackoff, "retry_backoff", false)
		dur(&s.MinRuntime, d.MinRuntime, "min_runtime", false)
		if d.CatchupWindow != nil { // unset and "0s" differ: keep which
			cw := Duration{-1}
			if dur(&cw, d.CatchupWindow, "catchup_window", false); cw.Duration >= 0 {
				s.CatchupWindow = &cw
			}
		}
		b.calendarKeys(&s, d)
		if d.HTTP != nil {
			h := d.HTTP.HTTPJob
			dur(&h.Timeout, d.HTTP.Timeout, "http.timeout", true)
			s.HTTP = &h
		}
		s.setDefaults()
		out = append(out, s)
	}
	return out
}

// calendarKeys reads a decoded table's except, start and end into s.
// except takes strings and TOML local dates (2026-12-25 unquoted); start
// and end RFC 3339 strings and TOML date-times with an offset. Validate
// checks the dates themselves.
func (b *builder) calendarKeys(s *Schedule, d *schedDoc) {
	label := func(key string) string {
		if s.ID == "" {
			return s.at.prefix() + "." + key
		}
		return fmt.Sprintf("schedule %q: %s", s.ID, key)
	}
	if d.Except != nil {
		list, ok := d.Except.([]any)
		if !ok {
			b.add(s.at.line("except"), "%s: want an array of dates such as [\"2026-12-25\", \"*-01-01\"], got %s", label("except"), tomlKind(d.Except))
		}
		for _, v := range list {
			switch v := v.(type) {
			case string:
				s.Except = append(s.Except, v)
			case toml.LocalDate:
				s.Except = append(s.Except, v.String())
			default:
				b.add(s.at.line("except"), "%s: want dates such as \"2026-12-25\" or \"*-01-01\", got %s", label("except"), tomlKind(v))
			}
		}
	}
	for _, k := range []struct {
		key string
		v   any
		dst *time.Time
	}{{"start", d.Start, &s.Start}, {"end", d.End, &s.End}} {
		switch v := k.v.(type) {
		case nil:
		case time.Time:
			*k.dst = v
		case string:
			t, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
			if err != nil {
				b.add(s.at.line(k.key), "%s: %q is not an RFC 3339 time (such as \"2026-01-01T00:00:00Z\" or \"2026-01-01T00:00:00+01:00\")", label(k.key), v)
				break
			}
			*k.dst = t
		case toml.LocalDateTime, toml.LocalDate:
			b.add(s.at.line(k.key), "%s: %v has no offset: write it in RFC 3339, such as 2026-01-01T00:00:00Z or 2026-01-01T00:00:00+01:00", label(k.key), v)
		default:
			b.add(s.at.line(k.key), "%s: want an RFC 3339 time, got %s", label(k.key), tomlKind(v))
		}
	}
}

// duration parses a decoded duration value into dst. A nil value (the key
// is absent) leaves dst, and so its default, alone. positive rejects an
// explicit zero where zero means nothing sensible (a timeout of no time).
// label names the key in messages.
func (b *builder) duration(dst *Duration, v any, label string, line int, positive bool) {
	if v == nil {
		return
	}
	path := label
	s, ok := v.(string)
	if !ok {
		b.add(line, "%s: want a duration string such as \"30s\", got %s", path, tomlKind(v))
		return
	}
	d, err := parseDuration(s)
	switch {
	case err != nil:
		b.add(line, "%s: %v", path, err)
	case positive && d == 0:
		b.add(line, "%s: must be more than zero", path)
	default:
		dst.Duration = d
	}
}

func tomlKind(v any) string {
	switch v.(type) {
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time, toml.LocalDate, toml.LocalTime, toml.LocalDateTime:
		return "a date/time"
	}
	return fmt.Sprintf("a %T", v)
}

// includes reads the files c.Include matches, relative to the main file's
// directory, each once, never the main file itself, and appends their
// schedules to c.Scheduled.
func (b *builder) includes(c *Config) {
	main := b.file
	dir := filepath.Dir(main)
	seen := map[string]bool{c.Path: true}
	type included struct {
		name string
		line int // of the include glob in the main file
		data []byte
		err  error
	}
	// Every file is read first, so the schedules can go into one slice
	// sized once: appending file after file copied them over and over as
	// it grew, and copying per-file slices into one afterwards was a tenth
	// of the load of 100,000 schedules in includes.
	var files []included
	n := len(c.Scheduled)
	var total int64 // bytes of the files matched so far
	for i, glob := range c.Include {
		b.file = main
		line := c.at.line("include." + strconv.Itoa(i))
		pattern := glob
		if !filepath.IsAbs(pattern) {
			pattern = filepath.Join(dir, pattern)
		}
		matches, err := filepath.Glob(pattern)
		if err != nil {
			b.add(line, "include %q: bad glob: %v", glob, err)
			continue
		}
		for _, m := range matches { // a glob matching nothing is fine
			abs, err := filepath.Abs(m)
			if err != nil {
				abs = m
			}
			if seen[abs] {
				continue
			}
			seen[abs] = true
			size, err := includable(m)
			if err == nil && total+size > MaxIncludeBytes {
				err = fmt.Errorf("the included files pass the %d byte limit for all includes", MaxIncludeBytes)
			}
			if err != nil {
				b.file = m
				b.add(0, "included by %s:%d: include %q: %v", main, line, glob, err)
				b.causes = append(b.causes, err)
				continue
			}
			total += size
			data, err := readFile(m)
			files = append(files, included{name: m, line: line, data: data, err: err})
			n += bytes.Count(data, []byte("[[scheduled]]"))
		}
	}
	if len(files) == 0 {
		return
	}
	all := make([]Schedule, len(c.Scheduled), n)
	copy(all, c.Scheduled)
	for i := range files {
		f := &files[i]
		b.file = f.name
		if f.err != nil {
			b.add(0, "included by %s:%d: %v", main, f.line, f.err)
			b.causes = append(b.causes, f.err)
			continue
		}
		data := f.data
		f.data = nil // the schedules keep what they need of it
		if len(data) <= MaxFileSize && bytes.IndexByte(data, 0) < 0 && b.fastInclude(data, &all) {
			continue
		}
		var doc includeDoc
		at, ok := b.decode(data, &doc, true)
		if !ok {
			continue
		}
		b.expandAll(reflect.ValueOf(&doc), nil, at)
		all = append(all, b.schedules(doc.Scheduled, at)...)
	}
	b.file = main
	c.Scheduled = all
}

// systemTrees are where an include glob may never reach: their files look
// regular but are the kernel's (/proc/self/environ holds the node's
// secrets, a read of /dev/zero never ends), so a glob as wide as "/*/*"
// would leak or hang instead of failing.
var systemTrees = []string{"/proc", "/sys", "/dev"}

// includable checks a file an include glob matched before it is read: a
// regular file, wherever its links lead outside the system trees. It
// returns the file's size.
func includable(path string) (int64, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return 0, fmt.Errorf("cannot read config: %w", unwrapPath(err))
	}
	if real, err = filepath.Abs(real); err != nil {
		return 0, fmt.Errorf("cannot read config: %w", err)
	}
	for _, tree := range systemTrees {
		if real == tree || strings.HasPrefix(real, tree+"/") {
			return 0, fmt.Errorf("resolves to %s, under %s: only regular files can be included", real, tree)
		}
	}
	st, err := os.Stat(real)
	switch {
	case err != nil:
		return 0, fmt.Errorf("cannot read config: %w", unwrapPath(err))
	case st.IsDir():
		return 0, errors.New("cannot read config: is a directory, not a file")
	case !st.Mode().IsRegular():
		return 0, errors.New("cannot read config: not a regular file")
	}
	return st.Size(), nil
}

// readFile reads a regular file of at most MaxFileSize bytes. Its errors
// keep their fs cause and never repeat the path (messages already name it).
func readFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read config: %w", unwrapPath(err))
	}
	switch {
	case st.IsDir():
		return nil, errors.New("cannot read config: is a directory, not a file")
	case !st.Mode().IsRegular():
		return nil, errors.New("cannot read config: not a regular file")
	case st.Size() > MaxFileSize:
		return nil, fmt.Errorf("cannot read config: file is %d bytes, over the %d byte limit", st.Size(), MaxFileSize)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read config: %w", unwrapPath(err))
	}
	defer f.Close()
	// The file may have grown since Stat: never read more than the limit.
	// Sized from Stat (and the one read past the end): io.ReadAll grew
	// its buffer a dozen times for a file of a thousand schedules.
	buf := bytes.NewBuffer(make([]byte, 0, st.Size()+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxFileSize+1)); err != nil {
		return nil, fmt.Errorf("cannot read config: %w", unwrapPath(err))
	}
	data := buf.Bytes()
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("cannot read config: file is over the %d byte limit", MaxFileSize)
	}
	return data, nil
}

// unwrapPath drops the *fs.PathError wrapper (its message repeats the path)
// but keeps the cause, so errors.Is(err, fs.ErrNotExist) still holds.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// blank reports whether data holds nothing but white space and comments.
func blank(data []byte) bool {
	for _, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

package config

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// expandEnv replaces ${NAME} and ${NAME:-default} in s from the environment.
// The default applies when NAME is unset or empty, as in the shell. "$${"
// writes a literal "${", so a shell command can use its own variables in
// braces (sh -c "echo $${BEXT_TICK_TIME}" runs echo ${BEXT_TICK_TIME}).
// Anything else is left as written: "$$" not before "{", a lone "$",
// "$NAME" without braces, and a "${" that does not start a valid name (so a
// shell's ${#arr[@]} passes through). A "${NAME" with no closing brace is an
// error, as is an unset variable without a default.
func expandEnv(s string, lookup func(string) (string, bool)) (string, []string) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	// Note: "$${" contains "${", so the escape is always seen here.
	var b strings.Builder
	var errs []string
	for i := 0; i < len(s); {
		if s[i] != '$' {
			b.WriteByte(s[i])
			i++
			continue
		}
		if strings.HasPrefix(s[i:], "$${") {
			b.WriteString("${")
			i += 3
			continue
		}
		if strings.HasPrefix(s[i:], "$$") {
			b.WriteString("$$")
			i += 2
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			b.WriteByte('$')
			i++
			continue
		}
		n := nameLen(s[i+2:])
		if n == 0 { // not a variable: keep "${" literally
			b.WriteString("${")
			i += 2
			continue
		}
		name := s[i+2 : i+2+n]
		rest := s[i+2+n:]
		var def string
		hasDef := false
		switch {
		case strings.HasPrefix(rest, "}"):
			rest = rest[1:]
		case strings.HasPrefix(rest, ":-"):
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				errs = append(errs, fmt.Sprintf("unterminated ${%s:-...}: missing \"}\"", name))
				b.WriteString(s[i:])
				return b.String(), errs
			}
			def, hasDef = rest[2:end], true
			rest = rest[end+1:]
		case rest == "":
			errs = append(errs, fmt.Sprintf("unterminated ${%s: missing \"}\"", name))
			b.WriteString(s[i:])
			return b.String(), errs
		default: // ${NAME followed by something else: not ours
			b.WriteString("${")
			i += 2
			continue
		}
		v, ok := lookup(name)
		switch {
		case hasDef && v == "":
			v = def
		case !ok:
			errs = append(errs, fmt.Sprintf("environment variable %s is not set (use ${%s:-default} for a fallback)", name, name))
		}
		b.WriteString(v)
		i = len(s) - len(rest)
	}
	return b.String(), errs
}

// nameLen is the length of the variable name at the start of s.
func nameLen(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c == '_' || (c|0x20) >= 'a' && (c|0x20) <= 'z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return i
		}
	}
	return len(s)
}

// expandAll expands every string value reachable from v (a pointer to a
// decoded document): string fields, string elements of slices, string values
// of maps, and strings held in interface fields (durations before parsing).
// Map keys are never expanded. path is the dotted TOML path for messages,
// spelled out only for a value that holds a '$' (a fleet of 100,000
// schedules has millions of fields, almost none of them expanded).
func (b *builder) expandAll(v reflect.Value, path *keyPath, at *positions) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Interface {
			if s, ok := v.Interface().(string); ok && v.CanSet() && hasDollar(s) {
				v.Set(reflect.ValueOf(b.expand(s, path.String(), at)))
			}
			return
		}
		b.expandAll(v.Elem(), path, at)
	case reflect.String:
		if v.CanSet() && hasDollar(v.String()) {
			v.SetString(b.expand(v.String(), path.String(), at))
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			b.expandAll(v.Index(i), &keyPath{parent: path, index: i}, at)
		}
	case reflect.Map:
		if v.Type().Elem().Kind() != reflect.String {
			return
		}
		iter := v.MapRange()
		for iter.Next() {
			s := iter.Value().String()
			if !hasDollar(s) {
				continue
			}
			k := iter.Key().String()
			if e := b.expand(s, join(path.String(), k), at); e != s {
				v.SetMapIndex(iter.Key(), reflect.ValueOf(e).Convert(v.Type().Elem()))
			}
		}
	case reflect.Struct:
		for _, f := range tomlFields(v.Type()) {
			if f.anonymous {
				b.expandAll(v.Field(f.index), path, at)
				continue
			}
			b.expandAll(v.Field(f.index), &keyPath{parent: path, name: f.name, index: -1}, at)
		}
	}
}

// tomlField is a struct field expandAll descends into.
type tomlField struct {
	index     int
	name      string // the toml key
	anonymous bool   // embedded: its fields are the struct's own
}

// fieldCache: reflect.Type → []tomlField, read once per type rather than
// once per schedule.
var fieldCache sync.Map

func tomlFields(t reflect.Type) []tomlField {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.([]tomlField)
	}
	var fs []tomlField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("toml")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		fs = append(fs, tomlField{index: i, name: name, anonymous: f.Anonymous})
	}
	fieldCache.Store(t, fs)
	return fs
}

// hasDollar reports whether s may hold a ${VAR} (or an escaped $$).
func hasDollar(s string) bool { return strings.IndexByte(s, '$') >= 0 }

// keyPath is a dotted TOML path built as expandAll descends: a key name,
// or an array index when index >= 0. A nil *keyPath is the root.
type keyPath struct {
	parent *keyPath
	name   string
	index  int
}

func (p *keyPath) String() string {
	if p == nil {
		return ""
	}
	part := p.name
	if p.index >= 0 {
		part = strconv.Itoa(p.index)
	}
	return join(p.parent.String(), part)
}

// expand expands one value, reporting problems at the line of path.
func (b *builder) expand(s, path string, at *positions) string {
	var vars []string
	out, errs := expandEnv(s, func(name string) (string, bool) {
		if !slices.Contains(b.referenced, name) {
			b.referenced = append(b.referenced, name)
		}
		v, ok := os.LookupEnv(name)
		if v != "" {
			vars = append(vars, name, v)
		}
		return v, ok
	})
	line := at.line(path)
	if out != s {
		b.expanded = append(b.expanded, expansion{fileLine{b.file, line}, s, out, vars})
	}
	if len(errs) == 0 {
		return out
	}
	for _, e := range errs {
		b.add(line, "%s: %s", path, e)
	}
	if line > 0 {
		if b.unexpanded == nil {
			b.unexpanded = map[fileLine]bool{}
		}
		b.unexpanded[fileLine{b.file, line}] = true
	}
	return s // as written, so later checks see what the file says
}

// expansion is a value ${VAR} changed: what the file says, what it became,
// and the variables' values (name, value, ...).
type expansion struct {
	at            fileLine
	source, value string
	vars          []string
}

// minSecret is the shortest variable value hidden where it stands alone in
// a message: a shorter one ("0", "on") is no secret, and hiding each of
// its occurrences would garble the message around it.
const minSecret = 4

// hideExpanded rewrites the problems so that none shows a value that came
// from ${VAR}: a variable may hold a password, and problems are printed,
// logged and mailed. A problem at the value's line shows the source text
// instead ("${DB_PASSWORD}"), as do a quoted mention of the whole value
// elsewhere (a schedule's id in "schedule %q: ..."); a variable's value
// found alone in a problem at its line becomes ${NAME}.
func (b *builder) hideExpanded() {
	if len(b.expanded) == 0 || len(b.problems) == 0 {
		return
	}
	// One replacer for the quoted values and one per line holding
	// expansions, each a single pass: a source holds its value's text
	// when it is a default ("${X:-abcd}"), and replacing again in what
	// was put in would garble it. A fleet can hold thousands of expanded
	// values and as many problems: nothing is per pair.
	quoted := make([]string, 0, 2*len(b.expanded))
	pairs := map[fileLine][]string{}
	for _, e := range b.expanded {
		q := []string{strconv.Quote(e.value), strconv.Quote(e.source)}
		quoted = append(quoted, q...)
		line := append(pairs[e.at], q...)
		if len(e.value) >= minSecret {
			line = append(line, e.value, e.source)
		}
		for j := 0; j+1 < len(e.vars); j += 2 {
			if name, v := e.vars[j], e.vars[j+1]; len(v) >= minSecret {
				line = append(line, v, "${"+name+"}")
			}
		}
		pairs[e.at] = line
	}
	everywhere := strings.NewReplacer(quoted...)
	here := map[fileLine]*strings.Replacer{}
	for i := range b.problems {
		p := &b.problems[i]
		at := fileLine{p.File, p.Line}
		list, ok := pairs[at]
		if !ok {
			p.Msg = everywhere.Replace(p.Msg)
			continue
		}
		r := here[at]
		if r == nil {
			r = strings.NewReplacer(append(list[:len(list):len(list)], quoted...)...)
			here[at] = r
		}
		p.Msg = r.Replace(p.Msg)
	}
}

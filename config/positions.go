package config

import (
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/pelletier/go-toml/v2/unstable"
)

// positions maps a dotted key path to the line that declares it, so that a
// problem found after decoding (a bad cron, an unset ${VAR}) still names its
// line. Array tables are indexed: the third [[scheduled]] table's cron is
// "scheduled.2.cron", its header "scheduled.2"; array elements get their own
// index ("scheduled.2.command.1").
//
// It is held by pointer so that printing a Config with %+v stays readable.
type positions struct {
	lines map[string]int
	// starts indexes the lines of the document while it is indexed (nil after).
	starts lineStarts
	// mistyped holds the paths (indexed as lines is) of the values that
	// had the wrong type and were dropped: already reported, their
	// absence is not a problem of its own.
	mistyped map[string]bool
	// folded lists keys spelled in another case than the schema's: go-toml
	// matches struct fields case-insensitively, TOML keys are case-sensitive.
	folded []foldedKey

	// pending is a document not indexed yet (lazyLines): the first look-up
	// indexes it, once. A file of [[scheduled]] tables that decodes
	// cleanly is almost never looked up (only a problem needs a line), and
	// indexing 100,000 schedules' keys cost a fifth of their load.
	pending struct {
		once sync.Once
		data []byte
		root schema
	}
}

// lazyLines is indexLines(data, root) put off until a line is looked up.
// data must not change afterwards. Only for documents whose keys all match
// root exactly (no folded keys to report).
func lazyLines(data []byte, root schema) *positions {
	pos := &positions{}
	pos.pending.data, pos.pending.root = data, root
	return pos
}

// index builds a lazyLines index, at the first look-up.
func (pos *positions) index() {
	pos.pending.once.Do(func() {
		if pos.pending.data == nil {
			return
		}
		built := indexLines(pos.pending.data, pos.pending.root)
		pos.lines = built.lines
		pos.pending.data, pos.pending.root = nil, nil
	})
}

// foldedKey is a key written as got where the schema says want.
type foldedKey struct {
	line      int
	got, want string
}

// schema is the tree of keys a document may hold, from the toml tags of
// the decoded types. A nil schema is free-form (the keys of env, headers).
type schema map[string]schema

// schemaOf builds the key tree of type t.
func schemaOf(t reflect.Type) schema {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Map:
		return nil
	case reflect.Struct:
	default:
		return schema{}
	}
	out := schema{}
	var embedded []reflect.Type
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("toml")
		if !f.IsExported() || tag == "-" {
			continue
		}
		if f.Anonymous {
			embedded = append(embedded, f.Type)
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		out[name] = schemaOf(f.Type)
	}
	for _, e := range embedded { // shallower fields win, as in go-toml
		for k, v := range schemaOf(e) {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
	return out
}

// step descends from sch to the key part, noting a key matched only by
// case folding.
func (pos *positions) step(sch schema, part string, line int) schema {
	if sch == nil {
		return nil
	}
	if next, ok := sch[part]; ok {
		return next
	}
	for name, next := range sch {
		if strings.EqualFold(name, part) {
			pos.folded = append(pos.folded, foldedKey{line: line, got: part, want: name})
			return next
		}
	}
	return nil // unknown: the strict decoder reports it
}

// indexLines walks data with go-toml's unstable parser. It is only called on
// documents the decoder accepted; should the parser still fail, the index is
// simply shorter and problems fall back to an enclosing line.
func indexLines(data []byte, root schema) *positions {
	starts := newlines(data)
	// About one key a line: sized once, the map is not rehashed as it grows.
	pos := &positions{lines: make(map[string]int, len(starts)), starts: starts}
	var p unstable.Parser
	p.Reset(data)
	arrays := map[string]int{} // array-table path → tables seen so far
	prefix, table := "", root
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts, first := keyParts(e.Key())
			path, sch := "", root
			for i, part := range parts {
				sch = pos.step(sch, part, pos.lineOf(first))
				path = join(path, part)
				if i == len(parts)-1 && e.Kind == unstable.ArrayTable {
					arrays[path]++
				}
				if n := arrays[path]; n > 0 {
					path = join(path, strconv.Itoa(n-1))
				}
			}
			prefix, table = path, sch
			if first != nil {
				pos.set(path, pos.lineOf(first))
			}
		case unstable.KeyValue:
			pos.keyValue(&p, prefix, table, e)
		}
	}
	pos.starts = nil
	return pos
}

// keyValue records a key = value expression and what its value nests.
func (pos *positions) keyValue(p *unstable.Parser, prefix string, sch schema, e *unstable.Node) {
	parts, first := keyParts(e.Key())
	if first == nil {
		return
	}
	line := pos.lineOf(first)
	path := prefix
	for _, part := range parts {
		sch = pos.step(sch, part, line)
		path = join(path, part)
	}
	pos.set(path, line)
	pos.value(p, path, sch, e.Value(), line)
}

// value records the elements of arrays and the keys of inline tables.
func (pos *positions) value(p *unstable.Parser, path string, sch schema, v *unstable.Node, line int) {
	switch v.Kind {
	case unstable.Array:
		it := v.Children()
		for i := 0; it.Next(); i++ {
			n := it.Node()
			l := line
			if n.Raw.Length > 0 {
				l = pos.lineOf(n)
			}
			pos.set(join(path, strconv.Itoa(i)), l)
			pos.value(p, join(path, strconv.Itoa(i)), sch, n, l)
		}
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			if kv := it.Node(); kv.Kind == unstable.KeyValue {
				pos.keyValue(p, path, sch, kv)
			}
		}
	}
}

func (pos *positions) set(path string, line int) {
	if _, ok := pos.lines[path]; !ok { // a redefinition is a decode error; keep the first
		pos.lines[path] = line
	}
}

// line returns the line of path, or of its nearest recorded ancestor, or 0
// (also for a nil index: a Config built by hand).
func (pos *positions) line(path string) int {
	if pos == nil {
		return 0
	}
	pos.index()
	for {
		if l, ok := pos.lines[path]; ok {
			return l
		}
		i := strings.LastIndexByte(path, '.')
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
}

// markMistyped records the values of the wrong type, their key indexed:
// a key of [[scheduled]] goes to the last such table that starts before
// its line.
func (pos *positions) markMistyped(keys []typedKey) {
	for _, k := range keys {
		path := strings.Join(k.key, ".")
		if len(k.key) > 1 && k.key[0] == "scheduled" {
			table := -1
			for i := 0; ; i++ {
				l, ok := pos.lines["scheduled."+strconv.Itoa(i)]
				if !ok || l > k.line {
					break
				}
				table = i
			}
			if table < 0 {
				continue
			}
			path = "scheduled." + strconv.Itoa(table) + "." + strings.Join(k.key[1:], ".")
		}
		if pos.mistyped == nil {
			pos.mistyped = map[string]bool{}
		}
		pos.mistyped[path] = true
	}
}

// keyLines locates the keys of one [[scheduled]] table in its file's index.
type keyLines struct {
	pos   *positions
	index int // of the table among the file's [[scheduled]] tables
}

// prefix is the table's path in the index: "scheduled.2".
func (k keyLines) prefix() string { return "scheduled." + strconv.Itoa(k.index) }

// line returns the line of key inside the table, or of the table itself.
func (k keyLines) line(key string) int {
	if k.pos == nil {
		return 0
	}
	return k.pos.line(join(k.prefix(), key))
}

// mistyped reports whether the table's key (or one under it) had a value
// of the wrong type.
func (k keyLines) mistyped(key string) bool {
	if k.pos == nil || k.pos.mistyped == nil {
		return false
	}
	p := join(k.prefix(), key)
	for m := range k.pos.mistyped {
		if m == p || strings.HasPrefix(m, p+".") {
			return true
		}
	}
	return false
}

// lineOr is line(key), or fallback when the key's line is unknown.
func (k keyLines) lineOr(key string, fallback int) int {
	if l := k.line(key); l > 0 {
		return l
	}
	return fallback
}

func keyParts(it unstable.Iterator) (parts []string, first *unstable.Node) {
	for it.Next() {
		n := it.Node()
		if first == nil {
			first = n
		}
		parts = append(parts, string(n.Data))
	}
	return parts, first
}

// lineStarts holds the offset of every line's first byte, so that a line
// is a binary search away. (go-toml's Parser.Shape counts the newlines from
// the start of the file on every call: a file of N keys cost N² there.)
type lineStarts []uint32

func newlines(data []byte) lineStarts {
	starts := lineStarts{0}
	for i, c := range data {
		if c == '\n' {
			starts = append(starts, uint32(i+1))
		}
	}
	return starts
}

// lineOf returns the line of a node of the document being indexed.
func (pos *positions) lineOf(n *unstable.Node) int {
	return pos.starts.line(n.Raw.Offset)
}

// line returns the 1-based line holding byte offset off.
func (s lineStarts) line(off uint32) int {
	return sort.Search(len(s), func(i int) bool { return s[i] > off })
}

func join(path, part string) string {
	switch {
	case path == "":
		return part
	case part == "":
		return path
	}
	return path + "." + part
}

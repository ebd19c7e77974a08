package config

import (
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// positions maps a dotted key path to the line that declares it, so that a
// problem found after decoding (a bad cron, an unset ${VAR}) still names its
// line. Array tables are indexed: the third [[scheduled]] table's cron is
// "scheduled.2.cron", its header "scheduled.2"; array elements get their own
// index ("scheduled.2.command.1").
//
// It is held by pointer so that printing a Config with %+v stays readable.
type positions struct{ lines map[string]int }

// indexLines walks data with go-toml's unstable parser. It is only called on
// documents the decoder accepted; should the parser still fail, the index is
// simply shorter and problems fall back to an enclosing line.
func indexLines(data []byte) *positions {
	pos := &positions{lines: map[string]int{}}
	var p unstable.Parser
	p.Reset(data)
	arrays := map[string]int{} // array-table path → tables seen so far
	prefix := ""
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts, first := keyParts(e.Key())
			path := ""
			for i, part := range parts {
				path = join(path, part)
				if i == len(parts)-1 && e.Kind == unstable.ArrayTable {
					arrays[path]++
				}
				if n := arrays[path]; n > 0 {
					path = join(path, strconv.Itoa(n-1))
				}
			}
			prefix = path
			if first != nil {
				pos.set(path, lineOf(&p, first))
			}
		case unstable.KeyValue:
			pos.keyValue(&p, prefix, e)
		}
	}
	return pos
}

// keyValue records a key = value expression and what its value nests.
func (pos *positions) keyValue(p *unstable.Parser, prefix string, e *unstable.Node) {
	parts, first := keyParts(e.Key())
	if first == nil {
		return
	}
	path := prefix
	for _, part := range parts {
		path = join(path, part)
	}
	line := lineOf(p, first)
	pos.set(path, line)
	pos.value(p, path, e.Value(), line)
}

// value records the elements of arrays and the keys of inline tables.
func (pos *positions) value(p *unstable.Parser, path string, v *unstable.Node, line int) {
	switch v.Kind {
	case unstable.Array:
		it := v.Children()
		for i := 0; it.Next(); i++ {
			n := it.Node()
			l := line
			if n.Raw.Length > 0 {
				l = lineOf(p, n)
			}
			pos.set(join(path, strconv.Itoa(i)), l)
			pos.value(p, join(path, strconv.Itoa(i)), n, l)
		}
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			if kv := it.Node(); kv.Kind == unstable.KeyValue {
				pos.keyValue(p, path, kv)
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

// keyLines locates the keys of one table (a schedule) in its file's index.
type keyLines struct {
	pos    *positions
	prefix string // "scheduled.2"
}

// line returns the line of key inside the table, or of the table itself.
func (k keyLines) line(key string) int {
	return k.pos.line(join(k.prefix, key))
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

func lineOf(p *unstable.Parser, n *unstable.Node) int {
	return p.Shape(n.Raw).Start.Line
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

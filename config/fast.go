package config

import (
	"bytes"
	"strconv"

	"github.com/pelletier/go-toml/v2/unstable"
)

// The plain include fast path. A big fleet is mostly included files of
// [[scheduled]] tables that set a few strings, string arrays and integers:
// decoding those through go-toml's reflection into schedDoc (its `any`
// duration fields, the slice grown table by table), walking every value
// again for ${VAR}, indexing every key's line and copying each file's
// schedules into the config's slice was most of the load of 100,000
// schedules. fastInclude reads such a file in one pass of go-toml's own
// parser, straight into the config's schedules, and puts the key index off
// until a problem needs a line (lazyLines).
//
// It takes only what it decodes exactly as the full path does; anything
// else (a ${VAR} or '$' anywhere, another table or key, a dotted or quoted
// key, a key given twice, a value of another type, an empty array, a
// number that is not plain decimal, a syntax error) sends the whole file
// down the full path, which reports problems as it always has.

// fastKind is what a fast key holds.
type fastKind uint8

const (
	fastString fastKind = iota
	fastStrings
	fastInt
	fastDuration
)

// fastKeys are the [[scheduled]] keys the fast path decodes, each with its
// bit in a table's set of seen keys.
var fastKeys = map[string]struct {
	kind fastKind
	bit  uint32
}{
	"id": {fastString, 1 << 0}, "plugin": {fastString, 1 << 1}, "cron": {fastString, 1 << 2},
	"timezone": {fastString, 1 << 3}, "hint": {fastString, 1 << 4}, "overlap": {fastString, 1 << 5},
	"dir": {fastString, 1 << 6}, "env_mode": {fastString, 1 << 7}, "ping_url": {fastString, 1 << 8},
	"command": {fastStrings, 1 << 9}, "env_allow": {fastStrings, 1 << 10},
	"retries": {fastInt, 1 << 11}, "pause_after_failures": {fastInt, 1 << 12},
	"expected_runtime": {fastDuration, 1 << 13}, "jitter": {fastDuration, 1 << 14},
	"timeout": {fastDuration, 1 << 15}, "catchup_window": {fastDuration, 1 << 16},
	"spread": {fastDuration, 1 << 17}, "retry_backoff": {fastDuration, 1 << 18},
	"min_runtime": {fastDuration, 1 << 19}, "notify_url": {fastString, 1 << 20},
}

// fastDur is a duration a fast table sets, parsed once the file is known
// to take the fast path (its problems are reported only then).
type fastDur struct {
	sched int    // index in the file's tables
	key   string // one of fastKeys
	val   string
}

// fastInclude decodes data, an included file, appending its schedules to
// *all. ok is false, with *all and the problems untouched, when the file
// needs the full path.
//
// *all's capacity past its length must be zero, as make and append leave
// it: the schedules are decoded in place there, and put back to zero when
// the file takes the full path.
func (b *builder) fastInclude(data []byte, all *[]Schedule) (ok bool) {
	if bytes.IndexByte(data, '$') >= 0 {
		return false // ${VAR}: expandAll and its messages
	}
	first := len(*all)
	out := *all
	defer func() {
		if !ok {
			clear(out[first:len(out)])
		}
	}()
	var (
		durs    []fastDur
		lines   []int // of each table's header
		seen    uint32
		line    = 1 // the line at offset lineAt
		lineAt  = 0
		strs    = map[string]string{} // equal strings shared (crons, zones, argv)
		p       unstable.Parser
		current *Schedule
	)
	intern := func(b []byte) string {
		if s, ok := strs[string(b)]; ok {
			return s
		}
		s := string(b)
		strs[s] = s
		return s
	}
	p.Reset(data)
	for p.NextExpression() {
		e := p.Expression()
		key := e.Key()
		if !key.Next() {
			return false
		}
		k := key.Node()
		if k.Kind != unstable.Key || key.Next() {
			return false // dotted
		}
		if raw := p.Raw(k.Raw); !bytes.Equal(raw, k.Data) {
			return false // quoted: the full path's case check and messages
		}
		switch e.Kind {
		case unstable.ArrayTable:
			if string(k.Data) != "scheduled" {
				return false
			}
			off := int(k.Raw.Offset)
			line += bytes.Count(data[lineAt:off], []byte{'\n'})
			lineAt = off
			if len(out) < cap(out) {
				// Past its length the slice is zero (see below): zeroing
				// a Schedule again, under a running collection's write
				// barriers, was a fifth of this loop.
				out = out[:len(out)+1]
			} else {
				out = append(out, Schedule{})
			}
			current = &out[len(out)-1]
			lines = append(lines, line)
			seen = 0
		case unstable.KeyValue:
			f, known := fastKeys[string(k.Data)]
			if current == nil || !known || seen&f.bit != 0 {
				return false
			}
			seen |= f.bit
			v := e.Value()
			switch f.kind {
			case fastString, fastDuration:
				if v.Kind != unstable.String {
					return false
				}
				if f.kind == fastDuration {
					durs = append(durs, fastDur{sched: len(lines) - 1, key: string(k.Data), val: string(v.Data)})
					continue
				}
				setFastString(current, string(k.Data), v.Data, intern)
			case fastStrings:
				if v.Kind != unstable.Array {
					return false
				}
				var list []string
				it := v.Children()
				for it.Next() {
					n := it.Node()
					if n.Kind != unstable.String {
						return false
					}
					list = append(list, intern(n.Data))
				}
				if len(list) == 0 {
					return false // empty: the full path tells [] from unset
				}
				if string(k.Data) == "command" {
					current.Command = list
				} else {
					current.EnvAllow = list
				}
			case fastInt:
				n, ok := plainInt(v)
				if !ok {
					return false
				}
				if string(k.Data) == "retries" {
					current.Retries = n
				} else {
					current.PauseAfterFailures = n
				}
			}
		default:
			return false // a [table]
		}
	}
	if p.Error() != nil {
		return false
	}
	at := lazyLines(data, includeSchema)
	for i := range lines {
		s := &out[first+i]
		s.File, s.Line, s.at = b.file, lines[i], keyLines{pos: at, index: i}
	}
	for _, d := range durs {
		b.fastDuration(&out[first+d.sched], d)
	}
	for i := first; i < len(out); i++ {
		out[i].setDefaults()
	}
	*all = out
	return true
}

func setFastString(s *Schedule, key string, v []byte, intern func([]byte) string) {
	switch key {
	case "id":
		s.ID = string(v) // one of a kind: not worth a map entry
	case "plugin":
		s.Plugin = intern(v)
	case "cron":
		s.Cron = intern(v)
	case "timezone":
		s.Timezone = intern(v)
	case "hint":
		s.Hint = intern(v)
	case "overlap":
		s.Overlap = intern(v)
	case "dir":
		s.Dir = intern(v)
	case "env_mode":
		s.EnvMode = intern(v)
	case "ping_url":
		s.PingURL = intern(v)
	case "notify_url":
		s.NotifyURL = intern(v)
	}
}

// plainInt reads an integer written in plain decimal digits (go-toml also
// takes signs, underscores and other bases: those take the full path).
func plainInt(v *unstable.Node) (int, bool) {
	if v.Kind != unstable.Integer || len(v.Data) == 0 || len(v.Data) > 18 {
		return 0, false
	}
	for _, c := range v.Data {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	if len(v.Data) > 1 && v.Data[0] == '0' {
		return 0, false // TOML refuses leading zeros: the full path says so
	}
	n, err := strconv.Atoi(string(v.Data))
	return n, err == nil
}

// fastDuration sets one duration of a fast table, as schedules does for a
// decoded one (same defaults kept, same messages).
func (b *builder) fastDuration(s *Schedule, d fastDur) {
	v, err := parseDuration(d.val)
	positive := d.key == "expected_runtime"
	if err != nil || (positive && v == 0) {
		label := "schedule " + strconv.Quote(s.ID) + ": " + d.key
		if s.ID == "" {
			label = s.at.prefix() + "." + d.key
		}
		var ignored Duration
		b.duration(&ignored, d.val, label, s.at.line(d.key), positive)
		return
	}
	switch d.key {
	case "expected_runtime":
		s.ExpectedRuntime.Duration = v
	case "jitter":
		s.Jitter.Duration = v
	case "timeout":
		s.Timeout.Duration = v
	case "spread":
		s.Spread.Duration = v
	case "retry_backoff":
		s.RetryBackoff.Duration = v
	case "min_runtime":
		s.MinRuntime.Duration = v
	case "catchup_window":
		s.CatchupWindow = &Duration{v}
	}
}

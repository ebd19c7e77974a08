package jobs

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"sync"
	"unicode/utf8"

	"github.com/bext-dev/bext-scheduler/scheduler"
)

// output turns a run's stdout and stderr into log records, one per line,
// within a per-line and a per-run byte budget shared by both streams.
type output struct {
	logger  *slog.Logger
	mask    func(string) string // nil: lines as written
	tick    scheduler.Tick
	maxLine int
	limit   int64

	mu   sync.Mutex
	left int64 // bytes still allowed this run
	cut  bool  // the "output truncated" record was logged
}

func newOutput(logger *slog.Logger, t scheduler.Tick, maxLine int, limit int64, mask func(string) string) *output {
	return &output{logger: logger, tick: t, maxLine: maxLine, limit: limit, left: limit, mask: mask}
}

// readBoth reads both streams to their end (EOF, or the read end closed by
// Run) and returns when both are done.
func readBoth(o *output, stdout, stderr io.Reader) {
	var wg sync.WaitGroup
	wg.Go(func() { o.read(stdout, "stdout") })
	o.read(stderr, "stderr")
	wg.Wait()
}

// read logs r line by line. Lines longer than maxLine are cut; the rest of
// such a line is read and dropped, so memory stays bounded by maxLine plus
// the reader's buffer whatever the child writes.
func (o *output) read(r io.Reader, stream string) {
	br := bufio.NewReaderSize(r, 32<<10)
	line := make([]byte, 0, min(o.maxLine, 4096))
	truncated := false
	for {
		chunk, err := br.ReadSlice('\n')
		complete := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if complete {
			chunk = chunk[:len(chunk)-1]
		}
		if room := o.maxLine - len(line); len(chunk) > room {
			line = append(line, chunk[:room]...)
			truncated = true
		} else {
			line = append(line, chunk...)
		}
		if complete {
			o.emit(stream, line, truncated)
			line, truncated = line[:0], false
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil { // EOF, or the pipe was closed under us
			if len(line) > 0 || truncated {
				o.emit(stream, line, truncated)
			}
			return
		}
	}
}

// emit logs one line, or drops it once the run's budget is spent (logging
// "output truncated" the first time).
func (o *output) emit(stream string, line []byte, truncated bool) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if truncated {
		line = trimPartialRune(line)
	}
	cost := int64(len(line)) + 1 // the newline: empty lines are not free
	o.mu.Lock()
	if o.cut {
		o.mu.Unlock()
		return
	}
	if cost > o.left {
		o.cut = true
		o.mu.Unlock()
		o.logger.Warn("output truncated", "schedule", o.tick.ScheduleID, "tick", o.tick.Time,
			"stream", stream, "limit_bytes", o.limit)
		return
	}
	o.left -= cost
	text := string(line)
	if o.mask != nil {
		text = o.mask(text) // a job that echoes a secret must not put it in the log
	}
	if w := o.tick.Output; w != nil {
		// The run's history keeps the tail of what was logged (under o.mu:
		// both streams' lines stay whole).
		_, _ = io.WriteString(w, text+"\n")
	}
	o.mu.Unlock()
	attrs := []any{"schedule", o.tick.ScheduleID, "tick", o.tick.Time, "stream", stream, "line", text}
	if truncated {
		attrs = append(attrs, "truncated", true)
	}
	o.logger.Info("job output", attrs...)
}

// trimPartialRune drops an incomplete UTF-8 sequence that a cut left at the
// end of b, so a truncated line does not end in garbage.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf { // ASCII: nothing partial after it
			return b
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

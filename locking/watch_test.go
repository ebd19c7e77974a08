package locking

import (
	"testing"
	"time"
)

// A mark from the wire is read only when whole: anything else is skipped,
// never read as a tick of some other key or time.
func TestParseTickMark(t *testing.T) {
	m, ok := ParseTickMark("1767225600123456 sched one")
	if !ok || m.Key != "sched one" || !m.Tick.Equal(time.UnixMicro(1767225600123456)) {
		t.Fatalf("ParseTickMark = %+v, %v; want sched one at 1767225600.123456", m, ok)
	}
	for _, bad := range []string{"", "1767225600123456", "1767225600123456 ", "x key", "1.5 key", " key"} {
		if m, ok := ParseTickMark(bad); ok {
			t.Errorf("ParseTickMark(%q) = %+v: want refused", bad, m)
		}
	}
}

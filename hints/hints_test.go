package hints

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Hint
		err  error
	}{
		{"", PreferGlobal, nil},
		{"node_local", NodeLocal, nil},
		{"require_global", RequireGlobal, nil},
		{"prefer_global", PreferGlobal, nil},
		{"Require_Global", "", ErrUnknown},
		{"global", "", ErrUnknown},
	} {
		got, err := Parse(tc.in)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		h       Hint
		b       Backend
		lock    bool
		warn    bool
		wantErr error
	}{
		{NodeLocal, None, false, false, nil},
		{NodeLocal, Distributed, false, false, nil},
		{RequireGlobal, None, false, false, ErrNoBackend},
		{RequireGlobal, Local, true, true, nil},
		{RequireGlobal, Distributed, true, false, nil},
		{PreferGlobal, None, false, false, nil},
		{PreferGlobal, Local, true, false, nil},
		{PreferGlobal, Distributed, true, false, nil},
		{Hint("bogus"), Distributed, false, false, ErrUnknown},
	} {
		r, err := Resolve(tc.h, tc.b)
		if !errors.Is(err, tc.wantErr) {
			t.Errorf("Resolve(%s, %d) error = %v, want %v", tc.h, tc.b, err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if r.Lock != tc.lock || (r.Warning != "") != tc.warn || r.Why == "" {
			t.Errorf("Resolve(%s, %d) = %+v; want lock=%v warning=%v", tc.h, tc.b, r, tc.lock, tc.warn)
		}
	}
}

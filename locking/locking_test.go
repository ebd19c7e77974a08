package locking

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// CheckKey's one-pass check of printable ASCII keys accepts and refuses
// what the full check does, at each edge of it.
func TestCheckKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"s1", true},
		{"nightly-report", true},
		{" ~", true},
		{"é-unicode", true},
		{strings.Repeat("k", MaxKeyLen), true},
		{"", false},
		{strings.Repeat("k", MaxKeyLen+1), false},
		{"tab\tkey", false},
		{"del\x7fkey", false},
		{"nul\x00", false},
		{"bad\xffutf8", false},
		{"c1\u0085", true}, // not below 0x20 nor 0x7f: allowed, as before
	} {
		err := CheckKey(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("CheckKey(%q) = %v, want ok %v", tc.key, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckKey(%q) = %v, not ErrInvalid", tc.key, err)
		}
	}
}

// TestInvalidError: the typed invalid-argument error reads as the
// fmt.Errorf("%w: ...", ErrInvalid) it replaced, and is ErrInvalid.
func TestInvalidError(t *testing.T) {
	for _, tc := range []struct {
		err  *InvalidError
		want string
	}{
		{&InvalidError{Field: "url", Subject: "pg", Reason: "empty url"}, "locking: invalid argument: pg: empty url"},
		{&InvalidError{Field: "url", Reason: "Redis URL is empty"}, "locking: invalid argument: Redis URL is empty"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if !errors.Is(fmt.Errorf("open: %w", tc.err), ErrInvalid) {
			t.Errorf("%v is not ErrInvalid", tc.err)
		}
	}
}

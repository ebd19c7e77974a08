package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// safe makes text from the cluster state (notes, ids, node names, holders,
// errors, output tails) harmless to print on a terminal. Anyone who can
// write the backend, or pause a schedule through the API, chooses that
// text: an ESC sequence in a pause note could clear the operator's screen
// or retitle the window, and a bidirectional override (U+202E) could make
// a table show another node or id than the one it holds. Every C0 and C1
// control (tab and newline included: a cell stays one cell), DEL, the
// bidirectional embeddings, overrides and isolates, and any byte that is
// not UTF-8 are written as Go escapes (\x1b, \u202e). The JSON output
// escapes controls itself and is left alone.
func safe(s string) string { return escape(s, false) }

// safeLines is safe for a multi-line message (an error listing config
// problems): new lines and tabs pass.
func safeLines(s string) string { return escape(s, true) }

func escape(s string, lines bool) string {
	if !needsEscape(s, lines) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case dangerous(r, lines) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case dangerous(r, lines):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(s string, lines bool) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || dangerous(r, lines) {
			return true
		}
		i += n
	}
	return false
}

func dangerous(r rune, lines bool) bool {
	switch {
	case lines && (r == '\n' || r == '\t'):
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f: // C0, DEL, C1
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // bidi embeddings, overrides, isolates
		return true
	}
	return false
}

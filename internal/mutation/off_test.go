//go:build !simmut

package mutation

import "testing"

// Without the simmut tag no mutation is ever on and nothing is remembered.
func TestOffWithoutTag(t *testing.T) {
	for _, n := range All {
		if On(n) {
			t.Errorf("On(%q) = true without the simmut tag", n)
		}
	}
	Stale("k", 1)
	if got := Stale("k", 2); got != 2 {
		t.Errorf("Stale = %d without the simmut tag; want the value passed, 2", got)
	}
}

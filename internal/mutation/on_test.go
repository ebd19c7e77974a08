//go:build simmut

package mutation

import "testing"

// With the simmut tag, Set makes one mutation on, and Stale answers with
// the value of the previous call, until Set forgets it.
func TestSetAndStale(t *testing.T) {
	t.Cleanup(func() { Set("") })
	Set(NoResend)
	for _, n := range All {
		if On(n) != (n == NoResend) {
			t.Errorf("On(%q) = %v with %q set", n, On(n), NoResend)
		}
	}
	if got := Stale("k", 1); got != 1 {
		t.Errorf("first Stale = %d; want 1", got)
	}
	if got := Stale("k", 2); got != 1 {
		t.Errorf("second Stale = %d; want the earlier 1", got)
	}
	Set("")
	if On(NoResend) {
		t.Error("On(NoResend) after Set(\"\")")
	}
	if got := Stale("k", 3); got != 3 {
		t.Errorf("Stale after Set = %d; want 3 (forgotten)", got)
	}
}

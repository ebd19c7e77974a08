package node

import "testing"

// The HTTP connection cap leaves at least half the descriptors to the
// rest of the node whatever max_connections says.
func TestHTTPConnCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		max   int
		limit uint64
		want  int
	}{
		{256, 0, 256},       // limit unknown: as configured
		{256, 1 << 20, 256}, // plenty: as configured
		{256, 256, 128},     // ulimit -n 256: half
		{256, 1024, 256},
		{1000, 1024, 512},
		{10, 3, 1}, // never none
	} {
		if got := httpConnCap(tc.max, tc.limit); got != tc.want {
			t.Errorf("httpConnCap(%d, %d) = %d, want %d", tc.max, tc.limit, got, tc.want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:9464": true, "127.8.0.1:1": true, "[::1]:9464": true, "localhost:9464": true, "LOCALHOST:1": true,
		"0.0.0.0:9464": false, "[::]:9464": false, ":9464": false, "10.0.0.5:9464": false, "node-a:9464": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

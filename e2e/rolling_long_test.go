//go:build e2elong

package e2e

import "testing"

// TestRollingDeployFull is the standing rolling-deploy test in full (see
// TestRollingDeploy): every node restarted in turn twice, the holder
// killed once in between. `make cluster-test` runs it.
func TestRollingDeployFull(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *Backend) { rollingDeploy(t, b, 2) })
}

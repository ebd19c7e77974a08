package workpool

import (
	"testing"

	"go.uber.org/goleak"
)

// No worker outlives its pool.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

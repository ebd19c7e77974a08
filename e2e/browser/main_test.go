package browser

import (
	"testing"

	"github.com/bext-dev/bext-scheduler/internal/proctest"
)

// bin is the bext-scheduler binary the tests run, built once.
var bin string

// TestMain builds the binary and checks for leaked goroutines (chromedp's
// included) once the tests are done.
func TestMain(m *testing.M) { proctest.Main(m, &bin) }

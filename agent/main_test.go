package agent

import (
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// The loop's goroutines (Run's tracer, pusher, retention and resolver,
// dumps, read-aheads) end with it: none is left after the tests.
func TestMain(m *testing.M) { testutil.MainNoLeaks(m, nil) }

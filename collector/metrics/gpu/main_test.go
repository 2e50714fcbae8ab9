package gpu

import (
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// TestMain fails the package when its tests leave goroutines behind
// (Xid watchers).
func TestMain(m *testing.M) { testutil.MainNoLeaks(m, nil) }

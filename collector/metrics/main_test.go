package metrics

import (
	"net/http"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// TestMain fails the package when its tests leave goroutines behind
// (servers, pushers, HTTP connections).
func TestMain(m *testing.M) { testutil.MainNoLeaks(m, http.DefaultClient.CloseIdleConnections) }

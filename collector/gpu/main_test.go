package gpu

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestMain fails the package when its tests leave goroutines behind
// (Xid watchers).
func TestMain(m *testing.M) {
	base := runtime.NumGoroutine()
	code := m.Run()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); code == 0 && n > base {
		buf := make([]byte, 1<<20)
		fmt.Fprintf(os.Stderr, "goroutines leaked: %d > %d\n%s", n, base, buf[:runtime.Stack(buf, true)])
		code = 1
	}
	os.Exit(code)
}

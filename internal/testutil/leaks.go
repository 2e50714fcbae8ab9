package testutil

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// MainNoLeaks is a TestMain that fails the package when its tests leave
// goroutines behind: it runs m, then settle (closing idle connections,
// say; nil for none), gives stray goroutines 5 s to end, and exits.
func MainNoLeaks(m *testing.M, settle func()) {
	base := runtime.NumGoroutine()
	code := m.Run()
	if settle != nil {
		settle()
	}
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

// Package privileged gates tests that need root, eBPF or ptrace.
//
// Without privileges such a test skips with the reason, unless
// XPU_TIMER_REQUIRE_PRIVILEGED=1 is set (as CI sets it): then it fails, so a
// green run can never hide a skipped privileged test.
package privileged

import (
	"os"
	"testing"
)

// Required reports whether the environment demands privileged tests run.
func Required() bool { return os.Getenv("XPU_TIMER_REQUIRE_PRIVILEGED") == "1" }

// Skip skips t with reason, or fails it when privileged tests are required.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("privileged test cannot run: %s (XPU_TIMER_REQUIRE_PRIVILEGED=1 turns this skip into a failure)", reason)
	}
	t.Skip(reason)
}

// Root skips or fails t unless it runs as root.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root (eBPF and ptrace)")
	}
}

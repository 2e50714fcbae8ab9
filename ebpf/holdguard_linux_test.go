//go:build linux && (386 || amd64)

package ebpf

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A tracer starts one guard of its holds, which exits when the tracer
// closes; a tracer whose guard cannot start works on without it and says
// so in an error notice; a tracer that holds nothing starts none.
func TestHoldGuardLife(t *testing.T) {
	tr := newTracer(t, Options{})
	if tr.guard == nil {
		t.Fatalf("no guard: %v", tr.box.takeNotices())
	}
	pid := tr.guard.pid
	if err := unix.Kill(pid, 0); err != nil {
		t.Fatalf("the guard %d does not run: %v", pid, err)
	}
	tr.Close()
	if err := unix.Kill(pid, 0); err == nil {
		t.Fatalf("the guard %d still runs (or is not reaped) after Close", pid)
	}

	if tr := newTracer(t, Options{noHold: true}); tr.guard != nil {
		t.Fatal("a tracer that holds nothing started a guard")
	}

	exe := guardExe
	guardExe = "/nonexistent/xpu-timer"
	defer func() { guardExe = exe }()
	tr = newTracer(t, Options{})
	if tr.guard != nil {
		t.Fatal("a guard started from a binary that does not exist")
	}
	var said bool
	for _, n := range tr.box.takeNotices() {
		said = said || n.Kind == NoticeError && strings.Contains(n.Err.Error(), "no guard of the holds")
	}
	if !said {
		t.Fatal("a tracer without its guard said nothing")
	}
}

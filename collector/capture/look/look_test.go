package look

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
	"github.com/xpu-timer/xpu-timer/timer"
)

func monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// start runs a command for the test and kills it at the end.
func start(t *testing.T, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// lookUntil looks at pid until ok says the look is the one wanted.
func lookUntil(t *testing.T, p *Proc, pid int, what string, ok func(l timer.Look) bool) timer.Look {
	t.Helper()
	var l timer.Look
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var seen bool
		if l, seen = p.Look(pid, monotonic()); seen && ok(l) {
			return l
		}
	}
	t.Fatalf("no look at %d shows %s; last %+v", pid, what, l)
	return l
}

// A sleeping process: its state and its system call; no Python frames
// read from a process asleep.
func TestLookSleeping(t *testing.T) {
	pid := start(t, "sleep", "60")
	p := &Proc{Monotonic: monotonic}
	l := lookUntil(t, p, pid, "sleep asleep in a system call", func(l timer.Look) bool { return l.State == 'S' && l.Site != "" })
	if l.PID != pid || l.Sleeps == 0 || l.Python != "" {
		t.Errorf("look %+v: want pid %d, sleeps counted, no Python frames", l, pid)
	}
	// LastRan is not checked against the clock: it is the target's CPU's
	// scheduler clock moved by an offset taken on this thread's, and on
	// a VM the two can be seconds apart.
	p.Forget(pid)
}

// A running Python process: its frames, innermost first, by function and
// file; a process gone gives no look.
func TestLookRunningPython(t *testing.T) {
	// Looked at once it runs its code: a process seen before its
	// interpreter is up is taken for one that is not Python (the loop
	// forgets it at its exec, which a pyenv shim makes).
	pid := testutil.StartPython(t, "import sys\ndef spin():\n    while True: pass\n\ndef outer():\n    print('ready', flush=True)\n    spin()\n\nouter()\n")
	p := &Proc{Monotonic: monotonic}
	const want = "spin@<string>;outer@<string>;<module>@<string>"
	lookUntil(t, p, pid, want+" running", func(l timer.Look) bool { return l.State == 'R' && l.Python == want })
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, seen := p.Look(pid, monotonic()); !seen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a killed process still gives looks")
		}
	}
}

// A Python process that computes, then waits in a lock: the look at the
// wait reads its frames anew, not those of its last run (a hang's report
// shows them).
func TestLookWaitingPython(t *testing.T) {
	pid := testutil.StartPython(t, "import threading, time\n"+
		"def spin(until):\n    while time.monotonic() < until: pass\n\n"+
		"def wait_here(l):\n    l.acquire()\n\n"+
		"l = threading.Lock()\nl.acquire()\nprint('ready', flush=True)\nspin(time.monotonic() + 2)\nwait_here(l)\n")
	p := &Proc{Monotonic: monotonic}
	lookUntil(t, p, pid, "spin running", func(l timer.Look) bool { return l.State == 'R' && l.Python == "spin@<string>;<module>@<string>" })
	const want = "wait_here@<string>;<module>@<string>"
	lookUntil(t, p, pid, want+" asleep", func(l timer.Look) bool { return l.State == 'S' && l.Site != "" && l.Python == want })
}

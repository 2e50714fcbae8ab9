package dump

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/native"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// interpreters are the CPython builds of the test image (REFERENCE §6).
var interpreters = []string{
	"/root/.pyenv/versions/3.9.18/bin/python3.9",
	"/root/.pyenv/versions/3.10.13/bin/python3.10",
	"/root/.pyenv/versions/3.11.7/bin/python3.11",
	"/root/.pyenv/versions/3.12.1/bin/python3.12",
	"/root/.pyenv/versions/3.13.0/bin/python3.13",
	"/usr/bin/python3.11",
}

// run starts a program that prints "ready PID" and waits until all its
// threads sleep. It is killed at cleanup, which fails if it is not reaped
// then (a thread left stopped or traced).
func run(t *testing.T, name string, args ...string) int {
	t.Helper()
	return runCmd(t, exec.Command(name, args...))
}

// runCmd is run of a command made by the caller.
func runCmd(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	name := cmd.Path
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Process.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s was not reaped after SIGKILL", name)
		}
		out.Close()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "ready") {
		t.Fatalf("%s said %q: %v", name, line, err)
	}
	pid := cmd.Process.Pid
	waitAsleep(t, name, pid, 0)
	return pid
}

// waitAsleep waits up to 10 s until every thread of pid sleeps (state S),
// and there are want of them (any number but none when want is 0).
func waitAsleep(t testing.TB, name string, pid, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		tids, _ := procfs.Tasks(pid)
		asleep := 0
		for _, tid := range tids {
			if st, err := procfs.ReadTaskStat(pid, tid); err == nil && st.State == 'S' {
				asleep++
			}
		}
		if len(tids) > 0 && asleep == len(tids) && (want == 0 || len(tids) == want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d threads asleep", name, asleep, len(tids))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func funcs(fs []stack.Frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Func
	}
	return out
}

// inOrder reports whether want appears in got in this order (not
// necessarily next to each other).
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func thread(p *Process, match func(stack.Thread) bool) *stack.Thread {
	for i := range p.Threads {
		if match(p.Threads[i]) {
			return &p.Threads[i]
		}
	}
	return nil
}

// TestCapturePython captures a Python process with every installed
// interpreter: native, Python and merged stacks of each thread, then each
// kind alone.
func TestCapturePython(t *testing.T) {
	privileged.Root(t)
	for _, py := range interpreters {
		t.Run(py, func(t *testing.T) {
			if _, err := os.Stat(py); err != nil {
				t.Skipf("%s not installed", py)
			}
			capturePython(t, exec.Command(py, "testdata/stuck.py"), true)
		})
	}
	// Debian sid's, run by their loader from a private prefix: stripped,
	// their native stacks name no frame of the evaluation loop, so the
	// merged stack is the native frames, then the Python ones.
	for _, minor := range []string{"3.14", "3.15"} {
		t.Run("sid-"+minor, func(t *testing.T) {
			s := testutil.Sid(minor)
			if err := s.Installed(); err != nil {
				t.Skip(err)
			}
			capturePython(t, s.Command(s.Path, "testdata/stuck.py"), false)
		})
	}
}

// capturePython captures testdata/stuck.py run by cmd: native, Python and
// merged stacks of each thread, then each kind alone. evalNamed: the
// native stacks name the evaluation loop's frames, which the merged stack
// replaces with the Python frames they ran.
func capturePython(t *testing.T, cmd *exec.Cmd, evalNamed bool) {
	t.Helper()
	pid := runCmd(t, cmd)
	p, err := Capture(pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Python == "" || len(p.Threads) != 2 || len(p.Errors) > 0 || p.StoppedFor <= 0 {
		t.Fatalf("capture: python %q, %d threads, stopped %v, errors %q", p.Python, len(p.Threads), p.StoppedFor, p.Errors)
	}
	main := thread(p, func(th stack.Thread) bool { return th.TID == pid })
	waiter := thread(p, func(th stack.Thread) bool { return th.TID != pid })
	if main == nil || waiter == nil {
		t.Fatalf("main or waiter thread missing: %d threads", len(p.Threads))
	}
	for _, tc := range []struct {
		th     *stack.Thread
		python []string
	}{
		{main, []string{"inner", "outer", "<module>"}},
		{waiter, []string{"wait_here", "worker"}},
	} {
		if tc.th.Error != "" {
			t.Errorf("thread %d: %s", tc.th.TID, tc.th.Error)
		}
		if !inOrder(funcs(tc.th.Python), tc.python) {
			t.Errorf("thread %d python: %q, want %q in order", tc.th.TID, funcs(tc.th.Python), tc.python)
		}
		merged := funcs(tc.th.Merged)
		if !evalNamed {
			if want := append(funcs(tc.th.Native), funcs(tc.th.Python)...); !slices.Equal(merged, want) {
				t.Errorf("thread %d merged: %q, want the native frames, then the Python ones", tc.th.TID, merged)
			}
			continue
		}
		if !slices.ContainsFunc(tc.th.Native, stack.IsEvalFrame) {
			t.Errorf("thread %d native: no evaluation loop frame in %q", tc.th.TID, funcs(tc.th.Native))
		}
		// Merged: the Python frames in order, inside the native
		// frames they called, with the evaluation loop replaced.
		if !inOrder(merged, tc.python) || slices.ContainsFunc(tc.th.Merged, stack.IsEvalFrame) ||
			tc.th.Merged[0] != tc.th.Native[0] || merged[0] == tc.python[0] {
			t.Errorf("thread %d merged: %q", tc.th.TID, merged)
		}
	}

	p, err = Capture(pid, Options{NoPython: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range p.Threads {
		if len(th.Native) < 3 || len(th.Python) > 0 || len(th.Merged) > 0 {
			t.Errorf("native only, thread %d: %d native, %d python, %d merged", th.TID, len(th.Native), len(th.Python), len(th.Merged))
		}
	}

	p, err = Capture(pid, Options{NoNative: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.StoppedFor != 0 {
		t.Errorf("python only stopped the process for %v", p.StoppedFor)
	}
	for _, th := range p.Threads {
		if len(th.Native) > 0 || len(th.Python) < 2 || len(th.Merged) > 0 {
			t.Errorf("python only, thread %d: %d native, %d python, %d merged", th.TID, len(th.Native), len(th.Python), len(th.Merged))
		}
	}
}

// TestCaptureUnreadPython captures an interpreter the Python reader
// cannot read (Debian sid's 3.14 claiming to be 3.16.0a1, whose table
// 3.15's layout does not fit): native stacks, and one line that says so.
func TestCaptureUnreadPython(t *testing.T) {
	privileged.Root(t)
	s := testutil.Sid("3.14")
	if err := s.Installed(); err != nil {
		t.Skip(err)
	}
	exe := s.WithDebugVersion(t, t.TempDir(), "python3.16", 0x031000a1)
	pid := runCmd(t, s.Command(exe, "-c", "import threading; ev = threading.Event(); threading.Thread(target=ev.wait).start(); print('ready', flush=True); ev.wait()"))
	p, err := Capture(pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const want = "Python 3.16.0a1: frames not read: unknown layout"
	if !slices.Equal(p.Errors, []string{want}) || p.Python != "" {
		t.Errorf("errors %q, python %q; want the one line %q", p.Errors, p.Python, want)
	}
	for _, th := range p.Threads {
		if len(th.Native) == 0 || len(th.Python) != 0 {
			t.Errorf("thread %d: %d native frames, %d python", th.TID, len(th.Native), len(th.Python))
		}
	}
	if len(p.Threads) != 2 {
		t.Errorf("%d threads, want 2", len(p.Threads))
	}
}

// TestCaptureNative captures a process that is not Python.
func TestCaptureNative(t *testing.T) {
	privileged.Root(t)
	pid := run(t, "sh", "-c", `echo ready $$; exec sleep 1000`)
	p, err := Capture(pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Python != "" || len(p.Threads) != 1 || len(p.Errors) > 0 {
		t.Fatalf("capture: python %q, %d threads, errors %q", p.Python, len(p.Threads), p.Errors)
	}
	th := p.Threads[0]
	if th.Name != "sleep" || th.State != "S" || len(th.Native) < 3 || !strings.Contains(th.Native[0].Func, "nanosleep") ||
		len(th.Python) > 0 || len(th.Merged) > 0 {
		t.Errorf("thread %d %q (%s): native %q, %d python, %d merged", th.TID, th.Name, th.State, funcs(th.Native), len(th.Python), len(th.Merged))
	}
}

// A dump after Cache.Warm shows exactly what a dump with a cold cache
// shows: frames, files and lines.
func TestWarmSameDump(t *testing.T) {
	privileged.Root(t)
	pid := run(t, "sh", "-c", `echo ready $$; exec sleep 1000`)
	cold, err := Capture(pid, Options{Unwinder: native.NewUnwinder(nil), NoPython: true})
	if err != nil {
		t.Fatal(err)
	}
	u := native.NewUnwinder(nil)
	if err := u.Cache().Warm(pid); err != nil {
		t.Fatal(err)
	}
	warm, err := Capture(pid, Options{Unwinder: u, NoPython: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(cold.Threads) != 1 || len(warm.Threads) != 1 || !slices.Equal(cold.Threads[0].Native, warm.Threads[0].Native) {
		t.Fatalf("cold dump %+v\nwarm dump %+v", cold.Threads, warm.Threads)
	}
	if err := u.Cache().Warm(4194999); err == nil {
		t.Error("Warm of a missing process: no error")
	}
}

func TestCaptureNoProcess(t *testing.T) {
	// pid_max is at most 4194304.
	if _, err := Capture(4194999, Options{}); !errors.Is(err, ErrNoProcess) {
		t.Errorf("capture of a missing process: %v", err)
	}
}

func ExampleCapture() {
	p, err := Capture(os.Getpid(), Options{NoNative: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Python == "", len(p.Threads) > 0)
	// Output: true true
}

// GOGC is raised while captures run and put back when the last one ends;
// a setting above captureGC, or off, is left alone.
func TestRelaxGC(t *testing.T) {
	gcPercent := func() int {
		v := debug.SetGCPercent(0)
		debug.SetGCPercent(v)
		return v
	}
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)
	first := relaxGC()
	second := relaxGC()
	if v := gcPercent(); v != captureGC {
		t.Errorf("during two captures GOGC = %d, want %d", v, captureGC)
	}
	first()
	if v := gcPercent(); v != captureGC {
		t.Errorf("after the first of two ended GOGC = %d, want %d", v, captureGC)
	}
	second()
	if v := gcPercent(); v != 100 {
		t.Errorf("after both ended GOGC = %d, want 100", v)
	}
	for _, set := range []int{-1, captureGC * 2} {
		debug.SetGCPercent(set)
		restore := relaxGC()
		if v := gcPercent(); v != set {
			t.Errorf("set to %d: during a capture GOGC = %d", set, v)
		}
		restore()
		if v := gcPercent(); v != set {
			t.Errorf("set to %d: after a capture GOGC = %d", set, v)
		}
	}
}

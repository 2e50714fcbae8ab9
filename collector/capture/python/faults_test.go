package python

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// TestNotPython opens processes that hold no interpreter.
func TestNotPython(t *testing.T) {
	if _, err := Open(os.Getpid()); !errors.Is(err, ErrNotPython) {
		t.Errorf("Open(self) = %v, want ErrNotPython", err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if _, err := Open(cmd.Process.Pid); !errors.Is(err, ErrNotPython) {
		t.Errorf("Open(sleep) = %v, want ErrNotPython", err)
	}
	if _, err := Open(1 << 30); !errors.Is(err, procfs.ErrNoProcess) {
		t.Errorf("Open(missing pid) = %v, want ErrNoProcess", err)
	}
}

// TestGILHolder finds the thread that blocks in pause() with the GIL held
// (ctypes.PyDLL keeps it) and checks no other thread is marked.
func TestGILHolder(t *testing.T) {
	privileged.Root(t)
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		cmd, st := startTarget(t, py, "gil")
		r, err := Open(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		// The holder wrote the state just before calling pause(): poll
		// until its innermost frame is there.
		deadline := time.Now().Add(10 * time.Second)
		for {
			ts, err := r.Threads()
			if err != nil {
				t.Fatal(err)
			}
			var holders []int
			inPause := false
			for _, th := range ts {
				if th.GIL {
					holders = append(holders, th.TID)
				}
				if th.TID == st.GILNativeID && len(th.Frames) > 0 && th.Frames[0].Func == "hold_gil" && th.Frames[0].Line == hold_gilPauseLine(t) {
					inPause = true
				}
			}
			if inPause {
				if len(holders) != 1 || holders[0] != st.GILNativeID {
					t.Fatalf("GIL holders %v, want [%d]", holders, st.GILNativeID)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("thread %d never reached pause(): %+v", st.GILNativeID, ts)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// hold_gilPauseLine is the line of target.py where hold_gil calls pause().
func hold_gilPauseLine(t *testing.T) int {
	f, err := os.Open("testdata/target.py")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "def hold_gil(") {
			in = true
		}
		if in && strings.TrimSpace(line) == "libc.pause()" {
			return n
		}
	}
	t.Fatal("no pause() call in hold_gil")
	return 0
}

// TestTargetExits kills the target while it is being read: every read
// either succeeds or fails cleanly, and once it is gone reads report
// ErrNoProcess.
func TestTargetExits(t *testing.T) {
	privileged.Root(t)
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		cmd, _ := startTarget(t, py)
		r, err := Open(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < 1000; i++ {
				if _, err := r.Threads(); err != nil {
					return
				}
			}
		}()
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-done
		waitGone(t, cmd.Process.Pid)
		if _, err := r.Threads(); !errors.Is(err, procfs.ErrNoProcess) {
			t.Errorf("Threads after exit = %v, want ErrNoProcess", err)
		}
	})
}

// waitGone waits until pid has been reaped by startTarget's waiter.
func waitGone(t *testing.T, pid int) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still there", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRacingTarget reads a target whose state changes all the time:
// reads must not fail for long, and what they return must be well formed.
func TestRacingTarget(t *testing.T) {
	privileged.Root(t)
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		cmd := py.command("testdata/busy.py")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("busy.py: %q %v", line, err)
		}
		r, err := Open(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		ok, failed, frames := 0, 0, 0
		for i := 0; i < 200; i++ {
			ts, err := r.Threads()
			if err != nil {
				failed++
				continue
			}
			ok++
			for _, th := range ts {
				for _, f := range th.Frames {
					frames++
					// Line 0 is real: 3.11+ gives module code's RESUME line 0.
					if f.Func == "" || f.File == "" || f.Module != "python" || f.Line < -1 {
						t.Errorf("malformed frame %+v", f)
					}
				}
			}
		}
		t.Logf("%d reads ok, %d failed, %d frames", ok, failed, frames)
		if ok < 150 || frames == 0 {
			t.Errorf("%d of 200 reads succeeded, %d frames", ok, frames)
		}
	})
}

// TestManyThreads reads a process with 300 Python threads: every one is
// found, with a distinct live native thread id.
func TestManyThreads(t *testing.T) {
	privileged.Root(t)
	const script = `import sys, threading
ev = threading.Event()
for _ in range(300):
    threading.Thread(target=ev.wait, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
`
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		cmd := py.command("-c", script)
		stdin, stdout := testutil.Start(t, cmd)
		defer func() { stdin.Close(); cmd.Wait() }()
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("script: %q %v", line, err)
		}
		r, err := Open(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := r.Threads()
		if err != nil {
			t.Fatal(err)
		}
		tids, err := procfs.Tasks(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		live := map[int]bool{}
		for _, tid := range tids {
			live[tid] = true
		}
		seen := map[int]bool{}
		for _, th := range ts {
			if !live[th.TID] || seen[th.TID] {
				t.Errorf("thread %#x: TID %d not a distinct live thread", th.Ident, th.TID)
			}
			seen[th.TID] = true
		}
		if len(ts) != 301 {
			t.Errorf("%d threads, want 301", len(ts))
		}
	})
}

// TestWrongOffsetsFailCleanly reads a live target with each offset of the
// right layout shifted in turn, as a reader of a mismatched build would:
// every read must end (no panic, no endless walk) and report an error or
// well-formed frames.
func TestWrongOffsetsFailCleanly(t *testing.T) {
	privileged.Root(t)
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		cmd, _ := startTarget(t, py)
		r, err := Open(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		good := r.l
		fields := reflect.ValueOf(&r.l).Elem()
		failed := 0
		var accepted []string
		for i := 0; i < fields.NumField(); i++ {
			f := fields.Field(i)
			if f.Kind() != reflect.Int64 {
				continue // minor, stackRef
			}
			f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem() // unexported
			orig := f.Int()
			if orig == none {
				continue
			}
			for _, delta := range []int64{8, -8} {
				if orig+delta < 0 {
					continue
				}
				r.l = good
				f.SetInt(orig + delta)
				clear(r.codes)
				r.tidOff = 0
				ts, err := r.Threads()
				if err != nil {
					failed++
					continue
				}
				rejected := false
				for _, th := range ts {
					if len(th.Frames) > maxFrames {
						t.Errorf("%s%+d: %d frames", fields.Type().Field(i).Name, delta, len(th.Frames))
					}
					rejected = rejected || th.Error != ""
				}
				if rejected {
					failed++
				} else {
					accepted = append(accepted, fmt.Sprintf("%s%+d", fields.Type().Field(i).Name, delta))
				}
			}
		}
		r.l = good
		if _, err := r.Threads(); err != nil {
			t.Errorf("right layout after wrong ones: %v", err)
		}
		t.Logf("%d shifted layouts rejected; not detected: %v", failed, accepted)
		if failed == 0 {
			t.Error("no shifted layout was rejected")
		}
	})
}

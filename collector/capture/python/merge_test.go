package python

import (
	"bufio"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

var (
	// "Thread 2 (Thread 0x7f.. (LWP 12) ...", or "Thread 2 (LWP 12 ..."
	// where gdb has no libthread_db for the target's libc.
	gdbThread = regexp.MustCompile(`^Thread \d+ \((?:Thread 0x[0-9a-f]+ \()?LWP (\d+)`)
	gdbFrame  = regexp.MustCompile(`^#\d+\s+(?:0x[0-9a-f]+ in )?([^ (]+)`)
)

// gdbStacks returns every thread's native frames by LWP, as gdb's
// `thread apply all bt` prints them (inlined frames included). For an
// interpreter a loader runs, gdb takes the loader for the program: it is
// told the interpreter's symbols (a non-PIE executable, as Debian's).
func gdbStacks(t *testing.T, pid int, py interpreter) map[int][]stack.Frame {
	t.Helper()
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		t.Skipf("gdb not installed: %v", err)
	}
	args := []string{"-p", strconv.Itoa(pid), "-batch", "-nx"}
	if py.sid != nil {
		args = append(args, "-ex", "add-symbol-file "+py.path)
	}
	out, err := exec.Command(gdb, append(args, "-ex", "thread apply all bt")...).Output()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	stacks := map[int][]stack.Frame{}
	lwp := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if m := gdbThread.FindStringSubmatch(sc.Text()); m != nil {
			lwp, _ = strconv.Atoi(m[1])
			continue
		}
		if m := gdbFrame.FindStringSubmatch(sc.Text()); m != nil && lwp != 0 {
			stacks[lwp] = append(stacks[lwp], stack.Frame{Func: m[1]})
		}
	}
	return stacks
}

func anyEvalFrame(stacks map[int][]stack.Frame) bool {
	for _, frames := range stacks {
		for _, f := range frames {
			if stack.IsEvalFrame(f) {
				return true
			}
		}
	}
	return false
}

// TestEntryMarksMatchNativeEvalFrames checks, per version, that the Entry
// marks of our Python frames split them into exactly as many groups as
// gdb shows _PyEval_EvalFrameDefault frames, and that merging gdb's native
// stack with ours replaces every eval frame and keeps every Python frame.
func TestEntryMarksMatchNativeEvalFrames(t *testing.T) {
	privileged.Root(t)
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		cmd, _ := startTarget(t, py)
		r, err := Open(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		threads, err := r.Threads()
		if err != nil {
			t.Fatal(err)
		}
		native := gdbStacks(t, cmd.Process.Pid, py)
		if !anyEvalFrame(native) {
			// Debian sid's 3.14 and 3.15: stripped, and no frame on any
			// thread's stack lies in _PyEval_EvalFrameDefault, the one
			// function of the evaluation loop their symbols keep.
			t.Skipf("gdb names no frame of %s's evaluation loop: nothing to count the entry marks against", py.path)
		}
		for _, th := range threads {
			nf, ok := native[th.TID]
			if !ok {
				t.Errorf("gdb shows no thread %d", th.TID)
				continue
			}
			evals, groups := 0, 0
			for _, f := range nf {
				if stack.IsEvalFrame(f) {
					evals++
				}
			}
			for _, f := range th.Frames {
				if f.Entry {
					groups++
				}
			}
			if evals != groups {
				t.Errorf("thread %d: gdb has %d eval frames, our Python frames form %d groups\nnative: %v\npython: %v",
					th.TID, evals, groups, nf, th.Frames)
			}
			merged := stack.Merge(nf, th.Frames)
			var py []stack.Frame
			for _, f := range merged {
				if stack.IsEvalFrame(f) {
					t.Errorf("thread %d: eval frame left after merge", th.TID)
				}
				if f.Module == "python" {
					py = append(py, f)
				}
			}
			if len(py) != len(th.Frames) {
				t.Errorf("thread %d: %d Python frames merged, want %d", th.TID, len(py), len(th.Frames))
			}
		}
	})
}

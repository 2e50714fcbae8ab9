package python

import (
	"bufio"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/stack"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

var (
	gdbThread = regexp.MustCompile(`^Thread \d+ \(Thread 0x[0-9a-f]+ \(LWP (\d+)\)`)
	gdbFrame  = regexp.MustCompile(`^#\d+\s+(?:0x[0-9a-f]+ in )?([^ (]+)`)
)

// gdbStacks returns every thread's native frames by LWP, as gdb's
// `thread apply all bt` prints them (inlined frames included).
func gdbStacks(t *testing.T, pid int) map[int][]stack.Frame {
	t.Helper()
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		t.Skipf("gdb not installed: %v", err)
	}
	out, err := exec.Command(gdb, "-p", strconv.Itoa(pid), "-batch", "-nx", "-ex", "thread apply all bt").Output()
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

// TestEntryMarksMatchNativeEvalFrames checks, per version, that the Entry
// marks of our Python frames split them into exactly as many groups as
// gdb shows _PyEval_EvalFrameDefault frames, and that merging gdb's native
// stack with ours replaces every eval frame and keeps every Python frame.
func TestEntryMarksMatchNativeEvalFrames(t *testing.T) {
	privileged.Root(t)
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		cmd, _ := startTarget(t, py.path)
		r, err := Open(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		threads, err := r.Threads()
		if err != nil {
			t.Fatal(err)
		}
		native := gdbStacks(t, cmd.Process.Pid)
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

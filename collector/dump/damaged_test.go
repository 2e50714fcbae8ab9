package dump

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/native"
	"github.com/xpu-timer/xpu-timer/collector/stack"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// TestDamagedLibraries dumps a process with a thread in spin() of each
// damaged variant of a small library that ld.so still loads (its section
// headers lying about sizes and places, compression headers lying, the
// headers cut or gone, the file cut short, a .gnu_debuglink to another
// library's debug file): the thread's stack names spin and its caller,
// and the dump says what of the library was left out and where the names
// came from, in its errors; a sound library's dump says nothing.
func TestDamagedLibraries(t *testing.T) {
	privileged.Root(t)
	prog, variants := testutil.SpinLibraries(t, t.TempDir())
	loaded := 0
	for _, v := range variants {
		t.Run(v.Name, func(t *testing.T) {
			pid, ok := startSpin(t, prog, v.Path)
			switch {
			case !ok && v.Damage == testutil.Unloadable:
				return
			case !ok:
				t.Skipf("ld.so does not load %s", v.Name)
			case v.Damage == testutil.Unloadable:
				t.Fatalf("ld.so loaded %s", v.Name)
			}
			loaded++
			// The thread said it was on its way to spin: it is there
			// within a few dumps.
			var p *Process
			var th *stack.Thread
			for i := 0; th == nil; i++ {
				var err error
				if p, err = Capture(pid, Options{NoPython: true, Unwinder: native.NewUnwinder(nil)}); err != nil {
					t.Fatal(err)
				}
				th = thread(p, func(th stack.Thread) bool {
					return len(th.Native) > 0 && th.Native[0].Module == v.Path
				})
				if th == nil && i == 100 {
					t.Fatalf("no thread in %s: %+v", v.Path, p.Threads)
				}
			}
			if got := funcs(th.Native); !inOrder(got, []string{"spin", "park", "start_thread"}) {
				t.Errorf("spinning thread: %q", got)
			}
			var told []string
			for _, e := range p.Errors {
				if strings.HasPrefix(e, v.Path+": ") {
					told = append(told, e)
				}
			}
			t.Logf("%q", told)
			if (v.Damage != testutil.Sound) != (len(told) == 1) || len(told) > 1 {
				t.Errorf("errors %q", p.Errors)
			}
		})
	}
	t.Logf("%d of %d variants loaded (ld.so refuses those whose program headers lie)", loaded, len(variants))
	if loaded == 0 {
		t.Fatal("ld.so loaded no variant")
	}
}

// startSpin starts prog on lib and waits until its thread spins in lib;
// false when ld.so refused lib. The process is killed at cleanup.
func startSpin(t *testing.T, prog, lib string) (int, bool) {
	t.Helper()
	cmd := exec.Command(prog, lib)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testutil.LockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "ready") {
		if err := cmd.Wait(); err != nil && strings.Contains(stderr.String(), "dlopen") {
			return 0, false
		}
		t.Fatalf("%s %s said %q, %q", prog, lib, line, stderr.String())
	}
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if tids, _ := procfs.Tasks(pid); len(tids) == 2 {
			return pid, true
		}
		if time.Now().After(deadline) {
			t.Fatal("the spinning thread did not start")
		}
	}
}

package dump

import (
	"bufio"
	"os/exec"
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

// TestDamagedLibraries dumps a process with a thread in spin() of each
// damaged variant of a small library that ld.so still loads (its section
// headers lying about sizes and places, compression headers lying, the
// headers cut or gone, the file cut short, a .gnu_debuglink to another
// library's debug file): the thread's stack names spin and its caller,
// and the dump says what of the library was left out and where the names
// came from, in its errors; a sound library's dump says nothing. A dump
// without Lines says the same but what only reading the debug
// information finds out.
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
			told := spinDump(t, pid, v.Path, true)
			if (v.Damage != testutil.Sound) != (len(told) == 1) || len(told) > 1 {
				t.Errorf("errors %q", told)
			}
			var want []string
			for _, line := range told {
				if line = undebugged(line); !strings.HasPrefix(line, v.Path+": names from ") {
					want = append(want, line)
				}
			}
			if got := spinDump(t, pid, v.Path, false); !slices.Equal(got, want) {
				t.Errorf("without lines: errors %q, want %q", got, want)
			}
		})
	}
	t.Logf("%d of %d variants loaded (ld.so refuses those whose program headers lie)", loaded, len(variants))
	if loaded == 0 {
		t.Fatal("ld.so loaded no variant")
	}
}

// spinDump dumps pid, whose thread is on its way to spin in lib, with a
// new symbol cache, until the thread is there, checks its stack, and
// returns the dump's errors about lib.
func spinDump(t *testing.T, pid int, lib string, lines bool) []string {
	t.Helper()
	var p *Process
	var th *stack.Thread
	for i := 0; th == nil; i++ {
		var err error
		if p, err = Capture(pid, Options{NoPython: true, Unwinder: native.NewUnwinder(nil), Lines: lines}); err != nil {
			t.Fatal(err)
		}
		th = thread(p, func(th stack.Thread) bool {
			return len(th.Native) > 0 && th.Native[0].Module == lib
		})
		if th == nil && i == 100 {
			t.Fatalf("no thread in %s: %+v", lib, p.Threads)
		}
	}
	if got := funcs(th.Native); !inOrder(got, []string{"spin", "park", "start_thread"}) {
		t.Errorf("lines %v: spinning thread: %q", lines, got)
	}
	var told []string
	for _, e := range p.Errors {
		if strings.HasPrefix(e, lib+": ") {
			told = append(told, e)
		}
	}
	t.Logf("lines %v: %q", lines, told)
	return told
}

// undebugged is a damage line of a dump with lines less what reading the
// debug information told ("debug information: ...; ").
func undebugged(line string) string {
	parts := strings.Split(line, "; ")
	kept := parts[:0]
	for i, p := range parts {
		if i == 0 {
			path, what, _ := strings.Cut(p, ": ")
			if strings.HasPrefix(what, "debug information: ") {
				parts[1] = path + ": " + parts[1]
				continue
			}
		}
		if !strings.HasPrefix(p, "debug information: ") {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "; ")
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

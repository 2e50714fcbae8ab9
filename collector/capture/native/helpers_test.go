//go:build linux && amd64

package native

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

var buildMu sync.Mutex
var built = map[string]string{}

// build compiles testdata/src with gcc or g++ -O2 -g once per test binary.
func build(t testing.TB, src string, extra ...string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := src + strings.Join(extra, " ")
	if b, ok := built[key]; ok {
		return b
	}
	cc := "gcc"
	if strings.HasSuffix(src, ".cc") {
		cc = "g++"
	}
	dir, err := osMkdirTemp()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, strings.TrimSuffix(src, filepath.Ext(src)))
	args := append([]string{"-O2", "-g", "-pthread", "-o", bin, filepath.Join("testdata", src)}, extra...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, args, err, out)
	}
	built[key] = bin
	return bin
}

// target is a running test program.
type target struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	pid    int
	exited chan struct{} // closed when the program ended and was reaped
	kill   func()        // kills the program
}

// launch starts bin and reads its "ready" line. The program is killed at
// the end of the test, which fails if it does not end then: a thread left
// stopped or traced by a dump keeps it from being reaped.
func launch(t testing.TB, bin string, args ...string) *target {
	return launchCmd(t, exec.Command(bin, args...))
}

// launchGrandchild is launch with a shell in between, as the agent sees a
// training process: not its child. The program's "ready PID" line names it.
func launchGrandchild(t testing.TB, bin string, args ...string) *target {
	// A background job reads /dev/null unless given another descriptor.
	sh := exec.Command("sh", append([]string{"-c", `exec 3<&0; "$0" "$@" <&3 3<&- & exec 3<&-; wait`, bin}, args...)...)
	tg := launchCmd(t, sh)
	// Killing the program ends the shell, which reaps it.
	tg.kill = func() { syscall.Kill(tg.pid, syscall.SIGKILL) }
	return tg
}

func launchCmd(t testing.TB, cmd *exec.Cmd) *target {
	t.Helper()
	stdin, stdout := testutil.Start(t, cmd)
	tg := &target{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		// Wait closes the pipes: only after the program has ended, when
		// nothing is read from them any more.
		cmd.Process.Wait()
		close(tg.exited)
	}()
	tg.kill = func() { cmd.Process.Kill() }
	t.Cleanup(func() {
		stdin.Close()
		tg.kill()
		if !tg.waitExit(10 * time.Second) {
			t.Errorf("target %d was not reaped 10s after SIGKILL: left traced?", tg.pid)
		}
		stdout.Close()
	})
	line, err := tg.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("target said %q: %v", line, err)
	}
	if _, err := fmt.Sscanf(line, "ready %d", &tg.pid); err != nil {
		t.Fatalf("target said %q: %v", line, err)
	}
	return tg
}

// waitExit waits up to d for the program to end and be reaped.
func (tg *target) waitExit(d time.Duration) bool {
	select {
	case <-tg.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// start launches bin and waits for its threads to settle: all but the
// running ones asleep.
func start(t testing.TB, bin string, running int, args ...string) *target {
	t.Helper()
	return settled(t, launch(t, bin, args...), running)
}

// settled waits for the threads of tg to settle: all but the running ones
// asleep.
func settled(t testing.TB, tg *target, running int) *target {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tids, _ := procfs.Tasks(tg.pid)
		asleep := 0
		for _, tid := range tids {
			if st, err := procfs.ReadTaskStat(tg.pid, tid); err == nil && st.State == 'S' {
				asleep++
			}
		}
		if len(tids) > 0 && asleep >= len(tids)-running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("target threads did not settle: %d of %d asleep", asleep, len(tids))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return tg
}

// released checks that no thread of pid is traced or in a tracing stop.
func released(t testing.TB, pid int) {
	t.Helper()
	tids, err := procfs.Tasks(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		tracer, stopped, ok := traceState(pid, tid)
		if !ok {
			continue // exited
		}
		if tracer != "0" {
			t.Errorf("thread %d still traced by %s", tid, tracer)
		}
		if stopped {
			t.Errorf("thread %d still in a tracing stop", tid)
		}
	}
}

// traceState reads from /proc/PID/task/TID/status the thread's tracer
// ("0" for none) and whether it is in a tracing stop; ok is false when the
// thread is gone.
func traceState(pid, tid int) (tracer string, stopped, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return "", false, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "TracerPid:"); ok {
			tracer = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			stopped = strings.HasPrefix(strings.TrimSpace(v), "t")
		}
	}
	return tracer, stopped, true
}

// progress asks the target for its progress counter.
func (tg *target) progress(t testing.TB) int64 {
	t.Helper()
	if _, err := io.WriteString(tg.stdin, "p\n"); err != nil {
		t.Fatalf("write to target: %v", err)
	}
	line, err := tg.out.ReadString('\n')
	if err != nil {
		t.Fatalf("read from target: %v", err)
	}
	var n int64
	if _, err := fmt.Sscanf(line, "progress %d", &n); err != nil {
		t.Fatalf("target said %q", line)
	}
	return n
}

var (
	gdbThread = regexp.MustCompile(`^Thread \d+ \(.*LWP (\d+)\)`)
	gdbFrame  = regexp.MustCompile(`^#(\d+)\s+(?:0x([0-9a-f]+) in )?(.*)$`)
)

// gdbFrame is one frame of gdb's backtrace: the function and, when gdb
// prints it, the frame's pc.
type frameLine struct {
	name string
	pc   uint64 // 0 when gdb printed none (inlined callers, line starts, signal frames)
}

// gdbStacks runs gdb's `thread apply all bt` and returns the frames of each
// thread, innermost first.
func gdbStacks(t testing.TB, pid int) map[int][]frameLine {
	t.Helper()
	out, err := exec.Command("gdb", "-p", strconv.Itoa(pid), "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	res := map[int][]frameLine{}
	tid := 0
	for _, line := range strings.Split(string(out), "\n") {
		if m := gdbThread.FindStringSubmatch(line); m != nil {
			tid, _ = strconv.Atoi(m[1])
			res[tid] = nil
			continue
		}
		m := gdbFrame.FindStringSubmatch(line)
		if m == nil || tid == 0 {
			continue
		}
		if n, _ := strconv.Atoi(m[1]); n != len(res[tid]) {
			t.Fatalf("gdb output out of order at %q:\n%s", line, out)
		}
		f := frameLine{name: normalize(gdbName(m[3]))}
		if m[2] != "" {
			f.pc, _ = strconv.ParseUint(m[2], 16, 64)
		}
		res[tid] = append(res[tid], f)
	}
	if len(res) == 0 {
		t.Fatalf("no threads in gdb's output:\n%s", out)
	}
	return res
}

// gdbName cuts the arguments and location from gdb's frame text.
func gdbName(s string) string {
	if strings.HasPrefix(s, "<signal handler called>") {
		return SignalFrame
	}
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<':
			depth++
		case '>':
			depth--
		case ' ':
			if depth == 0 && i+1 < len(s) && s[i+1] == '(' {
				return s[:i]
			}
		}
	}
	return s
}

// normalize makes names of both sides comparable: no parameter list.
func normalize(s string) string {
	s = strings.TrimSpace(s)
	// Drop a trailing parameter list "(...)" (and a const qualifier).
	s = strings.TrimSuffix(s, " const")
	if strings.HasSuffix(s, ")") && !strings.HasSuffix(s, "operator()") {
		depth := 0
		for i := len(s) - 1; i >= 0; i-- {
			if s[i] == ')' {
				depth++
			} else if s[i] == '(' {
				depth--
				if depth == 0 {
					if i > 0 {
						s = s[:i]
					}
					break
				}
			}
		}
	}
	return s
}

var (
	euThread = regexp.MustCompile(`^TID (\d+):`)
	euFrame  = regexp.MustCompile(`^#(\d+)\s+0x([0-9a-f]+)\s*(.*)$`)
)

// euStacks runs elfutils' `eu-stack -r -p` on pid (names from the symbol
// tables, no debug information) and returns its frames by thread, each
// stack cut after main as gdb and we cut it.
func euStacks(t testing.TB, pid int) map[int][]frameLine {
	t.Helper()
	path, err := exec.LookPath("eu-stack")
	if err != nil {
		t.Fatalf("eu-stack not installed (scripts/deps.sh installs it): %v", err)
	}
	// Exit status 1: some frames shown with errors (the end of a stack
	// it could not unwind past); the frames are still compared.
	out, err := exec.Command(path, "-r", "-p", strconv.Itoa(pid)).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Fatalf("eu-stack: %v\n%s", err, out)
	}
	res := map[int][]frameLine{}
	tid := 0
	ended := false
	for _, line := range strings.Split(string(out), "\n") {
		if m := euThread.FindStringSubmatch(line); m != nil {
			tid, _ = strconv.Atoi(m[1])
			res[tid], ended = nil, false
			continue
		}
		m := euFrame.FindStringSubmatch(line)
		if m == nil || tid == 0 || ended {
			continue
		}
		if n, _ := strconv.Atoi(m[1]); n != len(res[tid]) {
			t.Fatalf("eu-stack output out of order at %q:\n%s", line, out)
		}
		// Raw names (-r), demangled as we demangle them: eu-stack's own
		// demangling keeps the parameters and return type.
		f := frameLine{name: symbols.Demangle(m[3])}
		switch f.name {
		case "":
			f.name = "??"
		case "__restore_rt":
			f.name = SignalFrame
		}
		f.pc, _ = strconv.ParseUint(m[2], 16, 64)
		res[tid] = append(res[tid], f)
		ended = f.name == "main"
	}
	if len(res) == 0 {
		t.Fatalf("no threads in eu-stack's output:\n%s", out)
	}
	return res
}

// sameSymbol returns what says whether name is another symbol at the
// address of the function frame f names, in f's module or its separate
// debug file (found by build-id): the function's alias (fgets for
// _IO_fgets), which another tool may choose instead.
func sameSymbol(t testing.TB) func(f stack.Frame, name string) bool {
	values := map[string]map[string]uint64{} // by module path
	return func(f stack.Frame, name string) bool {
		if f.Module == "" {
			return false
		}
		vs, ok := values[f.Module]
		if !ok {
			vs = map[string]uint64{}
			addSymbolValues(t, vs, f.Module)
			values[f.Module] = vs
		}
		a, ok1 := vs[f.Func]
		b, ok2 := vs[name]
		return ok1 && ok2 && a == b
	}
}

// addSymbolValues adds to vs the value of every function symbol of the
// ELF file path and of its separate debug file under /usr/lib/debug, by
// name as symbols.Demangle spells it.
func addSymbolValues(t testing.TB, vs map[string]uint64, path string) {
	f, err := elf.Open(path)
	if err != nil {
		t.Logf("%s: %v", path, err)
		return
	}
	defer f.Close()
	for _, read := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, _ := read()
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				vs[symbols.Demangle(s.Name)] = s.Value
			}
		}
	}
	if s := f.Section(".note.gnu.build-id"); s != nil && !strings.HasPrefix(path, "/usr/lib/debug/") {
		if b, err := s.Data(); err == nil && len(b) > 16 {
			id := fmt.Sprintf("%x", b[16:])
			addSymbolValues(t, vs, filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug"))
		}
	}
}

package python

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// interpreter is one CPython build to test against. Debian sid's
// (scripts/sid-python.sh) run from their private prefix (sid set).
type interpreter struct {
	name, path string
	sid        *testutil.SidPython
}

// sid is Debian sid's python3.MINOR.
func sid(minor string) interpreter {
	s := testutil.Sid(minor)
	return interpreter{"sid-" + minor, s.Path, &s}
}

var interpreters = []interpreter{
	{"3.9.18", "/root/.pyenv/versions/3.9.18/bin/python3.9", nil},
	{"3.10.13", "/root/.pyenv/versions/3.10.13/bin/python3.10", nil},
	{"3.11.7", "/root/.pyenv/versions/3.11.7/bin/python3.11", nil},
	{"3.12.1", "/root/.pyenv/versions/3.12.1/bin/python3.12", nil},
	{"3.13.0", "/root/.pyenv/versions/3.13.0/bin/python3.13", nil},
	sid("3.14"),
	sid("3.15"),
	{"debian-3.11", "/usr/bin/python3.11", nil},
}

// command runs the interpreter with args.
func (py interpreter) command(args ...string) *exec.Cmd {
	if py.sid != nil {
		return py.sid.Command(py.path, args...)
	}
	return exec.Command(py.path, args...)
}

// forEachInterpreter runs f as a subtest per installed interpreter and
// logs the ones that are missing.
func forEachInterpreter(t *testing.T, f func(t *testing.T, py interpreter)) {
	for _, py := range interpreters {
		t.Run(py.name, func(t *testing.T) {
			if _, err := os.Stat(py.path); err != nil {
				t.Skipf("%s not installed: %v", py.path, err)
			}
			f(t, py)
		})
	}
}

// targetState is what testdata/target.py writes once its threads block.
type targetState struct {
	Traceback    string         `json:"traceback"`
	IDs          map[string]int `json:"ids"` // threading ident -> native id
	MainNativeID int            `json:"main_native_id"`
	GILNativeID  int            `json:"gil_native_id"`
}

// startTarget runs testdata/target.py under py and waits until it has
// written its state and every thread of it blocks (waitBlocked). The
// process is killed and reaped at cleanup.
func startTarget(t testing.TB, py interpreter, mode ...string) (*exec.Cmd, targetState) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "state.json")
	script, err := filepath.Abs("testdata/target.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := py.command(append([]string{script, out}, mode...)...)
	g, err := testutil.StartGroup(cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.Kill()
		<-g.Done()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(out)
		if err == nil {
			var st targetState
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatalf("parse %s: %v", out, err)
			}
			waitBlocked(t, cmd.Process.Pid, deadline)
			return cmd, st
		}
		select {
		case <-g.Done():
			_, code := g.Exited()
			t.Fatalf("%s exited with %d before writing its state:\n%s", py.path, code, g.Output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s wrote no state within 30s", py.path)
		}
	}
}

// blockingCalls are the system calls the target's threads block in for
// good: futex (Event.wait, the GIL) and pause (ppoll on arm64).
var blockingCalls = map[string][]string{
	"amd64": {"202", "34"},
	"arm64": {"98", "73"},
}

// waitBlocked waits until every thread of pid sits in a blocking system
// call, twice in a row 20 ms apart. The state file is written a few
// bytecodes before the main thread blocks: a stack read before then
// would catch it at the rename, and a later one at forever.wait().
func waitBlocked(t testing.TB, pid int, deadline time.Time) {
	t.Helper()
	calls := blockingCalls[runtime.GOARCH]
	if calls == nil {
		t.Fatalf("no blocking system calls known for %s", runtime.GOARCH)
	}
	blocked := func() (bool, string) {
		tids, err := procfs.Tasks(pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, tid := range tids {
			site, err := procfs.ReadSyscall(pid, tid)
			if err != nil {
				return false, fmt.Sprintf("thread %d: %v", tid, err)
			}
			nr, _, _ := strings.Cut(site, " ")
			if !slices.Contains(calls, nr) {
				return false, fmt.Sprintf("thread %d in %q", tid, nr)
			}
		}
		return true, ""
	}
	settled := 0
	for settled < 2 {
		ok, why := blocked()
		if ok {
			settled++
		} else {
			settled = 0
		}
		if time.Now().After(deadline) {
			t.Fatalf("target %d did not block: %s", pid, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fhThread is one thread of a faulthandler traceback.
type fhThread struct {
	ident     uint64
	name      string // the thread's name, which faulthandler prints from 3.14 on
	current   bool
	frames    []stack.Frame // Func is co_name, escaped as faulthandler does
	truncated bool          // faulthandler printed "..." after 100 frames
}

var (
	fhHeader = regexp.MustCompile(`^(Current thread|Thread) 0x([0-9a-f]+)(?: \[(.*)\])? \(most recent call first\):$`)
	fhFrame  = regexp.MustCompile(`^  File "(.*)", line (\d+|\?\?\?) in (.*)$`)
)

// parseFaulthandler parses faulthandler.dump_traceback(all_threads=True).
func parseFaulthandler(s string) ([]fhThread, error) {
	var out []fhThread
	for _, line := range strings.Split(s, "\n") {
		if m := fhHeader.FindStringSubmatch(line); m != nil {
			id, err := strconv.ParseUint(m[2], 16, 64)
			if err != nil {
				return nil, err
			}
			out = append(out, fhThread{ident: id, name: m[3], current: m[1] == "Current thread"})
			continue
		}
		if len(out) == 0 || strings.TrimSpace(line) == "" {
			continue
		}
		cur := &out[len(out)-1]
		if strings.TrimSpace(line) == "..." {
			cur.truncated = true
			continue
		}
		m := fhFrame.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("unexpected faulthandler line %q", line)
		}
		n, _ := strconv.Atoi(m[2])
		cur.frames = append(cur.frames, stack.Frame{Func: m[3], File: m[1], Line: n})
	}
	for i := range out {
		// faulthandler stops at MAX_FRAME_DEPTH (100) frames; 3.13.0 then
		// omits its "..." line.
		if len(out[i].frames) == 100 {
			out[i].truncated = true
		}
	}
	return out, nil
}

// faultEscape spells s the way faulthandler's _Py_DumpASCII does.
func faultEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80 && r >= 0x20 || r == '\t' || r == '\n':
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	return b.String()
}

// coName is the co_name a qualified name ends in: "A.b.<locals>.c" -> "c".
func coName(qualname string) string { return qualname[strings.LastIndexByte(qualname, '.')+1:] }

func frameString(f stack.Frame) string { return fmt.Sprintf("%s:%d %s", f.File, f.Line, f.Func) }

func requireRoot(t testing.TB) {
	t.Helper()
	privileged.Root(t)
}

package python

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// TestMatchesFaulthandler compares every thread's Python stack with the
// one CPython's faulthandler printed for the same blocked state, on every
// installed interpreter.
func TestMatchesFaulthandler(t *testing.T) {
	privileged.Root(t)
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		cmd, st := startTarget(t, py)
		want, err := parseFaulthandler(st.Traceback)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Open(cmd.Process.Pid)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if v := pythonVersion(t, py); r.Version() != v {
			t.Errorf("Version() = %q, want %q", r.Version(), v)
		}
		got, err := r.Threads()
		if err != nil {
			t.Fatalf("Threads: %v", err)
		}
		byIdent := map[uint64]Thread{}
		holders := 0
		for _, th := range got {
			byIdent[th.Ident] = th
			if th.Error != "" {
				t.Errorf("thread %d: %s", th.TID, th.Error)
			}
			if th.GIL {
				holders++
			}
		}
		if holders > 1 {
			t.Errorf("%d threads hold the GIL", holders)
		}
		if len(got) != len(want) {
			t.Errorf("%d threads, faulthandler has %d", len(got), len(want))
		}
		for _, w := range want {
			th, ok := byIdent[w.ident]
			if !ok {
				t.Errorf("thread %#x missing", w.ident)
				continue
			}
			if native := st.IDs[strconv.FormatUint(w.ident, 10)]; th.TID != native {
				t.Errorf("thread %#x: TID %d, want native id %d", w.ident, th.TID, native)
			}
			if th.Name == "" || w.name != "" && th.Name != w.name {
				t.Errorf("thread %d is named %q, faulthandler %q", th.TID, th.Name, w.name)
			}
			if w.current {
				// The main thread has moved from dump_traceback to its final wait.
				if n := len(th.Frames); n == 0 || th.Frames[n-1].Func != "<module>" || th.TID != st.MainNativeID {
					t.Errorf("main thread %d: frames %v", th.TID, th.Frames)
				}
				continue
			}
			compareFrames(t, th, w)
		}
	})
}

func compareFrames(t *testing.T, th Thread, w fhThread) {
	t.Helper()
	got := th.Frames
	if len(got) < len(w.frames) || (!w.truncated && len(got) != len(w.frames)) {
		t.Errorf("thread %d: %d frames, faulthandler %d (truncated %v)", th.TID, len(got), len(w.frames), w.truncated)
	}
	for i, wf := range w.frames {
		if i >= len(got) {
			break
		}
		g := got[i]
		if faultEscape(coName(g.Func)) != wf.Func || faultEscape(g.File) != wf.File || g.Line != wf.Line || g.Module != "python" {
			t.Errorf("thread %d frame %d: got %s, faulthandler %s", th.TID, i, frameString(g), frameString(wf))
		}
	}
	if w.truncated {
		n := 0
		for _, f := range got {
			if f.Func == "recurse" {
				n++
			}
		}
		if n != 301 {
			t.Errorf("thread %d: %d recurse frames, want 301", th.TID, n)
		}
	}
}

// pythonVersion asks the interpreter for its version.
func pythonVersion(t *testing.T, py interpreter) string {
	out, err := py.command("-c", "import platform; print(platform.python_version())").Output()
	if err != nil {
		t.Fatalf("%s: %v", py.path, err)
	}
	return strings.TrimSpace(string(out))
}

// TestLaterRelease runs Debian sid's interpreters claiming, in their
// _Py_DebugOffsets, a release after 3.15: 3.15's table is read as the
// newest it knows, frames and all; 3.14's, which 3.15's sections do not
// fit, is an interpreter not read, with the line a dump carries.
func TestLaterRelease(t *testing.T) {
	privileged.Root(t)
	for _, tc := range []struct {
		minor, want string
	}{
		{"3.15", ""},
		{"3.14", "Python 3.16.0a1: frames not read: unknown layout"},
	} {
		t.Run(tc.minor, func(t *testing.T) {
			s := testutil.Sid(tc.minor)
			if err := s.Installed(); err != nil {
				t.Skip(err)
			}
			py := interpreter{"sid-" + tc.minor + "-as-3.16", s.WithDebugVersion(t, t.TempDir(), "python3.16", 0x031000a1), &s}
			cmd, st := startTarget(t, py)
			r, err := Open(cmd.Process.Pid)
			if tc.want != "" {
				var unread *UnreadError
				if !errors.As(err, &unread) || err.Error() != tc.want || !errors.Is(err, ErrUnsupported) {
					t.Fatalf("Open: %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if r.Version() != "3.16.0a1" {
				t.Errorf("Version() = %q", r.Version())
			}
			want, err := parseFaulthandler(st.Traceback)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Threads()
			if err != nil {
				t.Fatal(err)
			}
			byIdent := map[uint64]Thread{}
			for _, th := range got {
				byIdent[th.Ident] = th
			}
			for _, w := range want {
				if th, ok := byIdent[w.ident]; !ok {
					t.Errorf("thread %#x missing", w.ident)
				} else if !w.current {
					compareFrames(t, th, w)
				}
			}
		})
	}
}

// TestEarlierRelease: an interpreter before 3.9 is found and reported, not
// taken for a process without Python.
func TestEarlierRelease(t *testing.T) {
	privileged.Root(t)
	for _, tc := range []struct{ path, want string }{
		{"/root/.pyenv/versions/3.8.18/bin/python3.8", "Python 3.8.18: frames not read: unknown layout"},
		{"/root/.pyenv/versions/3.7.16/bin/python3.7", "Python 3.7.16: frames not read: unknown layout"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			if _, err := os.Stat(tc.path); err != nil {
				t.Skipf("%s not installed: %v", tc.path, err)
			}
			cmd := exec.Command(tc.path, "-c", "import sys; print('ready', flush=True); sys.stdin.read()")
			stdin, stdout := testutil.Start(t, cmd)
			defer func() { stdin.Close(); cmd.Wait() }()
			if _, err := stdout.Read(make([]byte, 6)); err != nil {
				t.Fatal(err)
			}
			_, err := Open(cmd.Process.Pid)
			var unread *UnreadError
			if !errors.As(err, &unread) || err.Error() != tc.want {
				t.Errorf("Open: %v, want %q", err, tc.want)
			}
		})
	}
}

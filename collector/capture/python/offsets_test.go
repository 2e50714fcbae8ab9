package python

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// headerDirs are the include directories of each interpreter under test.
var headerDirs = map[string]string{
	"3.9.18":      "/root/.pyenv/versions/3.9.18/include/python3.9",
	"3.10.13":     "/root/.pyenv/versions/3.10.13/include/python3.10",
	"3.11.7":      "/root/.pyenv/versions/3.11.7/include/python3.11",
	"3.12.1":      "/root/.pyenv/versions/3.12.1/include/python3.12",
	"3.13.0":      "/root/.pyenv/versions/3.13.0/include/python3.13",
	"debian-3.11": "/usr/include/python3.11",
}

// headerOffsets compiles testdata/offsets.c against one version's headers
// and returns what it prints.
func headerOffsets(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "internal", "pycore_runtime.h")); err != nil {
		t.Skipf("no internal headers in %s: %v", dir, err)
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no C compiler: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "offsets")
	if out, err := exec.Command(cc, "-o", bin, "-I", dir, "testdata/offsets.c").CombinedOutput(); err != nil {
		t.Fatalf("compile offsets.c against %s: %v\n%s", dir, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run offsets: %v", err)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, v, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("offsets output %q: %v", line, err)
		}
		m[name] = n
	}
	return m
}

// TestOffsetsMatchHeaders checks the hard-coded tables of 3.9 to 3.12
// against offsetof() in each version's own headers, and the layout read
// from a live 3.13 process's _Py_DebugOffsets against its headers.
func TestOffsetsMatchHeaders(t *testing.T) {
	for _, py := range interpreters {
		t.Run(py.name, func(t *testing.T) {
			if _, err := os.Stat(py.path); err != nil {
				t.Skipf("%s not installed: %v", py.path, err)
			}
			dir, ok := headerDirs[py.name]
			if !ok {
				// Debian sid's: their headers (libpython3.x-dev) are not
				// fetched; TestParseDebugOffsets and TestMatchesFaulthandler
				// check what is read of their tables.
				t.Skipf("no headers of %s", py.name)
			}
			want := headerOffsets(t, dir)
			minor, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(py.name, "debian-"), ".")[1])
			var l layout
			if minor >= 13 {
				l = liveLayout(t, py)
			} else {
				l = layouts[minor]
			}
			if got := l.fields(); !reflect.DeepEqual(got, want) {
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s: table %d, headers %d", k, got[k], v)
					}
				}
				for k := range got {
					if _, ok := want[k]; !ok {
						t.Errorf("%s: in table, not printed by offsets.c", k)
					}
				}
			}
		})
	}
}

// liveLayout opens a running interpreter and returns the layout decoded
// from its _Py_DebugOffsets.
func liveLayout(t *testing.T, py interpreter) layout {
	t.Helper()
	requireRoot(t)
	cmd := py.command("-c", "import sys; sys.stdout.write('x\\n'); sys.stdout.flush(); sys.stdin.read()")
	stdin, stdout := testutil.Start(t, cmd)
	defer func() { stdin.Close(); cmd.Wait() }()
	if _, err := stdout.Read(make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	r, err := Open(cmd.Process.Pid)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r.l
}

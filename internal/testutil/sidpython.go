package testutil

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// SidPython is one of Debian sid's interpreters that scripts/sid-python.sh
// unpacks into a private prefix: they run with the prefix's own loader
// and libraries.
type SidPython struct {
	Prefix string // XPU_TIMER_SID_PYTHON, or the user cache's xpu-timer/sid-python
	Path   string // PREFIX/usr/bin/python3.MINOR
	Loader string // PREFIX's ld-linux-x86-64.so.2
}

// Sid names sid's python3.MINOR ("3.14") in the prefix; Installed tells
// whether it is there.
func Sid(minor string) SidPython {
	p := os.Getenv("XPU_TIMER_SID_PYTHON")
	if p == "" {
		dir, _ := os.UserCacheDir()
		p = filepath.Join(dir, "xpu-timer", "sid-python")
	}
	return SidPython{Prefix: p, Path: filepath.Join(p, "usr/bin/python"+minor),
		Loader: filepath.Join(p, "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")}
}

// Installed reports whether the interpreter and its loader are there.
func (s SidPython) Installed() error {
	for _, f := range []string{s.Path, s.Loader} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%w (scripts/sid-python.sh fetches it)", err)
		}
	}
	return nil
}

// Command runs exe (the interpreter, or a copy of it elsewhere) with args
// through the prefix's loader, the prefix's standard library its home.
func (s SidPython) Command(exe string, args ...string) *exec.Cmd {
	cmd := exec.Command(s.Loader, append([]string{"--library-path", filepath.Dir(s.Loader), exe}, args...)...)
	if exe != s.Path {
		cmd.Env = append(os.Environ(), "PYTHONHOME="+filepath.Join(s.Prefix, "usr"))
	}
	return cmd
}

// WithDebugVersion copies the interpreter to dir/python3.X (name) with
// the version word of its _Py_DebugOffsets (the first word after the
// "xdebugpy" cookie at the start of _PyRuntime) set to hex: an
// interpreter that claims another release to a remote reader, and runs
// as before. It returns the copy's path.
func (s SidPython) WithDebugVersion(t testing.TB, dir, name string, hex uint64) string {
	t.Helper()
	b, err := os.ReadFile(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	off := int64(-1)
	for _, sym := range syms {
		if sym.Name != "_PyRuntime" {
			continue
		}
		for _, sec := range f.Sections {
			if sec.Type != elf.SHT_NOBITS && sym.Value >= sec.Addr && sym.Value+16 <= sec.Addr+sec.Size {
				off = int64(sec.Offset + sym.Value - sec.Addr)
			}
		}
	}
	if off < 0 || string(b[off:off+8]) != "xdebugpy" {
		t.Fatalf("%s: no _Py_DebugOffsets at the start of _PyRuntime", s.Path)
	}
	binary.LittleEndian.PutUint64(b[off+8:], hex)
	out := filepath.Join(dir, name)
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

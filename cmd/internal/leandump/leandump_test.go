//go:build linux && cgo

package leandump

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/version"
)

// build builds the named commands into dir, as make builds them.
func build(t *testing.T, dir string, cmds ...string) {
	t.Helper()
	args := []string{"build", "-tags", version.BuildTags, "-o", dir}
	for _, c := range cmds {
		args = append(args, "../../"+c)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
}

// run runs a command and returns its output and exit status.
func run(t *testing.T, path string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(path, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("%s %q: %v", path, args, err)
	return "", 0
}

// `xpu-timer dump ARGS` executes the xpu-timer-dump beside it with the
// same arguments, every one kept as it was; other commands do not.
func TestDumpRunsLean(t *testing.T) {
	dir := t.TempDir()
	build(t, dir, "xpu-timer")
	// A stand-in that says what it was given, one argument a line.
	fake := "#!/bin/sh\necho lean\nfor a in \"$@\"; do echo \"[$a]\"; done\n"
	if err := os.WriteFile(filepath.Join(dir, "xpu-timer-dump"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	// Through a symbolic link, as a PATH entry may hold it: the binary's
	// own directory counts.
	link := filepath.Join(t.TempDir(), "xpu-timer")
	if err := os.Symlink(filepath.Join(dir, "xpu-timer"), link); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, link, "dump", "--pid", "1", "", "a b", "--json")
	if want := "lean\n[dump]\n[--pid]\n[1]\n[]\n[a b]\n[--json]\n"; out != want || code != 0 {
		t.Errorf("xpu-timer dump: %q (status %d), want %q", out, code, want)
	}
	for _, args := range [][]string{{"--version"}, {"watch", "--help"}, {"--help", "dump"}} {
		if out, _ := run(t, link, args...); strings.Contains(out, "lean") {
			t.Errorf("xpu-timer %q ran xpu-timer-dump: %q", args, out)
		}
	}
}

// With the real xpu-timer-dump beside it, `xpu-timer dump` says what the
// full binary says alone: the same help, messages and exit statuses.
func TestDumpSameAlone(t *testing.T) {
	both, alone := t.TempDir(), t.TempDir()
	build(t, both, "xpu-timer", "xpu-timer-dump")
	build(t, alone, "xpu-timer")
	for _, args := range [][]string{
		{"dump", "--help"},
		{"dump", "--pid", "999999999"},
		{"dump", "--pid", "999999999", "--json"},
		{"dump", "--bogus"},
		{"dump", "extra"},
		{"dump"},
	} {
		got, gotCode := run(t, filepath.Join(both, "xpu-timer"), args...)
		want, wantCode := run(t, filepath.Join(alone, "xpu-timer"), args...)
		if got != want || gotCode != wantCode {
			t.Errorf("xpu-timer %q: %q (status %d) beside xpu-timer-dump, %q (status %d) alone", args, got, gotCode, want, wantCode)
		}
	}
}

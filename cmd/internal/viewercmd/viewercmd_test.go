package viewercmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := New()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errb.String(), err
}

func TestViewer(t *testing.T) {
	fixture := filepath.Join("..", "..", "..", "viewer", "testdata", "faults", "nccl-stall")
	for _, weight := range []string{"stacks", "ranks"} {
		out := t.TempDir()
		stdout, stderr, err := run(t, "--path", fixture, "--out", out, "--weight", weight, "--width", "900")
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		if !strings.Contains(stdout, "Likely culprit: rank 4") {
			t.Errorf("stdout:\n%s", stdout)
		}
		summary, err := os.ReadFile(filepath.Join(out, "summary.txt"))
		if err != nil || string(summary) != stdout {
			t.Errorf("summary.txt differs from what was printed (%v)", err)
		}
		for _, name := range []string{"cpp_stack", "py_stack", "cpp_stack.svg", "py_stack.svg", "mixed_stack.svg", "stacks.pb.gz"} {
			if _, err := os.Stat(filepath.Join(out, name)); err != nil {
				t.Error(err)
			}
		}
		svg, _ := os.ReadFile(filepath.Join(out, "cpp_stack.svg"))
		if !bytes.Contains(svg, []byte(`width="900"`)) || !bytes.Contains(svg, []byte(`data-unit="`+weight+`"`)) {
			t.Errorf("--width/--weight not applied")
		}
	}
}

func TestSkipsBadFiles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "..", "..", "viewer", "testdata", "faults", "kernel-hang", "00000-00008.stacktrace")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "00000-00008.stacktrace"), data, 0o644)
	os.WriteFile(filepath.Join(dir, "00001-00008.stacktrace"), data[:100], 0o644)
	stdout, stderr, err := run(t, "--path", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "00001-00008.stacktrace") || !strings.Contains(stderr, "truncated") {
		t.Errorf("stderr does not name the truncated file:\n%s", stderr)
	}
	if !strings.Contains(stdout, "missing ranks 1-7") {
		t.Errorf("stdout:\n%s", stdout)
	}
}

func TestErrors(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no readable *.stacktrace files in ./"}, // xpu_timer's default path
		{[]string{"-p", empty}, "no readable *.stacktrace files in " + empty},
		{[]string{"-p", empty, "--incarnation", "3"}, "no readable"},
		{[]string{"--path", empty}, "no stack files"},
		{[]string{"--path", empty, "--weight", "bytes"}, "--weight"},
		{[]string{"--path", empty, "--width", "10"}, "--width"},
		{[]string{"--path", empty, "extra"}, "unknown command"},
	} {
		_, _, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("args %q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

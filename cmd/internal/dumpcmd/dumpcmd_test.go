package dumpcmd

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/viewer"
)

func runCmd(args ...string) (string, error) {
	cmd := New()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// sleeper starts sleep(1) with env added to this process's environment.
func sleeper(t *testing.T, env ...string) int {
	cmd := exec.Command("sleep", "1000")
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; i < 2000; i++ {
		if st, err := procfs.ReadStat(cmd.Process.Pid); err == nil && st.State == 'S' {
			if exe, _ := procfs.Cmdline(cmd.Process.Pid); len(exe) > 0 && exe[0] == "sleep" {
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
	return cmd.Process.Pid
}

func TestDumpText(t *testing.T) {
	privileged.Root(t)
	pid := sleeper(t)
	out, err := runCmd("--pid", strconv.Itoa(pid))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"Process " + strconv.Itoa(pid), "Thread " + strconv.Itoa(pid), "clock_nanosleep", "main ("} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDumpJSON(t *testing.T) {
	privileged.Root(t)
	pid := sleeper(t, "RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=0", "ELASTIC_JOB_NAME=llama")
	out, err := runCmd("--pid", strconv.Itoa(pid), "--json", "--native")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The dump file's schema, as the agent writes it.
	p, err := dumpfile.Parse([]byte(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if p.Schema != dumpfile.Schema || p.Reason != dumpfile.ReasonManual || p.Rank != 2 || p.WorldSize != 4 || p.LocalRank != 0 ||
		p.JobName != "llama" || p.Host == "" || p.DumpedAt.IsZero() || !strings.Contains(out, `"stopped_for_ns"`) {
		t.Errorf("identity or reason wrong: %+v", p)
	}
	if p.PID != pid || len(p.Threads) != 1 || p.Threads[0].TID != pid || len(p.Threads[0].Native) < 2 {
		t.Fatalf("unexpected dump: %s", out)
	}
	f := p.Threads[0].Native[0]
	if !strings.Contains(f.Func, "nanosleep") || f.Addr == 0 || !strings.Contains(f.Module, "libc") {
		t.Errorf("innermost frame %+v", f)
	}
	if !strings.Contains(out, `"native"`) || !strings.Contains(out, `"func"`) {
		t.Errorf("JSON lacks the frame fields:\n%s", out)
	}
}

// TestDumpLines: native frames are named from the symbol tables, without
// source lines, unless --lines asks for the debug information (libc6-dbg's
// for sleep's libc frames, and its inlined calls); the --json and --out
// files follow the flag.
func TestDumpLines(t *testing.T) {
	privileged.Root(t)
	pid := sleeper(t)
	for _, lines := range []bool{false, true} {
		dir := t.TempDir()
		args := []string{"--pid", strconv.Itoa(pid), "--json", "--native", "--out", dir}
		if lines {
			args = append(args, "--lines")
		}
		out, err := runCmd(args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		p, err := dumpfile.Parse([]byte(out[strings.IndexByte(out, '{'):]))
		if err != nil || len(p.Threads) != 1 {
			t.Fatalf("%v\n%s", err, out)
		}
		withLine := 0
		for _, f := range p.Threads[0].Native {
			if f.File != "" || f.Line != 0 {
				withLine++
			}
		}
		if lines != (withLine > 0) {
			t.Errorf("--lines %v: %d of %d native frames with a source line:\n%s", lines, withLine, len(p.Threads[0].Native), out)
		}
		written, err := dumpfile.Read(filepath.Join(dir, "00000-00001.stacktrace"))
		if err != nil || !slices.EqualFunc(written.Threads[0].Native, p.Threads[0].Native, func(a, b stack.Frame) bool { return a.File == b.File && a.Line == b.Line }) {
			t.Errorf("--lines %v: the --out file's frames differ from the printed ones: %v", lines, err)
		}
	}
}

// TestDumpPythonJSON dumps a Python process's Python stacks as JSON.
func TestDumpPythonJSON(t *testing.T) {
	privileged.Root(t)
	pid := testutil.StartPython(t, "import os, time\ndef inner():\n    print('ready', flush=True)\n    time.sleep(1000)\ninner()\n")
	out, err := runCmd("--pid", strconv.Itoa(pid), "--json", "--python")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p, err := dumpfile.Parse([]byte(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if p.Python == "" || len(p.Threads) != 1 || len(p.Threads[0].Native) > 0 || len(p.Threads[0].Python) != 2 ||
		p.Threads[0].Python[0].Func != "inner" || !strings.Contains(out, `"<module>"`) {
		t.Errorf("unexpected dump:\n%s", out)
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		msg  string
	}{
		{fmt.Errorf("capture 7: %w", dump.ErrNoProcess), exitcode.NoProcess, "process 7 does not exist"},
		{fmt.Errorf("capture 7: %w", dump.ErrNotPermitted), exitcode.NotPermitted, "not permitted to trace process 7"},
		{fmt.Errorf("capture 7: %w", dump.ErrExited), exitcode.NoProcess, "process 7 exited during the dump"},
		{errors.New("read maps: boom"), exitcode.Failure, "read maps: boom"},
	} {
		e := exitError(7, tc.err)
		if exitcode.Of(e) != tc.code || !strings.HasPrefix(e.Error(), tc.msg) {
			t.Errorf("%v: exit %d %q, want %d %q", tc.err, exitcode.Of(e), e.Error(), tc.code, tc.msg)
		}
	}
}

func TestDumpErrors(t *testing.T) {
	// A pid that does not exist: pid_max is at most 4194304.
	out, err := runCmd("--pid", "4194999")
	if exitcode.Of(err) != exitcode.NoProcess || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing pid: %v\n%s", err, out)
	}
	if _, err := runCmd(); err == nil {
		t.Error("no --pid: no error")
	}
}

// A manual dump written with --out is named and shaped like the agent's,
// so the viewer merges it; a process without RANK is rank 0 of 1.
func TestDumpOutMergesInViewer(t *testing.T) {
	privileged.Root(t)
	dir := t.TempDir()
	pid := sleeper(t, "RANK=1", "WORLD_SIZE=2")
	if out, err := runCmd("--pid", strconv.Itoa(pid), "--out", dir); err != nil || !strings.Contains(out, "Thread "+strconv.Itoa(pid)) {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, name := range []string{"00001-00002.stacktrace", "00001-00002.txt"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := dumpfile.Read(filepath.Join(dir, "00001-00002.stacktrace"))
	if err != nil || f.Reason != dumpfile.ReasonManual || f.PID != pid {
		t.Fatalf("%v %+v", err, f)
	}
	_, res, err := viewer.Merge(viewer.Options{Dir: dir, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 1 || res.World != 2 || len(res.Skipped) != 0 || !slices.Equal(res.Missing, []int{0}) {
		t.Errorf("viewer: %d files, world %d, missing %v, skipped %v", res.Files, res.World, res.Missing, res.Skipped)
	}

	lone := t.TempDir()
	pid = sleeper(t, "RANK=")
	if out, err := runCmd("--pid", strconv.Itoa(pid), "--out", lone, "--json"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, err := dumpfile.Read(filepath.Join(lone, "00000-00001.stacktrace")); err != nil {
		t.Fatal(err)
	}
}

// TestOneShot checks the collector settings of a dump: off and bounded
// while it runs, unless GOGC or GOMEMLIMIT are set, and put back after.
func TestOneShot(t *testing.T) {
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	defer func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) }()
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	os.Unsetenv("GOGC")
	os.Unsetenv("GOMEMLIMIT")

	restore := oneShot()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("during a dump GOGC is %d, want off", got)
	}
	if got := debug.SetMemoryLimit(-1); got != oneShotLimit {
		t.Errorf("during a dump the memory limit is %d, want %d", got, oneShotLimit)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("after a dump GOGC is %d, want 100 back", got)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("after a dump the memory limit is %d, want none back", got)
	}

	os.Setenv("GOGC", "100")
	os.Setenv("GOMEMLIMIT", "1GiB")
	restore = oneShot()
	gotGC, gotLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	restore()
	if gotGC != 100 || gotLimit != math.MaxInt64 {
		t.Errorf("with GOGC and GOMEMLIMIT set, a dump ran with GOGC %d and limit %d, want both as they were", gotGC, gotLimit)
	}
}

// TestDumpOutThroughTimeline: --out writes as the agent does (timeline):
// a dump of another incarnation under the same rank name is moved aside
// into incarnations/, not overwritten.
func TestDumpOutThroughTimeline(t *testing.T) {
	privileged.Root(t)
	pid := sleeper(t)
	dir := t.TempDir()
	old := &dumpfile.File{Schema: dumpfile.Schema, Rank: 0, WorldSize: 1, PID: 1, Job: "old", Incarnation: 3, Reason: dumpfile.ReasonHang}
	if _, err := dumpfile.Write(dir, old); err != nil {
		t.Fatal(err)
	}
	out, err := runCmd("--pid", strconv.Itoa(pid), "--native", "--out", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "moved the dump of rank 0 of job \"old\" incarnation 3 aside") {
		t.Errorf("output does not tell of the move:\n%s", out)
	}
	moved, err := filepath.Glob(filepath.Join(dir, timeline.IncarnationsDir, "*", "00000-00001.stacktrace"))
	if err != nil || len(moved) != 1 {
		t.Fatalf("moved aside: %v %v", moved, err)
	}
	if f, err := dumpfile.Read(moved[0]); err != nil || f.Job != "old" || f.Incarnation != 3 {
		t.Errorf("moved file %s: %+v %v", moved[0], f, err)
	}
	if f, err := dumpfile.Read(filepath.Join(dir, "00000-00001.stacktrace")); err != nil || f.PID != pid || f.Reason != dumpfile.ReasonManual {
		t.Errorf("written file: %+v %v", f, err)
	}
}

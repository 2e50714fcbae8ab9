package dumpcmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/collector/dump"
	"github.com/xpu-timer/xpu-timer/collector/procfs"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
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

func sleeper(t *testing.T) int {
	cmd := exec.Command("sleep", "1000")
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
	pid := sleeper(t)
	out, err := runCmd("--pid", strconv.Itoa(pid), "--json", "--native")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var p dump.Process
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v\n%s", err, out)
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

// TestDumpPythonJSON dumps a Python process's Python stacks as JSON.
func TestDumpPythonJSON(t *testing.T) {
	privileged.Root(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("no python3: %v", err)
	}
	cmd := exec.Command(py, "-c", "import os, time\ndef inner():\n    print('ready', flush=True)\n    time.sleep(1000)\ninner()\n")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	out, err := runCmd("--pid", strconv.Itoa(cmd.Process.Pid), "--json", "--python")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var p dump.Process
	if err := json.Unmarshal([]byte(out), &p); err != nil {
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

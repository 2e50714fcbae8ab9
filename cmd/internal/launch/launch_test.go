package launch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/version"
)

// bin is xpu_timer_launch built for this test binary, in a directory any
// user may read (the unprivileged test runs it as nobody).
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "xpu-launch-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	bin = filepath.Join(dir, "xpu_timer_launch")
	out, err := exec.Command("go", "build", "-tags", version.BuildTags, "-o", bin, "github.com/xpu-timer/xpu-timer/cmd/xpu_timer_launch").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build xpu_timer_launch: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// launcher returns an xpu_timer_launch command that serves metrics on a free
// port and writes dumps under a temporary directory.
func launcher(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--port", "0", "--timeline-path", t.TempDir()}, args...)...)
	cmd.Env = append(os.Environ(), "XPU_TIMER_LOGGING_DIR="+t.TempDir())
	return cmd
}

func status(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("run: %v", err)
	}
	return ee.ExitCode()
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"kill -TERM $$", 128 + 15},
		{"kill -KILL $$", 128 + 9},
	} {
		t.Run(tc.script, func(t *testing.T) {
			err := launcher(t, "sh", "-c", tc.script).Run()
			if got := status(t, err); got != tc.want {
				t.Fatalf("status %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMissingCommand(t *testing.T) {
	var stderr bytes.Buffer
	cmd := launcher(t, "/nonexistent/train")
	cmd.Stderr = &stderr
	if got := status(t, cmd.Run()); got != 127 {
		t.Fatalf("status %d, want 127; stderr %s", got, stderr.String())
	}
	if !strings.Contains(stderr.String(), "/nonexistent/train") {
		t.Fatalf("stderr %q does not name the command", stderr.String())
	}
	cmd = exec.Command(bin)
	if got := status(t, cmd.Run()); got != 2 {
		t.Fatalf("no command: status %d, want 2", got)
	}
}

// The command's own flags pass through: flags end at the first argument.
func TestFlagsPassThrough(t *testing.T) {
	out, err := launcher(t, "sh", "-c", `echo "$@"`, "sh", "--port", "5", "-v", "--hang-timeout=1").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "--port 5 -v --hang-timeout=1" {
		t.Fatalf("command saw %q", got)
	}
}

func TestStreamsUntouched(t *testing.T) {
	cmd := launcher(t, "sh", "-c", "cat; echo err >&2")
	cmd.Stdin = strings.NewReader("hello from stdin\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "hello from stdin\n" {
		t.Fatalf("stdout %q", stdout.String())
	}
	if !strings.Contains(stderr.String(), "err\n") {
		t.Fatalf("stderr %q", stderr.String())
	}
}

// Each forwarded signal reaches a shell that traps it, and the launcher
// exits with the status the shell chose.
func TestSignalForwarding(t *testing.T) {
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			name := strings.TrimPrefix(map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGINT: "INT", syscall.SIGHUP: "HUP"}[sig], "")
			want := 40 + i
			script := fmt.Sprintf(`trap 'echo got %s; exit %d' %s; echo ready; while :; do sleep 0.05; done`, name, want, name)
			cmd := launcher(t, "sh", "-c", script)
			// A process group of its own: a terminal's signal would reach
			// the child directly; here only forwarding can.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			r := bufio.NewReader(stdout)
			line, err := r.ReadString('\n')
			if err != nil || line != "ready\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
			cmd.Process.Signal(sig)
			rest, _ := io.ReadAll(r)
			if got := status(t, cmd.Wait()); got != want {
				t.Fatalf("status %d, want %d", got, want)
			}
			if !strings.Contains(string(rest), "got "+name) {
				t.Fatalf("child output %q", rest)
			}
		})
	}
}

// Run as nobody, the launcher cannot load eBPF: it says so once, with how
// to grant it, and the job runs with its exit status intact.
func TestUnprivilegedRunsJob(t *testing.T) {
	privileged.Root(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) not found: %v", err)
	}
	dir, err := os.MkdirTemp("", "xpu-unpriv")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		bin, "--port", "0", "--timeline-path", filepath.Join(dir, "timeline"),
		"sh", "-c", "echo job ran; exit 3")
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("launcher did not finish")
	}
	if got := status(t, err); got != 3 {
		t.Fatalf("status %d, want 3; stderr %s", got, stderr.String())
	}
	if stdout.String() != "job ran\n" {
		t.Fatalf("stdout %q", stdout.String())
	}
	if n := strings.Count(stderr.String(), "hang detection is OFF"); n != 1 {
		t.Fatalf("notice printed %d times, want once:\n%s", n, stderr.String())
	}
	for _, want := range []string{"not permitted", "CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "root"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("notice lacks %q:\n%s", want, stderr.String())
		}
	}
}

// A bad XPU_TIMER_* value from the environment never stops the job: one
// notice names it and the default taken, and the job's status passes
// through (issue 16). A bad flag, typed by the user, is a usage error.
func TestBadSettingRunsJob(t *testing.T) {
	for _, tc := range []struct{ env, value string }{
		{"XPU_TIMER_HANG_TIMEOUT", "abc"},
		{"XPU_TIMER_HANG_TIMEOUT", "-5"},
		{"XPU_TIMER_HANG_TIMEOUT", "0"},
		{"XPU_TIMER_HANG_TIMEOUT", "-1s"},
		{"XPU_TIMER_HANG_TIMEOUT", "99999999999999999999"},
		{"XPU_TIMER_HANG_TIMEOUT", "0.001"},
		{"XPU_TIMER_HANG_KILL", "maybe"},
		{"XPU_TIMER_BASEPORT", "70000"},
		{"XPU_TIMER_CONFIG", "/nonexistent/xpu.conf"},
		{"XPU_TIMER_LOGGING_DIR", "/proc/xpu-timer-cannot-log-here"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			cmd := exec.Command(bin, "--port", "0", "--timeline-path", t.TempDir(), "sh", "-c", "echo job ran; exit 3")
			cmd.Env = append(os.Environ(), "XPU_TIMER_LOGGING_DIR="+t.TempDir(), tc.env+"="+tc.value)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if got := status(t, cmd.Run()); got != 3 {
				t.Fatalf("status %d, want the job's 3; stderr %s", got, stderr.String())
			}
			if stdout.String() != "job ran\n" {
				t.Fatalf("stdout %q", stdout.String())
			}
			notices := 0
			for _, line := range strings.Split(stderr.String(), "\n") {
				if strings.Contains(line, "ignoring") {
					notices++
					if !strings.Contains(line, tc.env) || !strings.Contains(line, "instead") {
						t.Errorf("notice %q does not name %s and what it took instead", line, tc.env)
					}
				}
			}
			if notices != 1 {
				t.Errorf("%d notices, want 1:\n%s", notices, stderr.String())
			}
		})
	}
	var stderr bytes.Buffer
	cmd := launcher(t, "--hang-timeout", "abc", "sh", "-c", "exit 0")
	cmd.Stderr = &stderr
	if got := status(t, cmd.Run()); got != 2 {
		t.Fatalf("--hang-timeout abc: status %d, want 2; stderr %s", got, stderr.String())
	}
}

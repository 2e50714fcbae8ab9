package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/version"
)

// The commands under test, built once for the whole package.
var bins struct {
	dir    string
	launch string // xpu_timer_launch
	xpu    string // xpu-timer
	viewer string // xpu_timer_stacktrace_viewer
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "xpu-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	bins.launch = filepath.Join(dir, "xpu_timer_launch")
	bins.xpu = filepath.Join(dir, "xpu-timer")
	bins.viewer = filepath.Join(dir, "xpu_timer_stacktrace_viewer")
	const mod = "github.com/xpu-timer/xpu-timer/cmd/"
	build := exec.Command("go", "build", "-tags", version.BuildTags, "-o", dir+"/", mod+"xpu_timer_launch", mod+"xpu-timer", mod+"xpu_timer_stacktrace_viewer")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the commands: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if left := survivors(dir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: processes of the built commands outlived the tests: %v\n", left)
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// survivors lists the processes running a binary from dir.
func survivors(dir string) []int {
	pids, err := procfs.PIDs()
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range pids {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err == nil && strings.HasPrefix(exe, dir+"/") {
			out = append(out, pid)
		}
	}
	return out
}

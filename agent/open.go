package agent

import (
	"errors"
	"os"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/dump"
	"github.com/xpu-timer/xpu-timer/internal/caps"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// ErrNotPermitted reports that loading eBPF programs is not permitted
// (errors.Is also matches the ebpf package's own sentinel).
var ErrNotPermitted = errors.New("eBPF not permitted")

// PtraceAllowed says whether this process may ptrace processes of the same
// user and, as root, others: CAP_SYS_PTRACE in the effective set (or the
// same uid as the target), and Yama not at "no attach" (3). The reason is
// set when it is not.
func PtraceAllowed() (bool, string) {
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) == "3" {
		return false, "kernel.yama.ptrace_scope is 3 (ptrace disabled)"
	}
	if caps.Has(caps.SysPtrace) {
		return true, ""
	}
	return false, "CAP_SYS_PTRACE is missing"
}

// StateOnly is the capture used when ptrace is not permitted: the process
// state only, with the reason in Errors.
func StateOnly(reason string) Capturer {
	return CaptureFunc(func(pid int) (*dump.Process, error) {
		c := &dump.Process{PID: pid, Errors: []string{"stacks not captured: " + reason}}
		if st, err := procfs.ReadStat(pid); err == nil {
			c.State = procfs.StateName(st.State)
		}
		return c, nil
	})
}

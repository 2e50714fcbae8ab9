package agent

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/dump"
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
	if hasCap(19) { // CAP_SYS_PTRACE
		return true, ""
	}
	return false, "CAP_SYS_PTRACE is missing"
}

// hasCap reads the effective capability set of this process.
func hasCap(bit uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && n&(1<<bit) != 0
		}
	}
	return false
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

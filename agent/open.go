package agent

import (
	"errors"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// ErrNotPermitted reports that loading eBPF programs is not permitted
// (errors.Is also matches the ebpf package's own sentinel).
var ErrNotPermitted = errors.New("eBPF not permitted")

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

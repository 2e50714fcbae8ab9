package dump

import (
	"fmt"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// Header is who a dump file is of, as the caller knows it: the process's
// place in its job and the node's labels.
type Header struct {
	Rank, WorldSize, LocalRank, LocalWorldSize int
	Host, IP, JobName, PodName                 string
	Job                                        string
	Incarnation                                int
}

// File returns the dump file of a capture c of pid (c nil, err set, when
// the capture failed): the header h, the command line, the state and the
// stacks. The caller sets the reason, the times and the decision.
func File(pid int, h Header, c *Process, err error) *dumpfile.File {
	f := &dumpfile.File{
		Rank: h.Rank, WorldSize: h.WorldSize, LocalRank: h.LocalRank, LocalWorldSize: h.LocalWorldSize,
		Host: h.Host, IP: h.IP, JobName: h.JobName, PodName: h.PodName, PID: pid,
		Job: h.Job, Incarnation: h.Incarnation,
	}
	f.Cmdline, _ = procfs.Cmdline(pid)
	if c != nil {
		f.State, f.Python, f.Threads, f.StoppedFor = c.State, c.Python, c.Threads, c.StoppedFor
		f.Errors = append(f.Errors, c.Errors...)
	}
	if err != nil {
		f.Errors = append(f.Errors, fmt.Sprintf("capture: %v", err))
	}
	if f.State == "" {
		if st, err := procfs.ReadStat(pid); err == nil {
			f.State = procfs.StateName(st.State)
		} else {
			f.State = "X (gone)"
		}
	}
	if f.Threads == nil {
		f.Threads = []stack.Thread{}
	}
	return f
}

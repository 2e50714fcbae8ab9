package agent

import (
	"fmt"
	"os"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/dump"
	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/stack"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// Labels are a dump's node labels (the metrics' ip, job_name, pod_name).
type Labels struct {
	Host, IP, JobName, PodName string
}

// NewFile returns the dump file of a capture c of pid at id (c nil, err
// set, when the capture failed): identity, labels, command line, state and
// stacks. The caller sets the reason and the decision.
func NewFile(pid int, id Identity, l Labels, c *dump.Process, err error) *dumpfile.File {
	f := &dumpfile.File{
		Rank: id.Rank, WorldSize: id.World, LocalRank: max(id.LocalRank, 0), LocalWorldSize: id.LocalWorld,
		Host: l.Host, IP: l.IP, JobName: l.JobName, PodName: l.PodName, PID: pid,
	}
	if id.LocalRank < 0 {
		f.LocalRank = id.Rank
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

// ManualFile is the dump file of a capture taken on request (xpu-timer
// dump), reason "manual": the identity comes from env, the process's
// environment (a process without RANK is rank 0 of 1, as a single process
// is), the host name from this machine. It is what the agent would write,
// so the viewer merges it with the agent's dumps.
func ManualFile(c *dump.Process, env map[string]string, l Labels) *dumpfile.File {
	id := IdentityOf(env)
	if !id.FromEnv {
		id.Rank = 0
	}
	if id.World <= id.Rank {
		id.World = id.Rank + 1
	}
	if l.Host == "" {
		l.Host, _ = os.Hostname()
	}
	f := NewFile(c.PID, id, l, c, nil)
	f.Schema, f.Reason = dumpfile.Schema, dumpfile.ReasonManual
	f.DumpedAt, f.DumpDuration = time.Now(), c.Took
	return f
}

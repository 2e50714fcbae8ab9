package identity

import (
	"fmt"
	"os"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// Labels are a dump's node labels (the metrics' ip, job_name, pod_name).
type Labels struct {
	Host, IP, JobName, PodName string
}

// File returns the dump file of a capture c of pid at id (c nil, err
// set, when the capture failed): identity, labels, command line, state and
// stacks. The caller sets the reason and the decision.
func File(pid int, id Identity, l Labels, c *dump.Process, err error) *dumpfile.File {
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

// Manual is the dump file of a capture taken on request (xpu-timer
// dump), reason "manual": the identity comes from env, the process's
// environment (a process without RANK is rank 0 of 1, as a single process
// is), the host name from this machine. It is what the agent would write,
// so the viewer merges it with the agent's dumps.
func Manual(c *dump.Process, env map[string]string, l Labels) *dumpfile.File {
	id := Of(env)
	if !id.FromEnv {
		id.Rank = 0
	}
	if id.World <= id.Rank {
		id.World = id.Rank + 1
	}
	if l.Host == "" {
		l.Host, _ = os.Hostname()
	}
	f := File(c.PID, id, l, c, nil)
	f.Schema, f.Reason = dumpfile.Schema, dumpfile.ReasonManual
	f.DumpedAt, f.DumpDuration = time.Now(), c.Took
	return f
}

// The environment variables a label is read from, the first one set (and
// not empty) winning: ours, then the platform's. The launcher's
// configuration (cmd/internal/config) binds the same lists, its flags and
// configuration file coming before them.
var (
	JobNameVars = []string{"XPU_TIMER_JOB_NAME", "ELASTIC_JOB_NAME", "JOB_NAME"}
	PodNameVars = []string{"XPU_TIMER_POD_NAME", "POD_NAME", "HOSTNAME"}
	IPVars      = []string{"XPU_TIMER_IP", "POD_IP"}
)

// LabelsOf reads the labels the launcher would have given a process with
// environment env (no flags, no configuration file); Host is left empty.
func LabelsOf(env map[string]string) Labels {
	first := func(names []string) string {
		for _, n := range names {
			if v := env[n]; v != "" {
				return v
			}
		}
		return ""
	}
	return Labels{IP: first(IPVars), JobName: first(JobNameVars), PodName: first(PodNameVars)}
}

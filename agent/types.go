// Package agent is the node loop shared by xpu_timer_launch, `xpu-timer
// agent` and `xpu-timer watch`: probe events feed one timer.Engine for every
// process on the node; about once a second the engine is checked; when any
// rank hangs, that rank and every other rank of its job on the node are
// dumped (stacks, decision, sequence numbers, flight recorder trace) into
// the timeline directory, a marker tells agents on other nodes to dump
// theirs, and the metrics follow.
//
// Each dump records its job and incarnation. The incarnation is
// TORCHELASTIC_RESTART_COUNT (else SLURM_RESTART_COUNT) where the
// launcher sets it; elsewhere (mpirun, Slurm before a requeue, a shell loop) the agent counts the restarts it sees, per
// job: when a rank of a job is taken by a new process after the process
// that held it exited (and the new one is not a worker the old one
// forked), the job's count goes up by one, however many of its ranks come
// back. The count starts at 0 when the agent first sees the job, so it
// cannot know of restarts before it attached. When a newer incarnation
// dumps a rank, the earlier incarnation's files for it are moved aside
// (timeline.IncarnationsDir).
//
// The tracer and the stack capture are interfaces so the loop is tested
// without root; *ebpf.Tracer is the real tracer, and collector/capture/dump is
// adapted to Capturer in real.go.
package agent

import (
	"context"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Tracer is what the loop needs of the eBPF tracer.
type Tracer interface {
	Follow(pid int) error
	// Run delivers events (of one process in time order), a batch at a
	// time, and notices until ctx is done or the tracer is closed. A batch
	// is the tracer's again once onEvents returns; onEvents may change it.
	Run(ctx context.Context, onEvents func([]timer.Event), onNotice func(ebpf.Notice)) error
	Stats() ebpf.Stats
	// Probed reports whether pid maps a library whose GPU calls are probed.
	Probed(pid int) bool
	Close() error
}

// Capturer takes the stacks of one process.
type Capturer interface {
	Capture(pid int) (*dump.Process, error)
}

// Warmer is a Capturer that can read ahead what a dump of a process will
// need; the agent asks it once per rank, when the rank makes its first GPU
// call (its libraries are loaded by then), off the hang path.
type Warmer interface {
	Warm(pid int)
}

// CaptureFunc adapts a function to Capturer.
type CaptureFunc func(pid int) (*dump.Process, error)

// Capture calls f.
func (f CaptureFunc) Capture(pid int) (*dump.Process, error) { return f(pid) }

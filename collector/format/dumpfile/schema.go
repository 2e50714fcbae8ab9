package dumpfile

import (
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

// Schema names this format and its version. Readers accept any
// "xpu-timer.stacktrace/1.x" and reject other values.
const Schema = "xpu-timer.stacktrace/1.1"

// File is one rank's dump.
type File struct {
	Schema string `json:"schema"`

	// Identity, from the process environment (torchrun's names).
	Rank           int      `json:"rank"`
	WorldSize      int      `json:"world_size"`
	LocalRank      int      `json:"local_rank"`
	LocalWorldSize int      `json:"local_world_size"`
	Host           string   `json:"host"`
	IP             string   `json:"ip,omitempty"`
	JobName        string   `json:"job_name,omitempty"`
	PodName        string   `json:"pod_name,omitempty"`
	PID            int      `json:"pid"`
	Cmdline        []string `json:"cmdline,omitempty"`

	// Job names the run the rank belongs to (torchrun's TORCHELASTIC_RUN_ID
	// where set), and Incarnation counts its restarts
	// (TORCHELASTIC_RESTART_COUNT, else SLURM_RESTART_COUNT, else the
	// launcher's own count): the ranks of one incarnation of one job are
	// merged together. Files written before 1.1 have neither: the viewer
	// reads them as job "" and incarnation 0.
	Job         string `json:"job,omitempty"`
	Incarnation int    `json:"incarnation,omitempty"`

	// State is the process state as /proc/PID/stat spells it, with its
	// meaning: "S (sleeping)", "D (disk sleep)", "R (running)".
	State string `json:"state"`
	// Python is the CPython version, for a CPython process.
	Python string `json:"python,omitempty"`

	Reason       Reason        `json:"reason"`
	DumpedAt     time.Time     `json:"dumped_at"`
	DumpDuration time.Duration `json:"dump_duration_ns"`
	StoppedFor   time.Duration `json:"stopped_for_ns"` // longest time any thread was stopped

	Hang  *Hang       `json:"hang,omitempty"`  // this rank's own decision, if it hung
	Comms []CommState `json:"comms,omitempty"` // per-communicator sequence numbers at dump time

	Threads []stack.Thread `json:"threads"`
	Errors  []string       `json:"errors,omitempty"` // what could not be captured, and why
	GPU     *GPU           `json:"gpu,omitempty"`

	// Helpers are the processes the rank forked that share its identity
	// (DataLoader, pin-memory and compile workers), with their threads: a
	// worker stuck in I/O is often what the rank waits for. They are no
	// rank of their own and have no file of their own.
	Helpers []Helper `json:"helpers,omitempty"`
}

// Helper is one helper process of a rank, as dumped with it.
type Helper struct {
	PID     int            `json:"pid"`
	Cmdline []string       `json:"cmdline,omitempty"`
	State   string         `json:"state"`
	Threads []stack.Thread `json:"threads"`
	Errors  []string       `json:"errors,omitempty"`
}

// GPU is what NVML says of a device: in a dump, of the rank's device at
// dump time; collector/metrics/gpu reads it and collector/metrics exports it.
type GPU struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid,omitempty"`
	Name        string `json:"name,omitempty"`
	Utilization uint32 `json:"utilization_percent"` // busy percent over NVML's last sample period
	MemoryUsed  uint64 `json:"memory_used_bytes"`
	MemoryTotal uint64 `json:"memory_total_bytes"`
	Xids        []Xid  `json:"xids,omitempty"` // in a dump: the device's recent Xid events
}

// Xid is one Xid error reported by the driver. In a dump it sits in its
// device's GPU, so Device and UUID are not written there.
type Xid struct {
	Device int       `json:"-"`   // device index
	UUID   string    `json:"-"`   // device UUID
	Xid    uint64    `json:"xid"` // Xid code
	Time   time.Time `json:"time"`
}

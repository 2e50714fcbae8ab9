// Package metrics serves xpu-timer's Prometheus metrics and pushes hang
// events to a Pushgateway.
//
// The exporter keeps no state of its own: on every scrape its collector asks
// the source for a Snapshot and turns it into metrics with descriptors built
// once (the node_exporter way). Two sets of families are served: DLRover's
// xpu_timer compatibility families with their historical names, labels and
// units (XPU_TIMER_COMMON_HANG, ...), and our own families following
// Prometheus conventions (xpu_timer_*, base units).
package metrics

import (
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/timer"
)

// NotSet is the label value xpu_timer uses for an unknown ip, job or pod.
const NotSet = "NOT_SET"

// Static holds the labels every series carries; empty values become NotSet.
type Static struct {
	IP, JobName, PodName string
}

// Snapshot is the node's state at one instant, filled by the agent.
type Snapshot struct {
	Ranks []Rank // one per traced training process

	ProbeEvents       uint64  // events read from the probes since start
	LostEvents        uint64  // events the probes dropped since start (ring buffer full)
	Wakeups           uint64  // times the probes woke the reader since start
	Coalesced         uint64  // process records merged into an earlier one of the same process since start (the tracer's queue full)
	AttachedProcesses int     // processes currently followed
	ProbesAttached    int     // uprobes currently attached
	Holds             uint64  // times a process was held at an exec or a load until probed
	HeldSeconds       float64 // how long those holds lasted in all
	Dumps             uint64  // stack dumps written since start
	DumpFailures      uint64  // stack dumps that failed (capture or write) since start

	Xids []dumpfile.Xid // GPU Xid events still inside their reporting window
}

// Detectors, as in Rank.Detectors.
const (
	DetectorGPU    = "gpu"    // eBPF probes on a CUDA/NCCL (MACA/MCCL) library the rank maps
	DetectorStacks = "stacks" // looks at the rank's main thread (the silent-rank rule)
)

// Rank is one training process.
type Rank struct {
	Rank, LocalRank int
	PID             int

	Hung     bool
	HangKind timer.HangKind // timer.HangGPU, HangHost or HangStalled while Hung

	// Detectors that watch the rank now (DetectorGPU, DetectorStacks): a
	// rank without DetectorGPU maps no probed library, and only a stall
	// of its main thread is seen.
	Detectors []string

	DumpStarted bool    // a dump of this rank was started (XPU_TIMER_COMMON_START_DUMP)
	DumpSeconds float64 // how long the last dump of this rank took, 0 if none (XPU_TIMER_COMMON_END_DUMP)

	OldestAgeSeconds float64 // age of the oldest outstanding GPU op, 0 when none
	PendingOps       int     // outstanding GPU ops across all streams

	Kernels     []Kernel
	Collectives []Collective

	// The early warning (lag.go).
	Comms    []Comm    // where the rank stands on its communicators, most recently active first
	Lags     []Lag     // communicators on which its peers on this node wait for it
	Activity *Activity // what it does while it issues no collective; nil while it issues

	GPU *dumpfile.GPU // NVML facts of the rank's device; nil when NVML is unavailable
}

// Durations summarises the completed durations of one kind of operation, in
// seconds.
type Durations struct {
	Count              uint64
	Sum                float64
	Min, Max, Avg, P99 float64
	// Buckets are cumulative histogram buckets (upper bound in seconds ->
	// count of durations <= bound), ascending; nil serves a histogram with
	// only its +Inf bucket.
	Buckets []Bucket
}

// Observe adds one duration (seconds) to d: count, sum, min, max, mean and,
// when d.Buckets is empty, cumulative buckets at DefaultBuckets. P99 is left
// to the caller (it needs the samples or the engine's estimate).
func (d *Durations) Observe(seconds float64) {
	if len(d.Buckets) == 0 {
		d.Buckets = make([]Bucket, len(DefaultBuckets))
		for i, ub := range DefaultBuckets {
			d.Buckets[i].UpperBound = ub
		}
	}
	if d.Count == 0 || seconds < d.Min {
		d.Min = seconds
	}
	if d.Count == 0 || seconds > d.Max {
		d.Max = seconds
	}
	d.Count++
	d.Sum += seconds
	d.Avg = d.Sum / float64(d.Count)
	for i := range d.Buckets {
		if seconds <= d.Buckets[i].UpperBound {
			d.Buckets[i].Count++
		}
	}
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	UpperBound float64 // seconds
	Count      uint64  // durations <= UpperBound
}

// DefaultBuckets are suggested histogram bounds for GPU operation durations:
// 10 µs to about 10 s.
var DefaultBuckets = []float64{1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10}

// Kernel is the timing of one kernel (or kernel class) on one rank.
type Kernel struct {
	Name string // demangled kernel name: label "kernel" of our families

	// Compatibility labels of XPU_TIMER_MM_KERNEL_*: only kernels with a
	// non-empty Operation (xpu_timer uses "Matmul") appear there.
	Operation string
	DType     string // "bf16", "fp16", ...
	Level     string // xpu_timer's throughput bucket

	Durations Durations
	FLOPS     float64 // achieved FLOP/s (compat family serves TFLOPS), 0 if unknown
}

// Collective is the timing of one NCCL operation class on one rank.
type Collective struct {
	Operation string // "AllReduce", "AllGather", ...
	DType     string // "fp16", "bf16", ...

	// Compatibility labels of XPU_TIMER_COLL_KERNEL_*.
	Algorithm string // "RING_LL", ...; empty -> "unknown"
	Transport string // "IntraNode", "InterNode"; empty -> "unknown"
	Level     string
	Small     bool

	Durations    Durations
	BusBandwidth float64 // bytes per second, nccl-tests bus bandwidth convention
}

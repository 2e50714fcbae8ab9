package metrics

import (
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xpu-timer/xpu-timer/timer"
)

// Exporter serves the metrics of the snapshots its source returns.
type Exporter struct {
	reg *prometheus.Registry
	c   *collector
}

// New returns an exporter with its own registry: the node's families, the
// build info, and the Go runtime and process collectors (the exporter's own
// memory, CPU and descriptors). Until SetSource is called it serves an
// empty snapshot.
func New(static Static) *Exporter {
	c := newCollector(static)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c, newBuildInfo(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Exporter{reg: reg, c: c}
}

// SetSource sets the function called on every scrape for the current state.
// It must be safe to call from the HTTP server's goroutines.
func (x *Exporter) SetSource(f func() Snapshot) {
	x.c.mu.Lock()
	x.c.source = f
	x.c.mu.Unlock()
}

// Handler serves the registry in the Prometheus exposition formats.
func (x *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(x.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// SetTopKernels names the n kernels of each rank with the most time in
// xpu_timer_kernel_duration_seconds (label kernel); the others are served
// by class only. 0, the default, names none.
func (x *Exporter) SetTopKernels(n int) {
	x.c.mu.Lock()
	x.c.topKernels = max(n, 0)
	x.c.mu.Unlock()
}

// Gatherer returns the exporter's private registry (for tests and pushing).
func (x *Exporter) Gatherer() prometheus.Gatherer { return x.reg }

// Label names.
var (
	nodeLabels = []string{"ip", "job_name", "pod_name"}
	rankLabels = append(append([]string(nil), nodeLabels...), "rank", "local_rank")
)

func with(base []string, extra ...string) []string {
	return append(append([]string(nil), base...), extra...)
}

// compatDesc builds a DLRover xpu_timer family descriptor.
func compatDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, with(rankLabels, extra...), nil)
}

// collector turns a Snapshot into metrics. Descriptors are built once.
type collector struct {
	static []string // ip, job_name, pod_name values

	mu         sync.Mutex
	source     func() Snapshot
	topKernels int

	// DLRover xpu_timer compatibility families.
	hang, startDump, endDump               *prometheus.Desc
	mmAvg, mmMax, mmP99, mmMin, mmFlops    *prometheus.Desc
	collAvg, collMax, collP99, collMin, bw *prometheus.Desc

	// Our own families.
	rankHung, detectors                        *prometheus.Desc
	oldestAge, pendingOps, dumpDuration        *prometheus.Desc
	kernelDuration, collDuration, busBandwidth *prometheus.Desc
	gpuUtil, gpuMemUsed, gpuMemTotal           *prometheus.Desc
	probeEvents, lostEvents, attached, probes  *prometheus.Desc
	holds, held, wakeups, coalesced            *prometheus.Desc
	dumps, dumpFailures, xid                   *prometheus.Desc
	scrapeDuration                             *prometheus.Desc
	lag                                        lagDescs
}

var mmLabels = []string{"dtype", "level", "operation"}
var collLabels = []string{"algorithm", "dtype", "level", "operation", "small", "transport"}

func newCollector(s Static) *collector {
	orNotSet := func(v string) string {
		if v == "" {
			return NotSet
		}
		return v
	}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &collector{
		static: []string{orNotSet(s.IP), orNotSet(s.JobName), orNotSet(s.PodName)},

		hang:      compatDesc("XPU_TIMER_COMMON_HANG", "xpu_timer compatibility: 1 if the rank is hung, else 0."),
		startDump: compatDesc("XPU_TIMER_COMMON_START_DUMP", "xpu_timer compatibility: 1 once a stack dump of the rank started, else 0."),
		endDump:   compatDesc("XPU_TIMER_COMMON_END_DUMP", "xpu_timer compatibility: seconds the last stack dump of the rank took, 0 if none."),
		mmAvg:     compatDesc("XPU_TIMER_MM_KERNEL_AVG_LATENCY", "xpu_timer compatibility: average matmul kernel latency in microseconds.", mmLabels...),
		mmMax:     compatDesc("XPU_TIMER_MM_KERNEL_MAX_LATENCY", "xpu_timer compatibility: maximum matmul kernel latency in microseconds.", mmLabels...),
		mmP99:     compatDesc("XPU_TIMER_MM_KERNEL_P99_LATENCY", "xpu_timer compatibility: 99th percentile matmul kernel latency in microseconds.", mmLabels...),
		mmMin:     compatDesc("XPU_TIMER_MM_KERNEL_MIN_LATENCY", "xpu_timer compatibility: minimum matmul kernel latency in microseconds.", mmLabels...),
		mmFlops:   compatDesc("XPU_TIMER_MM_KERNEL_FLOPS", "xpu_timer compatibility: achieved matmul throughput in TFLOPS.", mmLabels...),
		collAvg:   compatDesc("XPU_TIMER_COLL_KERNEL_AVG_LATENCY", "xpu_timer compatibility: average collective latency in microseconds.", collLabels...),
		collMax:   compatDesc("XPU_TIMER_COLL_KERNEL_MAX_LATENCY", "xpu_timer compatibility: maximum collective latency in microseconds.", collLabels...),
		collP99:   compatDesc("XPU_TIMER_COLL_KERNEL_P99_LATENCY", "xpu_timer compatibility: 99th percentile collective latency in microseconds.", collLabels...),
		collMin:   compatDesc("XPU_TIMER_COLL_KERNEL_MIN_LATENCY", "xpu_timer compatibility: minimum collective latency in microseconds.", collLabels...),
		bw:        compatDesc("XPU_TIMER_COLL_KERNEL_BANDWIDTH", "xpu_timer compatibility: collective bus bandwidth in Gbit/s.", collLabels...),

		rankHung:       d("xpu_timer_rank_hung", "Whether the rank is hung (1) or not (0), by kind of hang: gpu (GPU work outstanding past the timeout), host (no GPU call past the timeout while peers wait, or spinning in the same Python frames while they are stuck) or stalled (main thread waiting in place past the timeout while no peer progresses).", with(rankLabels, "kind")),
		detectors:      d("xpu_timer_rank_detectors", "Whether a detector watches the rank (1) or not (0): gpu (eBPF probes on a CUDA/NCCL library the rank maps) or stacks (looks at its main thread, which see a rank stuck where no probe fires).", with(rankLabels, "detector")),
		oldestAge:      d("xpu_timer_oldest_op_age_seconds", "Age of the rank's oldest outstanding GPU operation, 0 when none is outstanding.", rankLabels),
		pendingOps:     d("xpu_timer_pending_ops", "GPU operations the rank has enqueued and not yet seen complete.", rankLabels),
		dumpDuration:   d("xpu_timer_dump_duration_seconds", "How long the rank's last stack dump took, 0 if none.", rankLabels),
		kernelDuration: d("xpu_timer_kernel_duration_seconds", "Durations of completed GPU kernels by class (matmul, attention, collective, elementwise, copy, other); kernel names the top kernels by time when asked for, and is empty for the rest of the class.", with(rankLabels, "class", "kernel")),
		collDuration:   d("xpu_timer_collective_duration_seconds", "Durations of completed collectives.", with(rankLabels, "operation", "dtype")),
		busBandwidth:   d("xpu_timer_collective_bus_bandwidth_bytes_per_second", "Collective bus bandwidth (nccl-tests convention).", with(rankLabels, "operation", "dtype")),
		gpuUtil:        d("xpu_timer_gpu_utilization_ratio", "GPU utilization of the rank's device (0-1) from NVML.", with(rankLabels, "gpu", "uuid")),
		gpuMemUsed:     d("xpu_timer_gpu_memory_used_bytes", "GPU memory in use on the rank's device from NVML.", with(rankLabels, "gpu", "uuid")),
		gpuMemTotal:    d("xpu_timer_gpu_memory_total_bytes", "GPU memory of the rank's device from NVML.", with(rankLabels, "gpu", "uuid")),
		probeEvents:    d("xpu_timer_probe_events_total", "Events read from the eBPF probes.", nodeLabels),
		lostEvents:     d("xpu_timer_probe_lost_events_total", "Events the eBPF probes dropped because the ring buffer was full.", nodeLabels),
		wakeups:        d("xpu_timer_probe_wakeups_total", "Times a ring of call records passed a quarter of its size: the eBPF probes then wake the agent's reader if it rests.", nodeLabels),
		coalesced:      d("xpu_timer_probe_coalesced_records_total", "Process records (forks, execs, exits, library loads) merged into an earlier one of the same process while the tracer's follower was a full queue behind its reader: every process is still followed, a merged record's notice may be missing.", nodeLabels),
		holds:          d("xpu_timer_process_holds_total", "Times a followed process was held at an exec or a library load until what it mapped was probed.", nodeLabels),
		held:           d("xpu_timer_process_held_seconds_total", "Time followed processes spent held at execs and library loads, in all.", nodeLabels),
		attached:       d("xpu_timer_attached_processes", "Processes currently traced.", nodeLabels),
		probes:         d("xpu_timer_probes_attached", "Uprobes currently attached.", nodeLabels),
		dumps:          d("xpu_timer_dumps_total", "Stack dumps written.", nodeLabels),
		dumpFailures:   d("xpu_timer_dump_failures_total", "Stack dumps that failed to capture or write.", nodeLabels),
		xid:            d("xpu_timer_gpu_xid_last_timestamp_seconds", "Unix time of the latest GPU Xid error of this code on this device; the series disappears once the event ages out.", with(nodeLabels, "gpu", "uuid", "xid")),
		scrapeDuration: d("xpu_timer_scrape_duration_seconds", "Time taken to collect this scrape's snapshot and metrics.", nodeLabels),
		lag:            newLagDescs(),
	}
}

// Describe sends every descriptor.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.hang, c.startDump, c.endDump,
		c.mmAvg, c.mmMax, c.mmP99, c.mmMin, c.mmFlops,
		c.collAvg, c.collMax, c.collP99, c.collMin, c.bw,
		c.rankHung, c.detectors, c.oldestAge, c.pendingOps, c.dumpDuration,
		c.kernelDuration, c.collDuration, c.busBandwidth,
		c.gpuUtil, c.gpuMemUsed, c.gpuMemTotal,
		c.probeEvents, c.lostEvents, c.wakeups, c.coalesced, c.attached, c.probes, c.holds, c.held,
		c.dumps, c.dumpFailures, c.xid, c.scrapeDuration,
	} {
		ch <- d
	}
	c.lag.describe(ch)
}

// Collect takes one snapshot and emits it.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	start := time.Now()
	c.mu.Lock()
	source, top := c.source, c.topKernels
	c.mu.Unlock()
	var snap Snapshot
	if source != nil {
		snap = source()
	}
	c.collect(ch, snap, top)
	ch <- prometheus.MustNewConstMetric(c.scrapeDuration, prometheus.GaugeValue, time.Since(start).Seconds(), c.static...)
}

// collect emits everything of snap but the scrape duration.
func (c *collector) collect(ch chan<- prometheus.Metric, snap Snapshot, top int) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), c.static...)
	}
	counter(c.probeEvents, snap.ProbeEvents)
	counter(c.lostEvents, snap.LostEvents)
	counter(c.wakeups, snap.Wakeups)
	counter(c.coalesced, snap.Coalesced)
	counter(c.holds, snap.Holds)
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.CounterValue, snap.HeldSeconds, c.static...)
	counter(c.dumps, snap.Dumps)
	counter(c.dumpFailures, snap.DumpFailures)
	gauge(c.attached, float64(snap.AttachedProcesses), c.static...)
	gauge(c.probes, float64(snap.ProbesAttached), c.static...)

	for _, x := range latestXids(snap.Xids) {
		gauge(c.xid, float64(x.Time.UnixNano())/1e9, with(c.static, strconv.Itoa(x.Device), x.UUID, strconv.FormatUint(x.Xid, 10))...)
	}

	if len(snap.Ranks) == 0 {
		// DLRover calls a worker hung when every XPU_TIMER_COMMON_HANG line
		// ends in 1, which is vacuously true of none: serve one "not hung"
		// line until the first rank is known. It names no rank (empty rank
		// labels, which Prometheus drops): no series of a rank -1.
		gauge(c.hang, 0, with(c.static, "", "")...)
		return
	}
	seen := make(map[[2]int]bool, len(snap.Ranks))
	for _, r := range snap.Ranks {
		key := [2]int{r.Rank, r.LocalRank}
		if seen[key] {
			continue // the same rank twice (a restarted process): keep the first
		}
		seen[key] = true
		c.collectRank(ch, r, top)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *collector) collectRank(ch chan<- prometheus.Metric, r Rank, top int) {
	rl := with(c.static, strconv.Itoa(r.Rank), strconv.Itoa(r.LocalRank))
	gauge := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, with(rl, extra...)...)
	}
	gauge(c.hang, b2f(r.Hung))
	gauge(c.startDump, b2f(r.DumpStarted))
	gauge(c.endDump, r.DumpSeconds)
	kind := r.HangKind
	if kind != timer.HangHost && kind != timer.HangStalled {
		kind = timer.HangGPU // a hang of unknown kind counts as a GPU hang
	}
	for _, k := range []timer.HangKind{timer.HangGPU, timer.HangHost, timer.HangStalled} {
		gauge(c.rankHung, b2f(r.Hung && kind == k), string(k))
	}
	for _, d := range []string{DetectorGPU, DetectorStacks} {
		gauge(c.detectors, b2f(slices.Contains(r.Detectors, d)), d)
	}
	gauge(c.oldestAge, r.OldestAgeSeconds)
	gauge(c.pendingOps, float64(r.PendingOps))
	gauge(c.dumpDuration, r.DumpSeconds)

	const us = 1e6
	mmSeen := map[[3]string]bool{}
	for _, k := range r.Kernels {
		if k.Operation == "" {
			continue
		}
		lv := [3]string{orUnknown(k.DType), k.Level, k.Operation}
		if mmSeen[lv] {
			continue
		}
		mmSeen[lv] = true
		gauge(c.mmAvg, k.Durations.Avg*us, lv[:]...)
		gauge(c.mmMax, k.Durations.Max*us, lv[:]...)
		gauge(c.mmP99, k.Durations.P99*us, lv[:]...)
		gauge(c.mmMin, k.Durations.Min*us, lv[:]...)
		gauge(c.mmFlops, k.FLOPS/1e12, lv[:]...)
	}
	collSeen := map[[6]string]bool{}
	for _, o := range r.Collectives {
		lv := [6]string{orUnknown(o.Algorithm), orUnknown(o.DType), o.Level, o.Operation, strconv.Itoa(int(b2f(o.Small))), orUnknown(o.Transport)}
		if collSeen[lv] {
			continue
		}
		collSeen[lv] = true
		gauge(c.collAvg, o.Durations.Avg*us, lv[:]...)
		gauge(c.collMax, o.Durations.Max*us, lv[:]...)
		gauge(c.collP99, o.Durations.P99*us, lv[:]...)
		gauge(c.collMin, o.Durations.Min*us, lv[:]...)
		gauge(c.bw, o.BusBandwidth*8/1e9, lv[:]...)
	}

	for _, k := range kernelSeriesOf(r.Kernels, top) {
		ch <- prometheus.MustNewConstHistogram(c.kernelDuration, k.d.Count, k.d.Sum, buckets(k.d.Buckets), with(rl, k.class, k.kernel)...)
	}
	for _, o := range mergeCollectives(r.Collectives) {
		ch <- prometheus.MustNewConstHistogram(c.collDuration, o.d.Count, o.d.Sum, buckets(o.d.Buckets), with(rl, o.op, o.dtype)...)
		gauge(c.busBandwidth, o.bw, o.op, o.dtype)
	}

	if g := r.GPU; g != nil {
		gl := []string{strconv.Itoa(g.Index), g.UUID}
		gauge(c.gpuUtil, float64(g.Utilization)/100, gl...)
		gauge(c.gpuMemUsed, float64(g.MemoryUsed), gl...)
		gauge(c.gpuMemTotal, float64(g.MemoryTotal), gl...)
	}
	c.lag.collect(ch, rl, r)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func buckets(bs []Bucket) map[float64]uint64 {
	m := make(map[float64]uint64, len(bs))
	for _, b := range bs {
		m[b.UpperBound] = b.Count
	}
	return m
}

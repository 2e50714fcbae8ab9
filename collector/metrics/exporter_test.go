package metrics

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/timer"
)

var testStatic = Static{IP: "10.0.0.7", JobName: "llama", PodName: "llama-worker-1"}

// hungSnapshot is a two-rank node where rank 1 is hung on the GPU.
func hungSnapshot() Snapshot {
	return Snapshot{
		ProbeEvents: 1000, LostEvents: 3, Wakeups: 7, Coalesced: 5, Holds: 12, HeldSeconds: 0.034, AttachedProcesses: 2, ProbesAttached: 40, Dumps: 2, DumpFailures: 1,
		Xids: []dumpfile.Xid{
			{Device: 1, UUID: "GPU-b", Xid: 79, Time: time.Unix(1700000000, 0)},
			{Device: 1, UUID: "GPU-b", Xid: 79, Time: time.Unix(1700000010, 0)},
		},
		Ranks: []Rank{
			{Rank: 0, LocalRank: 0, PID: 100, DumpStarted: true, DumpSeconds: 0.25, PendingOps: 1, OldestAgeSeconds: 0.001,
				Kernels: []Kernel{
					{Name: "gemm_bf16_kernel", Operation: "Matmul", DType: "bf16", Level: "3", FLOPS: 5.5e12,
						Durations: Durations{Count: 4, Sum: 0.004, Min: 0.0005, Max: 0.002, Avg: 0.001, P99: 0.002, Buckets: []Bucket{{0.001, 3}, {0.01, 4}}}},
				},
				Collectives: []Collective{
					{Operation: "AllReduce", DType: "fp16", Algorithm: "RING_LL", Transport: "IntraNode", Level: "3", BusBandwidth: 5e9,
						Durations: Durations{Count: 2, Sum: 0.002, Min: 0.0008, Max: 0.0012, Avg: 0.001, P99: 0.0012, Buckets: []Bucket{{0.001, 1}, {0.01, 2}}}},
					{Operation: "AllReduce", DType: "fp16", Algorithm: "RING_LL", Transport: "IntraNode", Level: "1", Small: true, BusBandwidth: 1e9,
						Durations: Durations{Count: 2, Sum: 0.0002, Min: 0.0001, Max: 0.0001, Avg: 0.0001, P99: 0.0001, Buckets: []Bucket{{0.001, 2}, {0.01, 2}}}},
				},
				GPU:       &dumpfile.GPU{Index: 0, UUID: "GPU-a", Name: "H100", Utilization: 97, MemoryUsed: 1 << 30, MemoryTotal: 80 << 30},
				Detectors: []string{DetectorGPU, DetectorStacks},
				Comms:     []Comm{{ID: "9c1e04a1b2c3d4e5f60718293a4b5c6d", Issued: 12, Completed: 9, WaitSeconds: 31.5}},
				Lags:      []Lag{{Comm: "9c1e04a1b2c3d4e5f60718293a4b5c6d", Activity: "checkpoint", Lagging: true}},
				Activity:  &Activity{Kind: "checkpoint", Detail: "save_checkpoint@train.py:60"}},
			{Rank: 1, LocalRank: 1, PID: 101, Hung: true, HangKind: timer.HangGPU, DumpStarted: true, DumpSeconds: 0.5, PendingOps: 3, OldestAgeSeconds: 301,
				Detectors: []string{DetectorStacks}},
		},
	}
}

const wantCompat = `
# HELP XPU_TIMER_COLL_KERNEL_BANDWIDTH xpu_timer compatibility: collective bus bandwidth in Gbit/s.
# TYPE XPU_TIMER_COLL_KERNEL_BANDWIDTH gauge
XPU_TIMER_COLL_KERNEL_BANDWIDTH{algorithm="RING_LL",dtype="fp16",ip="10.0.0.7",job_name="llama",level="1",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0",small="1",transport="IntraNode"} 8
XPU_TIMER_COLL_KERNEL_BANDWIDTH{algorithm="RING_LL",dtype="fp16",ip="10.0.0.7",job_name="llama",level="3",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0",small="0",transport="IntraNode"} 40
# HELP XPU_TIMER_COLL_KERNEL_MAX_LATENCY xpu_timer compatibility: maximum collective latency in microseconds.
# TYPE XPU_TIMER_COLL_KERNEL_MAX_LATENCY gauge
XPU_TIMER_COLL_KERNEL_MAX_LATENCY{algorithm="RING_LL",dtype="fp16",ip="10.0.0.7",job_name="llama",level="1",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0",small="1",transport="IntraNode"} 100
XPU_TIMER_COLL_KERNEL_MAX_LATENCY{algorithm="RING_LL",dtype="fp16",ip="10.0.0.7",job_name="llama",level="3",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0",small="0",transport="IntraNode"} 1200
# HELP XPU_TIMER_COMMON_END_DUMP xpu_timer compatibility: seconds the last stack dump of the rank took, 0 if none.
# TYPE XPU_TIMER_COMMON_END_DUMP gauge
XPU_TIMER_COMMON_END_DUMP{ip="10.0.0.7",job_name="llama",local_rank="0",pod_name="llama-worker-1",rank="0"} 0.25
XPU_TIMER_COMMON_END_DUMP{ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="1"} 0.5
# HELP XPU_TIMER_COMMON_HANG xpu_timer compatibility: 1 if the rank is hung, else 0.
# TYPE XPU_TIMER_COMMON_HANG gauge
XPU_TIMER_COMMON_HANG{ip="10.0.0.7",job_name="llama",local_rank="0",pod_name="llama-worker-1",rank="0"} 0
XPU_TIMER_COMMON_HANG{ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="1"} 1
# HELP XPU_TIMER_COMMON_START_DUMP xpu_timer compatibility: 1 once a stack dump of the rank started, else 0.
# TYPE XPU_TIMER_COMMON_START_DUMP gauge
XPU_TIMER_COMMON_START_DUMP{ip="10.0.0.7",job_name="llama",local_rank="0",pod_name="llama-worker-1",rank="0"} 1
XPU_TIMER_COMMON_START_DUMP{ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="1"} 1
# HELP XPU_TIMER_MM_KERNEL_AVG_LATENCY xpu_timer compatibility: average matmul kernel latency in microseconds.
# TYPE XPU_TIMER_MM_KERNEL_AVG_LATENCY gauge
XPU_TIMER_MM_KERNEL_AVG_LATENCY{dtype="bf16",ip="10.0.0.7",job_name="llama",level="3",local_rank="0",operation="Matmul",pod_name="llama-worker-1",rank="0"} 1000
# HELP XPU_TIMER_MM_KERNEL_FLOPS xpu_timer compatibility: achieved matmul throughput in TFLOPS.
# TYPE XPU_TIMER_MM_KERNEL_FLOPS gauge
XPU_TIMER_MM_KERNEL_FLOPS{dtype="bf16",ip="10.0.0.7",job_name="llama",level="3",local_rank="0",operation="Matmul",pod_name="llama-worker-1",rank="0"} 5.5
`

const wantOwn = `
# HELP xpu_timer_collective_bus_bandwidth_bytes_per_second Collective bus bandwidth (nccl-tests convention).
# TYPE xpu_timer_collective_bus_bandwidth_bytes_per_second gauge
xpu_timer_collective_bus_bandwidth_bytes_per_second{dtype="fp16",ip="10.0.0.7",job_name="llama",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0"} 3e+09
# HELP xpu_timer_collective_duration_seconds Durations of completed collectives.
# TYPE xpu_timer_collective_duration_seconds histogram
xpu_timer_collective_duration_seconds_bucket{dtype="fp16",ip="10.0.0.7",job_name="llama",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0",le="0.001"} 3
xpu_timer_collective_duration_seconds_bucket{dtype="fp16",ip="10.0.0.7",job_name="llama",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0",le="0.01"} 4
xpu_timer_collective_duration_seconds_bucket{dtype="fp16",ip="10.0.0.7",job_name="llama",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0",le="+Inf"} 4
xpu_timer_collective_duration_seconds_sum{dtype="fp16",ip="10.0.0.7",job_name="llama",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0"} 0.0022
xpu_timer_collective_duration_seconds_count{dtype="fp16",ip="10.0.0.7",job_name="llama",local_rank="0",operation="AllReduce",pod_name="llama-worker-1",rank="0"} 4
# HELP xpu_timer_gpu_utilization_ratio GPU utilization of the rank's device (0-1) from NVML.
# TYPE xpu_timer_gpu_utilization_ratio gauge
xpu_timer_gpu_utilization_ratio{gpu="0",ip="10.0.0.7",job_name="llama",local_rank="0",pod_name="llama-worker-1",rank="0",uuid="GPU-a"} 0.97
# HELP xpu_timer_gpu_xid_last_timestamp_seconds Unix time of the latest GPU Xid error of this code on this device; the series disappears once the event ages out.
# TYPE xpu_timer_gpu_xid_last_timestamp_seconds gauge
xpu_timer_gpu_xid_last_timestamp_seconds{gpu="1",ip="10.0.0.7",job_name="llama",pod_name="llama-worker-1",uuid="GPU-b",xid="79"} 1.70000001e+09
# HELP xpu_timer_oldest_op_age_seconds Age of the rank's oldest outstanding GPU operation, 0 when none is outstanding.
# TYPE xpu_timer_oldest_op_age_seconds gauge
xpu_timer_oldest_op_age_seconds{ip="10.0.0.7",job_name="llama",local_rank="0",pod_name="llama-worker-1",rank="0"} 0.001
xpu_timer_oldest_op_age_seconds{ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="1"} 301
# HELP xpu_timer_probe_coalesced_records_total Process records (forks, execs, exits, library loads) merged into an earlier one of the same process while the tracer's follower was a full queue behind its reader: every process is still followed, a merged record's notice may be missing.
# TYPE xpu_timer_probe_coalesced_records_total counter
xpu_timer_probe_coalesced_records_total{ip="10.0.0.7",job_name="llama",pod_name="llama-worker-1"} 5
# HELP xpu_timer_probe_lost_events_total Events the eBPF probes dropped because the ring buffer was full.
# TYPE xpu_timer_probe_lost_events_total counter
xpu_timer_probe_lost_events_total{ip="10.0.0.7",job_name="llama",pod_name="llama-worker-1"} 3
# HELP xpu_timer_probe_wakeups_total Times a ring of call records passed a quarter of its size: the eBPF probes then wake the agent's reader if it rests.
# TYPE xpu_timer_probe_wakeups_total counter
xpu_timer_probe_wakeups_total{ip="10.0.0.7",job_name="llama",pod_name="llama-worker-1"} 7
# HELP xpu_timer_process_held_seconds_total Time followed processes spent held at execs and library loads, in all.
# TYPE xpu_timer_process_held_seconds_total counter
xpu_timer_process_held_seconds_total{ip="10.0.0.7",job_name="llama",pod_name="llama-worker-1"} 0.034
# HELP xpu_timer_process_holds_total Times a followed process was held at an exec or a library load until what it mapped was probed.
# TYPE xpu_timer_process_holds_total counter
xpu_timer_process_holds_total{ip="10.0.0.7",job_name="llama",pod_name="llama-worker-1"} 12
# HELP xpu_timer_rank_detectors Whether a detector watches the rank (1) or not (0): gpu (eBPF probes on a CUDA/NCCL library the rank maps) or stacks (looks at its main thread, which see a rank stuck where no probe fires).
# TYPE xpu_timer_rank_detectors gauge
xpu_timer_rank_detectors{detector="gpu",ip="10.0.0.7",job_name="llama",local_rank="0",pod_name="llama-worker-1",rank="0"} 1
xpu_timer_rank_detectors{detector="gpu",ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="1"} 0
xpu_timer_rank_detectors{detector="stacks",ip="10.0.0.7",job_name="llama",local_rank="0",pod_name="llama-worker-1",rank="0"} 1
xpu_timer_rank_detectors{detector="stacks",ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="1"} 1
# HELP xpu_timer_rank_hung Whether the rank is hung (1) or not (0), by kind of hang: gpu (GPU work outstanding past the timeout), host (no GPU call past the timeout while peers wait, or spinning in the same Python frames while they are stuck) or stalled (main thread waiting in place past the timeout while no peer progresses).
# TYPE xpu_timer_rank_hung gauge
xpu_timer_rank_hung{ip="10.0.0.7",job_name="llama",kind="gpu",local_rank="0",pod_name="llama-worker-1",rank="0"} 0
xpu_timer_rank_hung{ip="10.0.0.7",job_name="llama",kind="gpu",local_rank="1",pod_name="llama-worker-1",rank="1"} 1
xpu_timer_rank_hung{ip="10.0.0.7",job_name="llama",kind="host",local_rank="0",pod_name="llama-worker-1",rank="0"} 0
xpu_timer_rank_hung{ip="10.0.0.7",job_name="llama",kind="host",local_rank="1",pod_name="llama-worker-1",rank="1"} 0
xpu_timer_rank_hung{ip="10.0.0.7",job_name="llama",kind="stalled",local_rank="0",pod_name="llama-worker-1",rank="0"} 0
xpu_timer_rank_hung{ip="10.0.0.7",job_name="llama",kind="stalled",local_rank="1",pod_name="llama-worker-1",rank="1"} 0
`

func newTestExporter(s Snapshot) *Exporter {
	x := New(testStatic)
	x.SetSource(func() Snapshot { return s })
	return x
}

func TestExposition(t *testing.T) {
	x := newTestExporter(hungSnapshot())
	if err := testutil.GatherAndCompare(x.Gatherer(), strings.NewReader(wantCompat),
		"XPU_TIMER_COMMON_HANG", "XPU_TIMER_COMMON_START_DUMP", "XPU_TIMER_COMMON_END_DUMP",
		"XPU_TIMER_MM_KERNEL_AVG_LATENCY", "XPU_TIMER_MM_KERNEL_FLOPS",
		"XPU_TIMER_COLL_KERNEL_MAX_LATENCY", "XPU_TIMER_COLL_KERNEL_BANDWIDTH"); err != nil {
		t.Error(err)
	}
	if err := testutil.GatherAndCompare(x.Gatherer(), strings.NewReader(wantOwn),
		"xpu_timer_rank_hung", "xpu_timer_rank_detectors", "xpu_timer_oldest_op_age_seconds", "xpu_timer_collective_duration_seconds",
		"xpu_timer_collective_bus_bandwidth_bytes_per_second", "xpu_timer_gpu_utilization_ratio",
		"xpu_timer_gpu_xid_last_timestamp_seconds", "xpu_timer_probe_lost_events_total", "xpu_timer_probe_wakeups_total", "xpu_timer_probe_coalesced_records_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(x.c, "xpu_timer_scrape_duration_seconds"); n != 1 {
		t.Errorf("scrape duration series: %d", n)
	}
}

func TestEmptySnapshotNotSet(t *testing.T) {
	x := New(Static{})
	want := `
# HELP XPU_TIMER_COMMON_HANG xpu_timer compatibility: 1 if the rank is hung, else 0.
# TYPE XPU_TIMER_COMMON_HANG gauge
XPU_TIMER_COMMON_HANG{ip="NOT_SET",job_name="NOT_SET",local_rank="",pod_name="NOT_SET",rank=""} 0
`
	if err := testutil.GatherAndCompare(x.Gatherer(), strings.NewReader(want), "XPU_TIMER_COMMON_HANG"); err != nil {
		t.Error(err)
	}
}

func TestDuplicateRanksDoNotBreakScrape(t *testing.T) {
	s := hungSnapshot()
	s.Ranks = append(s.Ranks, s.Ranks[1])
	x := newTestExporter(s)
	if _, err := x.Gatherer().Gather(); err != nil {
		t.Fatal(err)
	}
}

func TestLint(t *testing.T) {
	x := newTestExporter(hungSnapshot())
	problems, err := testutil.GatherAndLint(x.Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// scrape serves x over HTTP and returns the text exposition.
func scrape(t *testing.T, x *Exporter) string {
	t.Helper()
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(body)
}

func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not installed (Debian package prometheus, scripts/apt-packages.txt): %v", err)
	}
	text := scrape(t, newTestExporter(hungSnapshot()))
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// dlroverHung applies DLRover's rule to one worker's /metrics text: keep
// the lines starting XPU_TIMER_COMMON_HANG; the worker is hung when the last
// number of every such line is 1 (its diagnostician uses the regex below).
func dlroverHung(text string) bool {
	lines, hung := 0, 0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "XPU_TIMER_COMMON_HANG") {
			continue
		}
		lines++
		if lastNumber(line) == "1" {
			hung++
		}
	}
	return hung == lines
}

// lastNumber returns the last run of digits in s (Go's regexp has no
// lookahead, so this scans instead of DLRover's `(\d+)(?!.*\d)`).
func lastNumber(s string) string {
	end := -1
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] >= '0' && s[i] <= '9' {
			end = i + 1
			break
		}
	}
	if end < 0 {
		return ""
	}
	start := end - 1
	for start > 0 && s[start-1] >= '0' && s[start-1] <= '9' {
		start--
	}
	return s[start:end]
}

func TestDLRoverRule(t *testing.T) {
	allHung := hungSnapshot()
	allHung.Ranks[0].Hung, allHung.Ranks[0].HangKind = true, timer.HangHost
	healthy := hungSnapshot()
	healthy.Ranks[1].Hung = false
	for _, tc := range []struct {
		name string
		snap Snapshot
		want bool
	}{
		{"all ranks hung", allHung, true},
		{"one of two hung", hungSnapshot(), false},
		{"healthy", healthy, false},
		{"no ranks yet", Snapshot{}, false},
	} {
		text := scrape(t, newTestExporter(tc.snap))
		if got := dlroverHung(text); got != tc.want {
			t.Errorf("%s: DLRover says hung=%v, want %v\n%s", tc.name, got, tc.want, grepHang(text))
		}
	}
}

func grepHang(text string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "XPU_TIMER_COMMON_HANG") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestSetSourceWhileScraping(t *testing.T) {
	x := New(testStatic)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 50; i++ {
			s := hungSnapshot()
			x.SetSource(func() Snapshot { return s })
		}
	}()
	for i := 0; i < 20; i++ {
		if _, err := x.Gatherer().Gather(); err != nil {
			t.Fatal(err)
		}
	}
	<-done
}

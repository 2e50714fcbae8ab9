#!/usr/bin/env bash
# Runs every benchmark (BENCH: a -bench regexp; BENCH_PKGS: the packages,
# default ./...; COUNT: runs of each) and ends with two tables of what they
# measured, each figure beside its anchor measured in the same run (or a
# fixed bound) and their ratio:
#
# 1. Rows a benchmark logs (b.Logf, or internal/benchtable.Row) as
#    tab-separated lines
#
#      BENCH-TABLE<TAB>name<TAB>figure<TAB>anchor<TAB>ratio
#
#    figure and anchor are free text ("3055 ns", "2318 ns (empty
#    uprobe)"), ratio is figure/anchor as a number, or "-".
# 2. The metrics benchmarks report (b.ReportMetric), paired in the list
#    below, with the median ratio over COUNT runs, its spread, and the
#    target where there is one.
#
# FLAMEGRAPH_PL, the path of Brendan Gregg's flamegraph.pl, adds the viewer's
# comparison with it (no Debian package ships it).
#
# go test runs with -v: without it a benchmark's log is cut to its first
# lines and later rows would be lost; and with -p 1: by default it runs as
# many packages' benchmarks at once as there are CPUs, and each measures
# the others' load (on a 2-core machine BenchmarkProbeOverhead's launch
# loops ran beside BenchmarkMonitorFootprint's job, whose scrape of the
# launcher then timed out). Exit status: non-zero when go test
# failed (a benchmark calls b.Fatal when it measured nothing or lost
# events), when no benchmark ran, when no benchmark printed a row, or when
# a listed figure of a benchmark that ran measured nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT

go test -v -p 1 -run '^$' -bench "${BENCH:-.}" -benchtime=1x -count "${COUNT:-1}" -timeout "${BENCH_TIMEOUT:-90m}" ${BENCH_PKGS:-./...} 2>&1 |
	tee "$out" | grep -v '^ok\|no test files\|^PASS$'
status=${PIPESTATUS[0]}
bad=0

echo
echo "== rows (figure, anchor, ratio = figure/anchor) =="
table=$(grep -o $'BENCH-TABLE\t.*' "$out" | cut -f2- || true)
if [ -n "$table" ]; then
	{
		printf 'name\tfigure\tanchor\tratio\n'
		printf '%s\n' "$table"
	} | if command -v column >/dev/null; then column -t -s $'\t'; else cat; fi
fi

# The rows: benchmark, figure, anchor (a metric of the same run, or
# "=N": a fixed bound), the target ratio ("-": none), and what it is.
rows='
Dump	cold-ms	gdb-ms	0.1	first dump, 32 threads, 160 libraries, vs gdb
Dump	warmed-ms	gdb-ms	-	first dump after Warm vs gdb
Dump	cached-ms	gdb-ms	-	cached dump vs gdb
Dump	max-stop-ms	=10	1	longest stop vs 10 ms
Sample	sample-ms	dump-ms	-	one sample of every thread for GPU waits vs a full dump, same process
Sample	max-stop-ms	=10	1	longest stop of a GPU-wait sample vs 10 ms
TorchJob	cli-ms	eu-stack-ms	1	torch rank, first dump by xpu-timer-dump (new process) vs eu-stack
TorchJob	cli-ms	gdb-ms	0.05	torch rank, first dump (new process) vs gdb
TorchJob	cli-lines-ms	eu-stack-lines-ms	-	torch rank, first dump by xpu-timer dump --lines (new process) vs eu-stack -i -s (inlined frames and lines, as --lines)
TorchJob	cli-full-ms	eu-stack-ms	1	torch rank, first dump by xpu-timer dump (the command users type) vs eu-stack
TorchJob	cli-full-rank0-ratio	=1	1	torch rank 0 (in a gloo allreduce): xpu-timer dump over eu-stack on rank 0, median of the ratios by round
TorchJob	cli-full-rank1-ratio	=1	1	torch rank 1 (in a gloo allreduce), the same
TorchJob	cli-full-rank2-ratio	=1	1	torch rank 2 (in a gloo allreduce), the same
TorchJob	cli-full-rank3-ratio	=1	1	torch rank 3 (asleep in Python), the same
TorchJob	cli-lines-rank0-ratio	=1	-	torch rank 0: xpu-timer dump --lines over eu-stack -i -s on rank 0, median of the ratios by round
TorchJob	cli-lines-rank1-ratio	=1	-	torch rank 1, the same
TorchJob	cli-lines-rank2-ratio	=1	-	torch rank 2, the same
TorchJob	cli-lines-rank3-ratio	=1	-	torch rank 3, the same
TorchJob	cli-full-rss-MB	eu-stack-rss-MB	-	torch rank, peak RSS of xpu-timer dump (full binary) vs eu-stack
TorchJob	agent-ms	eu-stack-ms	0.5	torch rank, first dump in the agent vs eu-stack
TorchJob	cli-cpu-ms	eu-stack-cpu-ms	-	torch rank, CPU of a new-process dump vs eu-stack
TorchJob	cli-rss-MB	eu-stack-rss-MB	2	torch rank, peak RSS of a new-process dump vs eu-stack
TorchJob	max-stop-ms	=10	1	torch rank, longest stop vs 10 ms
TorchJob	cli-native-frames	gdb-frames	-	torch rank, native frames vs gdb
TorchJob	cli-native-frames	eu-stack-frames	-	torch rank, native frames vs eu-stack
TorchJob	cli-lines-native-frames	gdb-frames	-	torch rank, native frames with --lines (inlined ones too) vs gdb
TorchJob	cli-python-frames	=1	-	torch rank, Python frames (eu-stack, gdb: none)
ProbeOverhead	ours-ns/launch	empty-ns/launch	-	ns per cudaLaunchKernel, ours vs an empty uprobe
ProbeOverhead	hits/launch	filed-hits/launch	0.5	probe hits per runtime launch (bpf_stats run_cnt), ours vs the design issue 30 was filed against (2701bad: runtime + driver)
ProbeOverhead	ours-bpf-ns	filed-bpf-ns	0.5	run time of our programs per runtime launch (bpf_stats) vs the two of 2701bad
ProbeOverhead	ours-bpf-ns	today-bpf-ns	-	run time of our programs per runtime launch vs the programs of today on both traps (one of the two is ours: about 0.5 by construction)
ProbeOverhead	ours-ns/launch	filed-ns/launch	-	ns per runtime launch, ours vs the two traps of 2701bad
ProbeOverhead	ours-ns/launch	today-ns/launch	-	ns per runtime launch, ours vs the programs of today on both traps
ProbeOverhead	ours-empty-bpf-ns	=150	1	ns our program runs in the kernel (bpf_stats) over an empty one vs 150 ns
ProbeOverhead	floor-clock-bpf-ns	=150	-	ns bpf_ktime_get_ns alone adds to an empty program vs 150 ns
ProbeOverhead	floor-followed-bpf-ns	=150	-	ns the followed check alone adds vs 150 ns
ProbeOverhead	floor-stack-bpf-ns	=150	-	ns a 16-byte stack argument read alone adds vs 150 ns
ProbeOverhead	floor-record-bpf-ns	=150	-	ns a record reserved and published alone (clock in it, no reader) adds vs 150 ns
ProbeOverhead	ours-empty-bpf-ns	floors-bpf-ns	-	our launch program over its steps alone (followed, stack read, record), summed
ProbeOverhead	steps/s-traced	steps/s-plain	-	training steps/s, traced vs not
Viewer	seconds	=5	1	viewer on 4,096 ranks vs 5 s
Viewer	peak-RSS-MiB	=2048	1	viewer peak RSS vs 2 GiB
ViewerScale	seconds-100k	seconds-16k	-	viewer on the real dumps x 100,000 ranks vs x 16,384
ViewerScale	seconds-100k	=120	1	viewer on the real dumps x 100,000 ranks vs 2 minutes
ViewerScale	cpu-seconds-100k	cpu-seconds-16k	-	viewer CPU (user+system), 100,000 ranks vs 16,384
ViewerScale	peak-RSS-MiB-100k	peak-RSS-MiB-16k	-	viewer peak RSS, 100,000 ranks vs 16,384
ViewerScale	peak-RSS-MiB-100k	=4096	1	viewer peak RSS, 100,000 ranks vs 4 GiB
HoldImport	hold-ms	nohold-ms	-	python3 importing torch and numpy, followed from its exec: start-up with the holds at its loads vs without
HoldImport	held-ms/op	nohold-ms	-	time held at loads in all vs the start-up without holds
LaunchRate	cpu-%-per-100k-2procs	=2	1	launcher CPU per 100,000 launches/s, 2 launch-bound processes, vs 2 % of a core (issue 30)
LaunchRate	cpu-%-per-100k-8procs	=2	1	the same, 8 launch-bound processes on the 2 cores
LaunchRate	read-%-2procs	=100	-	launch records read of those made, 2 launch-bound processes (the rest lost)
LaunchRate	read-%-8procs	=100	-	launch records read of those made, 8 launch-bound processes (the rest lost)
TrainStep	ours-ns/launch	anchor+150-ns/launch	1	a training step (testbed twin, one process): ours a launch vs the anchor (empty uprobes on the launches) + 150 ns (issue 40)
TrainStep	launch-runs/launch	=1.05	1	a training step: runs of our launch programs (launches, kernel lookups) a launch vs 1.05
TrainStep	runs/launch	=1.05	-	a training step: runs of all our programs (copies, events, synchronize too) a launch
MonitorFootprint	watch-on-cpu-%	job-cpu-%	-	launcher CPU following 8 ranks (stall watch on) vs the job
MonitorFootprint	watch-on-cpu-%	watch-off-cpu-%	-	launcher CPU, stall watch on vs off
MonitorFootprint	watch-on-rss-MB	rank-rss-MB	-	launcher RSS following 8 ranks vs one rank
'

awk -v rows="$rows" -v bench="${BENCH:-.}" -F'\t' '
BEGIN {
	n = split(rows, lines, "\n")
	for (i = 1; i <= n; i++) {
		if (lines[i] == "") continue
		split(lines[i], f, "\t")
		nr++
		rb[nr] = f[1]; rf[nr] = f[2]; ra[nr] = f[3]; rt[nr] = f[4]; rw[nr] = f[5]
	}
}
# A result line: "BenchmarkName-2  1  123 ns/op  4.5 cold-ms ...".
/^Benchmark[^ \t]*[ \t]/ {
	split($0, w, /[ \t]+/)
	name = w[1]; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
	runs[name]++
	for (k = 3; k < length(w); k += 2) val[name, runs[name], w[k+1]] = w[k]
}
function sortv(a, m,    i, j, t) {
	for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
}
END {
	bad = 0
	printf "\n%-14s %-18s %12s  %-16s %12s  %8s %17s  %6s  %s\n", "benchmark", "figure", "value", "anchor", "value", "ratio", "spread", "target", "what"
	for (i = 1; i <= nr; i++) {
		b = rb[i]
		if (!(b in runs)) {
			if (("Benchmark" b) ~ bench) { printf "%-14s %-18s %12s  (did not run)\n", b, rf[i], "-"; bad = 1 }
			continue
		}
		m = 0; delete rat; delete fv; delete av
		for (r = 1; r <= runs[b]; r++) {
			x = val[b, r, rf[i]] + 0
			if (ra[i] ~ /^=/) y = substr(ra[i], 2) + 0; else y = val[b, r, ra[i]] + 0
			if (!((b, r, rf[i]) in val) || x <= 0 || y <= 0) { bad = 1; missing = 1; continue }
			m++; rat[m] = x / y; fv[m] = x; av[m] = y
		}
		if (m == 0) { printf "%-14s %-18s %12s  %-16s %12s  measured nothing\n", b, rf[i], "-", ra[i], "-"; continue }
		sortv(rat, m); sortv(fv, m); sortv(av, m)
		med = int((m + 1) / 2)
		met = ""
		if (rt[i] != "-") met = (rat[med] <= rt[i] + 0) ? " met" : " NOT met"
		printf "%-14s %-18s %12.4g  %-16s %12.4g  %8.3g %8.3g-%-8.3g  %6s  %s%s\n", b, rf[i], fv[med], ra[i], av[med], rat[med], rat[1], rat[m], rt[i], rw[i], met
	}
	if (bad) { print "bench: a figure measured nothing"; exit 1 }
}' "$out" || bad=1

ran=$(grep -c '^Benchmark' "$out" || true)
if [ "$status" -ne 0 ] || grep -q '^--- FAIL\|^FAIL' "$out"; then
	echo "bench: a benchmark failed (see above)" >&2
	exit 1
fi
if [ "$ran" -eq 0 ]; then
	echo "bench: no benchmark matched ${BENCH:-.}: nothing was measured" >&2
	exit 1
fi
if [ -z "$table" ]; then
	echo "bench: no benchmark printed a table row: nothing was measured" >&2
	exit 1
fi
exit "$bad"

#!/usr/bin/env bash
# The project's own real-GPU check (issues 25, 26 and 30).
#
#   scripts/gpu-check.sh build          static binaries into bin/gpu-check/
#   scripts/gpu-check.sh run [--dry]    the scenarios, one table of results
#
# Build here (`make gpu-check`), copy the tree's bin/gpu-check/ and
# scripts/ to a GPU host (no network, gdb, strace or perf needed there) and
# run `scripts/gpu-check.sh run` as root. In at most about 9 minutes it
# runs, each with its own time limit:
#
#   nccl-sleep   one process, NCCL all-reduce then torch.cuda._sleep for
#                ever, under xpu_timer_launch: gpu, kernel named
#   ddp4         torchrun, 4 ranks DDP over gloo on CUDA tensors, rank 2's
#                kernel never ends, under xpu_timer_launch: viewer names rank 2
#   triton       a @triton.jit kernel spinning for ever on a loaded flag,
#                under xpu_timer_launch: gpu, kernel named
#   graph-late   torch.cuda._sleep behind a CUDA graph replay and
#                torch.cuda.synchronize(), xpu-timer watch --pid attached
#                after the hang: gpu within timeout + 2 s
#   ddp4-watch   the 4-rank job attached late with watch --pid torchrun's pid
#   ddp4-agent   the same job, xpu-timer agent started late: viewer names rank 2
#   overhead     issue 30's launch table: x.add_(1) on 16 elements, LAUNCHES
#                launches after warm-up, best of 3 per process, five ways
#                interleaved (plain, one empty uprobe on cudaLaunchKernel,
#                two (+cuLaunchKernel), xpu_timer_launch, the same with
#                --stall-watch=false), ROUNDS rounds, medians, the BPF
#                statistics of every program that ran, lost events
#   paired       the same overhead measured in one process: paired.py
#                switches the ways (plain, an empty uprobe on
#                cudaLaunchKernel, one on cuLaunchKernel at its entry and
#                at the site our probes take, ours as xpu-timer watch
#                --pid) on and off around one launch-bound workload, ROUNDS
#                rounds of DWELL seconds each, and takes differences within
#                a round: ours at most one empty uprobe + 150 ns, 0 lost
#   rate8        8 of those launch-bound workloads at once under one
#                launcher: events lost, the launcher's CPU per 100,000
#                launches a second (at most 2 % of a core)
#   train-step   what a training step pays (issue 40), each workload in
#                one process (steppaired.py: plain, empty uprobes on the
#                driver's launch entry points at our probes' site, the
#                same at the entries, ours as xpu-timer watch --pid;
#                STEP_ROUNDS rounds, default 6, of STEP_DWELL s): a
#                6-layer transformer trained eagerly (launch-bound, ~417
#                launches a step: ours at most 150 ns a launch over the
#                anchor, our launch programs at most 1.05 runs a launch),
#                the same step with 100 ms of GPU work and replayed as a
#                CUDA graph (ours within plain's spread over the rounds);
#                0 lost, no stack sample of the job inside a window. About
#                3 minutes.
#   launch-blocking, queue-full, free-sync, queue-full-nccl (issue 39):
#                torch.cuda._sleep for ever, then a call that blocks behind
#                it though it is no wait, under xpu_timer_launch: the
#                sleep's own launch under CUDA_LAUNCH_BLOCKING=1; a loop of
#                x.add_(1) without a synchronize until the stream's queue
#                is full; torch.cuda.empty_cache() freeing cached blocks;
#                and the queue-full loop in a 1-rank NCCL job. Each: gpu
#                within timeout + 2 s, spin_kernel and the call named
#
# and prints one table (scenario, expected, got, seconds, verdict).
# Artefacts (logs, dumps, viewer reports, the table) go under $OUT when
# set, else a temporary directory it names. The exit status is the number
# of scenarios that failed (0: all as expected).
#
# ONLY (environment), a list of row names, runs those alone; the others
# are listed as skipped (verdict "skip", not counted as failed).
#
# --dry runs the same scenarios on the fake GPU testbed (testdata/fakegpu,
# built by make testbed) instead of PyTorch: gpu-check/fakeworkloads.py
# makes the single-process workloads' calls through the testbed's
# libraries, run.py the 4-rank job (kernel-hang) and the launch-bound loop,
# and the testbed's libraries are the empty uprobes' anchors. It is how this script is
# tested without a GPU (scripts/gpu-check/check_test.go).
#
# Settings (environment): PYTHON (default /opt/torch/.venv/bin/python3),
# HANG_TIMEOUT seconds (default 10; 5 with --dry: a rank attached late is
# sampled at most every 5 s, so a shorter timeout is confirmed a period
# late), ROUNDS (default 5; 3
# with --dry), LAUNCHES (default 200000; 20000 with --dry), BIN (default
# bin/gpu-check beside scripts/).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
BIN=${BIN:-$root/bin/gpu-check}

build() {
	cd "$root" || exit 2
	local version revision pkg=github.com/xpu-timer/xpu-timer/internal/version
	version=$(git describe --tags --dirty 2>/dev/null || echo dev)
	revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
	mkdir -p "$BIN"
	# Static (no cgo): runs on any glibc. NVML facts need cgo: GPU_CHECK_CGO=1
	# builds with it, linked against this host's glibc (2.34 or later there).
	CGO_ENABLED=${GPU_CHECK_CGO:-0} go build -tags netgo,osusergo \
		-ldflags "-X $pkg.Version=$version -X $pkg.Revision=$revision" -o "$BIN/" \
		./cmd/xpu_timer_launch ./cmd/xpu-timer ./cmd/xpu_timer_stacktrace_viewer ./scripts/gpu-check/probe || exit 2
	mv "$BIN/probe" "$BIN/gpucheck-probe"
	echo "built $(ls "$BIN" | tr '\n' ' ')in $BIN"
}

case "${1:-}" in
build)
	build
	exit 0
	;;
run) shift ;;
*)
	echo "usage: $0 build | run [--dry]" >&2
	exit 2
	;;
esac

DRY=0
[ "${1:-}" = --dry ] && DRY=1
start_all=$(date +%s.%N)
ART=${OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}/gpu-check
rm -rf "$ART" && mkdir -p "$ART" || exit 2
for b in xpu_timer_launch xpu-timer xpu_timer_stacktrace_viewer gpucheck-probe; do
	[ -x "$BIN/$b" ] || { echo "gpu-check: $BIN/$b missing: run '$0 build' (make gpu-check) first" >&2; exit 2; }
done
LAUNCH=$BIN/xpu_timer_launch XPU=$BIN/xpu-timer VIEWER=$BIN/xpu_timer_stacktrace_viewer PROBE=$BIN/gpucheck-probe

# What each scenario runs, on a GPU or on the testbed.
if [ $DRY = 1 ]; then
	T=${HANG_TIMEOUT:-5} ROUNDS=${ROUNDS:-3} LAUNCHES=${LAUNCHES:-20000}
	fake=$root/testdata/fakegpu
	[ -x "$fake/build/launchloop" ] || { echo "gpu-check: the testbed is not built (make testbed)" >&2; exit 2; }
	job() { echo "python3 $fake/run.py --lib-dir $fake/build --steps 1000 --step-ms 5 $*"; }
	wl="python3 $here/gpu-check/fakeworkloads.py $fake/build"
	W_NCCL="$wl nccl-sleep" K_NCCL=gemm_bf16_kernel
	W_DDP=$(job --nproc 4 --fault kernel-hang --fault-rank 2 --fault-step 3)
	W_DDP_LATE=$(job --nproc 4 --fault kernel-hang --fault-rank 2 --fault-step 4) LATE_RE='fault-step 4'
	W_TRITON="$wl triton" K_TRITON=triton_poi_fused_add_0
	W_GRAPH="$wl graph"
	HUNG_RE='^hung$' DDP_HUNG_RE='rank=0 step=3 done'
	W_BOUND=$(job --nproc 1 --steps 3 --launch-bound $((LAUNCHES / 3)))
	W_RATE="$wl launchbound" W_BLOCKS="$wl launchblocks" BLOCK=${BLOCK:-5000} DWELL=${DWELL:-2} PYP=python3
	STEP_ROUNDS=${STEP_ROUNDS:-3}
	CUDART=$fake/build/libcudart.so.12 CUDA=$fake/build/libcuda.so.1
	# the testbed's launches go through the runtime's frame (its driver's
	# entry stubs leave none); a queue of 64 fills at once on a loaded
	# machine, as 1,000 launches do on a GPU
	K_SPIN=spin_kernel C_LAUNCH='cudaLaunchKernel'
	export XPU_FAKEGPU_QUEUE_DEPTH=64
else
	T=${HANG_TIMEOUT:-10} ROUNDS=${ROUNDS:-5} LAUNCHES=${LAUNCHES:-200000}
	PY=${PYTHON:-/opt/torch/.venv/bin/python3}
	wl="$PY $here/gpu-check/workloads.py"
	W_NCCL="$wl nccl-sleep" K_NCCL=spin_kernel
	W_DDP="$PY -m torch.distributed.run --standalone --nproc-per-node 4 $here/gpu-check/workloads.py ddp"
	W_DDP_LATE="$W_DDP late" LATE_RE='workloads.py ddp late'
	W_TRITON="$wl triton" K_TRITON=spin_on_flag
	W_GRAPH="$wl graph"
	# the late job's fault holds rank 2 at step 3: rank 0 finishes step 2
	HUNG_RE='^hung$' DDP_HUNG_RE='rank=0 step=2 done'
	W_BOUND="$wl launchbound" W_RATE="$wl launchbound"
	W_BLOCKS="$wl launchblocks" BLOCK=${BLOCK:-20000} DWELL=${DWELL:-3} PYP=$PY
	STEP_ROUNDS=${STEP_ROUNDS:-6}
	# the 580 driver's exported frame is on the stack above its internals
	# (cuLaunchKernel in the lead's H200 dumps; its twins too)
	K_SPIN=spin_kernel C_LAUNCH='cuLaunchKernel(Ex)?(_ptsz)?'
	libs=$($wl libs) || { echo "gpu-check: $PY cannot use the GPU" >&2; exit 2; }
	CUDART=$(sed -n 's/^cudart=//p' <<<"$libs" | head -1) CUDA=$(sed -n 's/^cuda=//p' <<<"$libs" | head -1)
fi
export FAULT_RANK=2 FAULT_STEP=3 LAUNCHES BLOCK PYTHONDONTWRITEBYTECODE=1

# want ROW: whether ONLY (if set) names ROW.
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# ---- helpers ----

mkdir -p "$ART/rows"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# row NAME EXPECTED GOT SECONDS OK(0|1): one line of the table, in $ART/rows.
row() {
	local verdict=ok
	[ "$5" = 1 ] || verdict=FAIL
	printf '%-12s | %-44s | %-58s | %6s | %s\n' "$1" "$2" "$3" "$4" "$verdict" >"$ART/rows/$1"
	echo "gpu-check: $1: $verdict ($3)" >&2
}

# bg NAME CMD...: starts CMD in its own process group, output to $ART/NAME.log; sets PID.
bg() {
	local name=$1
	shift
	setsid "$@" >"$ART/$name.log" 2>&1 </dev/null &
	PID=$!
	PIDS+=("$PID")
}
PIDS=()
# stop PGID...: SIGTERM to each process group, SIGKILL to what runs 3 s later.
stop() {
	local p
	for p in "$@"; do kill -TERM -- "-$p" 2>/dev/null; done
	for _ in $(seq 30); do
		local alive=0
		for p in "$@"; do kill -0 -- "-$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && return
		sleep 0.1
	done
	for p in "$@"; do kill -KILL -- "-$p" 2>/dev/null; done
}

# waitfor FILE REGEX SECONDS: polls until FILE has a line matching REGEX.
waitfor() {
	local end
	end=$(awk -v n="$(now)" -v s="$3" 'BEGIN { printf "%.1f", n + s }')
	until grep -qE -- "$2" "$1" 2>/dev/null; do
		awk -v n="$(now)" -v e="$end" 'BEGIN { exit !(n > e) }' && return 1
		sleep 0.2
	done
}

# culprit DUMPDIR: the viewer's "Likely culprit" line.
culprit() {
	"$VIEWER" --path "$1" --out "$1/viewer" >"$1/viewer.log" 2>&1 || { echo "viewer failed"; return; }
	grep -m1 '^Likely culprit' "$1/viewer/summary.txt" || echo "no culprit line"
}

# hangline LOG: kind and op of the first hang line of a launcher or agent log.
# (each key=value cut at 48 characters)
hangline() {
	grep -m1 'msg=hang' "$1" | grep -oE '(rank|kind|op|newest|awaited)=("[^"]*"|[^ ]*)' |
		awk '{ if (length($0) > 48) $0 = substr($0, 1, 48) "..."; printf "%s ", $0 }'
}

# ---- scenarios under the launcher ----

# launched NAME WORKLOAD KERNEL [CALL [ENV...]]: one process hangs on a
# kernel; the hang line must say gpu and name the kernel: as its op, or as
# the newest of the awaited ops not known complete (a fill kernel before a
# Triton kernel completes unobserved: the probes see no completion nobody
# waited for). With CALL (a regular expression), the thread is blocked in
# a call that is no wait (issue 39): the line must name it (call=) and
# come within the timeout + 2 s (age=). ENV (VAR=VALUE) goes to the
# workload.
launched() {
	local name=$1 w=$2 kernel=$3 call=${4:-} t0
	shift 3
	[ $# -gt 0 ] && shift
	t0=$(now)
	mkdir -p "$ART/$name"
	bg "$name" env "$@" "$LAUNCH" --hang-timeout "${T}s" --timeline-path "$ART/$name" --port 0 -- $w
	local p=$PID got ok=0 want="gpu, $kernel named (op or newest)"
	[ -n "$call" ] && want="gpu <= ${T}+2 s, $kernel, call $call"
	if waitfor "$ART/$name.log" 'msg=hang' $((T + 15)); then
		local line age
		line=$(grep -m1 'msg=hang' "$ART/$name.log")
		got=$(hangline "$ART/$name.log")
		grep -q 'kind=gpu' <<<"$line" && grep -q -- "$kernel" <<<"$line" && ok=1
		if [ -n "$call" ]; then
			age=$(grep -oE ' age=[0-9.]+' <<<"$line" | cut -d= -f2)
			got="$(grep -oE ' call=("[^"]*"|[^ ]*)' <<<"$line" | cut -c2-) age=${age:-?} $got"
			grep -qE -- " call=\"?($call)( |\"|$)" <<<"$line" && awk -v a="${age:-1e9}" -v t="$T" 'BEGIN { exit !(a <= t + 2) }' || ok=0
		fi
		waitfor "$ART/$name.log" 'msg="dumped ranks"' 15 && got+="dumped" || got+="no dump"
	else
		got="no decision in $((T + 15)) s"
	fi
	stop "$p"
	row "$name" "$want" "$got" "$(since "$t0")" $ok
}

ddp4() {
	local t0 got ok=0
	t0=$(now)
	mkdir -p "$ART/ddp4"
	bg ddp4 "$LAUNCH" --hang-timeout "${T}s" --timeline-path "$ART/ddp4" --port 0 -- $W_DDP
	local p=$PID
	if waitfor "$ART/ddp4.log" 'msg="dumped ranks" .*ranks=4 of=4' $((T + 60)); then
		got=$(culprit "$ART/ddp4")
		grep -q 'Likely culprit: rank 2$' <<<"$got" && ok=1
	else
		got="no dump of 4 ranks in $((T + 60)) s"
	fi
	stop "$p"
	row ddp4 "viewer: Likely culprit: rank 2" "$got" "$(since "$t0")" $ok
}

# ---- attached late ----

graph_late() {
	local t0 got ok=0
	t0=$(now)
	bg graph $W_GRAPH
	local job=$PID
	if waitfor "$ART/graph.log" "$HUNG_RE" 45; then
		sleep 1
		local a
		a=$(now)
		bg graph-watch "$XPU" watch --timeout "${T}s" --exit-on-hang --pid "$job"
		local w=$PID
		if waitfor "$ART/graph-watch.log" '"event":"hang"' $((T + 10)); then
			local s
			s=$(since "$a")
			got="$(grep -m1 '"event":"hang"' "$ART/graph-watch.log" | grep -oE '"kind":"[a-z]+"') after ${s}s"
			grep -q '"kind":"gpu"' <<<"$got" && awk -v s="$s" -v t="$T" 'BEGIN { exit !(s <= t + 2) }' && ok=1
		else
			got="no decision in $((T + 10)) s of attaching"
		fi
		stop "$w"
	else
		got="the workload never hung"
	fi
	stop "$job"
	row graph-late "gpu within ${T}+2 s of watch --pid" "$got" "$(since "$t0")" $ok
}

# ddp4_late: a 4-rank job hangs before anything follows it; then watch
# --pid follows it until it decides, and after it the agent (one at a
# time: two monitors sampling the same ranks at once collide in ptrace,
# and on the H100 each found the other's samples in its way).
ddp4_late() {
	local t0 got ok=0
	t0=$(now)
	mkdir -p "$ART/ddp4-agent"
	bg ddp4-late $W_DDP_LATE
	local job=$PID
	if ! waitfor "$ART/ddp4-late.log" "$DDP_HUNG_RE" 60; then
		stop "$job"
		row ddp4-watch "rank 2 decided within ${T}+2 s" "the job never ran" "$(since "$t0")" 0
		row ddp4-agent "viewer: Likely culprit: rank 2" "the job never ran" "$(since "$t0")" 0
		return
	fi
	sleep 2 # the ranks reach the step the fault holds back
	local a
	a=$(now)
	bg ddp4-watch "$XPU" watch --timeout "${T}s" --pid "$job"
	local w=$PID
	if waitfor "$ART/ddp4-watch.log" '"event":"hang".*"rank":2[,}]' $((T + 10)); then
		local s
		s=$(since "$a")
		got="ranks $(grep '"event":"hang"' "$ART/ddp4-watch.log" | grep -oE '"rank":[0-9]+' | cut -d: -f2 | sort -u | tr '\n' ' ')after ${s}s"
		awk -v s="$s" -v t="$T" 'BEGIN { exit !(s <= t + 2) }' && ok=1
	else
		got="rank 2 not decided in $((T + 10)) s of attaching"
	fi
	stop "$w"
	row ddp4-watch "rank 2 decided within ${T}+2 s" "$got" "$(since "$a")" $ok
	ok=0
	a=$(now)
	# (GOTRACEBACK=all: a SIGQUIT below prints every goroutine)
	bg ddp4-agent-log env GOTRACEBACK=all XPU_TIMER_LOG_LEVEL=debug "$XPU" agent --hang-timeout "${T}s" \
		--timeline-path "$ART/ddp4-agent" --port 0 --scan-interval 1s --command-regex "$LATE_RE"
	local ag=$PID
	if waitfor "$ART/ddp4-agent-log.log" 'msg="dumped ranks" .*ranks=4 of=4' $((T + 20)); then
		got=$(culprit "$ART/ddp4-agent")
		grep -q 'Likely culprit: rank 2$' <<<"$got" && ok=1
	else
		got="no dump of 4 ranks in $((T + 20)) s"
		# where the agent is: its goroutines, into its log
		pkill -QUIT -f -- "--command-regex $LATE_RE" && sleep 1
	fi
	stop "$ag" "$job"
	row ddp4-agent "viewer: Likely culprit: rank 2" "$got" "$(since "$a")" $ok
}

# ---- launch overhead (issue 30) ----

# nsper LOG: ns per launch from a workload's output.
nsper() {
	local v
	v=$(grep -oE 'ns_per_launch=[0-9.]+' "$1" | tail -1 | cut -d= -f2)
	[ -z "$v" ] && v=$(grep -oE 'launches_per_second=[0-9.]+' "$1" | tail -1 | awk -F= '$2 > 0 { printf "%.0f", 1e9 / $2 }')
	echo "${v:--}"
}

# launches LOG: how many launches the workload made in all (warm-up included).
launches() {
	local n
	n=$(grep -oE 'launches_total=[0-9]+' "$1" | tail -1 | cut -d= -f2)
	[ -n "$n" ] || n=$(grep -oE ' launches=[0-9]+' "$1" | tail -1 | cut -d= -f2)
	echo "${n:-0}"
}

# lost LOG: the probe events a launcher lost, in all.
lost() {
	local n
	n=$(grep 'probe events lost' "$1" | grep -oE 'total=[0-9]+' | cut -d= -f2 | sort -n | tail -1)
	echo "${n:-0}"
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.0f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

overhead() {
	local t0 ways=(plain empty1 empty2 launcher nostall) r way
	t0=$(now)
	mkdir -p "$ART/overhead"
	for r in $(seq "$ROUNDS"); do
		for way in "${ways[@]}"; do
			local log=$ART/overhead/$way.$r.log
			case $way in
			plain) "$PROBE" -- $W_BOUND >"$log" 2>&1 ;;
			empty1) "$PROBE" -uprobe "$CUDART:cudaLaunchKernel" -- $W_BOUND >"$log" 2>&1 ;;
			empty2) "$PROBE" -uprobe "$CUDART:cudaLaunchKernel" -uprobe "$CUDA:cuLaunchKernel" -- $W_BOUND >"$log" 2>&1 ;;
			launcher) "$PROBE" -- "$LAUNCH" --hang-timeout 300s --port 0 --timeline-path "$ART/overhead" -- $W_BOUND >"$log" 2>&1 ;;
			nostall) "$PROBE" -- "$LAUNCH" --hang-timeout 300s --port 0 --stall-watch=false --timeline-path "$ART/overhead" -- $W_BOUND >"$log" 2>&1 ;;
			esac
			echo "$(nsper "$log")" >>"$ART/overhead/$way.ns"
		done
	done
	local plain table ok=1
	plain=$(median <"$ART/overhead/plain.ns")
	{
		printf '%-9s %s %10s %10s\n' "ns/launch" "$(printf '%9s' $(seq "$ROUNDS" | sed 's/^/r/'))" median "over plain"
		for way in "${ways[@]}"; do
			local m
			m=$(median <"$ART/overhead/$way.ns")
			[ "$m" = - ] && ok=0
			printf '%-9s %s %10s %10s\n' "$way" "$(printf '%9s' $(cat "$ART/overhead/$way.ns"))" "$m" \
				"$(awk -v m="$m" -v p="$plain" 'BEGIN { if (m ~ /^[0-9.]+$/ && p ~ /^[0-9.]+$/) printf "%+.0f", m - p; else print "-" }')"
		done
		echo
		echo "BPF statistics, last round (the kernel's run_cnt and run_time_ns; programs that ran):"
		for way in empty1 empty2 launcher nostall; do
			local log=$ART/overhead/$way.$ROUNDS.log
			grep '^gpucheck-bpf' "$log" | awk -v w="$way" -v n="$(launches "$log")" '{
				for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
				if (f["runs"] > 0) printf "  %-9s %-34s runs/launch %6.2f  ns/run %6.0f\n", w, f["prog"] "@" f["target"], (n > 0 ? f["runs"] / n : 0), f["run_ns"] / f["runs"]
			}'
		done
		echo
		for way in launcher nostall; do
			echo "lost events, $way, per round: $(for r in $(seq "$ROUNDS"); do lost "$ART/overhead/$way.$r.log"; done | tr '\n' ' ')"
		done
	} >"$ART/overhead.txt"
	cat "$ART/overhead.txt" >&2
	local e1 l
	e1=$(median <"$ART/overhead/empty1.ns")
	l=$(median <"$ART/overhead/launcher.ns")
	row overhead "launcher <= empty uprobe + 150 ns, 0 lost" \
		"plain $plain, empty $e1, launcher $l ns/launch" "$(since "$t0")" \
		"$([ $ok = 1 ] && awk -v l="$l" -v e="$e1" 'BEGIN { exit !(l <= e + 150) }' && ! grep -q 'probe events lost' "$ART"/overhead/launcher.*.log && echo 1 || echo 0)"
}

# paired: the launch overhead in one process (paired.py), DWELL s a way
# and round.
paired() {
	local t0 got ok=0 line
	t0=$(now)
	"$PYP" "$here/gpu-check/paired.py" "$ART/paired" "$PROBE" "$XPU" "$CUDART" "$CUDA" "$ROUNDS" "$DWELL" -- $W_BLOCKS \
		>"$ART/paired.log" 2>&1
	line=$(grep -m1 '^paired ' "$ART/paired.log")
	if [ -n "$line" ]; then
		got=$(awk -v l="$line" 'BEGIN { split(l, w, " "); for (i in w) { split(w[i], kv, "="); f[kv[1]] = kv[2] }
			printf "ours %s ns over one empty uprobe, %s over plain, %s lost", f["ours_over_empty1"], f["ours_over_plain"], f["lost"] }')
		grep -q ' ok=1$' <<<"$line" && ok=1
	else
		got="no result (see $ART/paired.log)"
	fi
	row paired "ours <= empty uprobe + 150 ns, 0 lost" "$got" "$(since "$t0")" $ok
}

# rate8: RATE_PROCS (default 8) launch-bound workloads under one launcher
# (issue 30), timed together: each warms up, then waits at a barrier
# (RATE_DIR: workloads.py's barrier); the shell the launcher runs reads
# the launcher's CPU time (the schedstat of its threads, /proc/PPID/task:
# its own, not the workloads') once all are warm, 2 s later (settled on
# the new ranks) and 2 s after that (at rest), lets them go, and reads it
# again when the last ends. Expected: no event lost at the rate they reach
# together, and the launcher's CPU at most 2 % of a core per 100,000
# launches a second.
rate8() {
	local t0 n=${RATE_PROCS:-8} dir=$ART/overhead/rate8
	t0=$(now)
	mkdir -p "$dir/barrier"
	# RATE_LAUNCHES each (default: as many as the single workload's), and
	# 150 s at most.
	LAUNCHES=${RATE_LAUNCHES:-$LAUNCHES} RATE_DIR=$dir/barrier XPU_TIMER_CPU_PROFILE=$dir/launcher.pprof timeout 150 "$LAUNCH" --hang-timeout 300s --port 0 --timeline-path "$dir" -- /bin/sh -c '
		n=$1 dir=$2
		shift 2
		for i in $(seq "$n"); do "$@" >"$dir/w$i.log" 2>&1 & done
		until [ "$(ls "$RATE_DIR" | grep -c "^ready")" -ge "$n" ]; do sleep 0.01; done
		cpu() { cat /proc/$PPID/task/*/schedstat | awk "{ s += \$1 } END { print s }"; }
		# the launcher without launches first, two spans of 2 s: it
		# settles (reads symbols of the new ranks ahead), then rests (its
		# checks and polls alone)
		i0=$(cpu) s0=$(date +%s%N)
		sleep 2
		i1=$(cpu) s1=$(date +%s%N)
		sleep 2
		i2=$(cpu) s2=$(date +%s%N)
		c0=$(cpu) t0=$(date +%s%N)
		touch "$RATE_DIR/go"
		wait
		t1=$(date +%s%N) c1=$(cpu)
		echo "rate8 window_ns=$((t1 - t0)) cpu_ns=$((c1 - c0)) settle_ns=$((s1 - s0)) settle_cpu_ns=$((i1 - i0)) rest_ns=$((s2 - s1)) rest_cpu_ns=$((i2 - i1))"' rate8 "$n" "$dir" $W_RATE >"$dir/launcher.log" 2>&1
	local made=0 i line got ok=0 lost_n per
	for i in $(seq "$n"); do
		per=$(grep -oE ' launches=[0-9]+' "$dir/w$i.log" | tail -1 | cut -d= -f2)
		made=$((made + 3 * ${per:-0}))
	done
	line=$(grep -m1 '^rate8 ' "$dir/launcher.log")
	lost_n=$(lost "$dir/launcher.log")
	if [ -n "$line" ] && [ "$made" -gt 0 ]; then
		got=$(awk -v l="$line" -v m="$made" -v lost="$lost_n" -v n="$n" 'BEGIN {
			split(l, w, " "); for (i in w) { split(w[i], kv, "="); f[kv[1]] = kv[2] }
			s = f["window_ns"] / 1e9; rate = m / s; cpu = 100 * f["cpu_ns"] / 1e9 / s
			rest = 100 * f["rest_cpu_ns"] / f["rest_ns"]; settle = 100 * f["settle_cpu_ns"] / f["settle_ns"]
			printf "%d procs %.0f launches/s, launcher %.2f%% of a core (%.2f%% at rest, %.2f%% the 2 s before): %.2f%% per 100k/s, %d lost", n, rate, cpu, rest, settle, cpu / (rate / 1e5), lost
		}')
		awk -v g="$got" 'BEGIN { split(g, w, ": "); split(w[2], v, "%"); exit !(v[1] + 0 <= 2) }' && [ "$lost_n" = 0 ] && ok=1
	else
		got="no launches counted (see $dir)"
	fi
	row rate8 "<= 2% of a core per 100k launches/s, 0 lost" "$got" "$(since "$t0")" $ok
}

# train_step: the three training steps, each measured in one process by
# steppaired.py, one after the other; one row, and their tables.
train_step() {
	local t0 w got="" ok=1 line
	t0=$(now)
	mkdir -p "$ART/train-step"
	for w in eager gpubound graph; do
		local args=(--rounds "$STEP_ROUNDS" --dwell "${STEP_DWELL:-1.5}" --tag "$w")
		case $w in
		eager) args+=(--check launch) ;;
		gpubound) args+=(--check flat --no-anchor0) ;;
		graph) args+=(--check flat --no-anchor0 --launch cuLaunchKernel --launch cuLaunchKernel_ptsz
			--launch cuLaunchKernelEx --launch cuLaunchKernelEx_ptsz --launch cuGraphLaunch --launch cuGraphLaunch_ptsz) ;;
		esac
		"$PYP" "$here/gpu-check/steppaired.py" "${args[@]}" "$ART/train-step" "$PROBE" "$XPU" "$CUDA" -- $wl "train-$w" \
			>"$ART/train-step/$w.log" 2>&1
		line=$(grep -m1 '^step ' "$ART/train-step/$w.log")
		if [ -z "$line" ]; then
			got+="$w: no result; "
			ok=0
			continue
		fi
		got+=$(awk -v l="$line" -v w="$w" 'BEGIN { split(l, f, " "); for (i in f) { split(f[i], kv, "="); v[kv[1]] = kv[2] }
			if (w == "eager") printf "%s %s ns/launch over anchor, %s runs/launch; ", w, v["ours_over_anchor_ns_per_launch"], v["launch_runs_per_launch"]
			else printf "%s %s us/step over plain (spread %s); ", w, v["ours_over_plain_us"], v["spread_us"] }')
		grep -q ' ok=1$' <<<"$line" || ok=0
		cat "$ART/train-step/steppaired-$w.txt" >>"$ART/train-step.txt" 2>/dev/null
		echo >>"$ART/train-step.txt"
	done
	row train-step "<=150 ns/launch eager; flat gpubound, graph" "${got%; }" "$(since "$t0")" $ok
}

# The launch table first, on a quiet machine; then the hangs, all at once
# (each has its own processes, ports, dump directory and time limit; the
# agent follows only its job's command line).
want overhead && overhead
want paired && paired
want rate8 && rate8
want train-step && train_step
trap 'kill -TERM $(jobs -p) 2>/dev/null' EXIT
scenario() { (trap 'stop "${PIDS[@]}"' EXIT; "$@") & }
want nccl-sleep && scenario launched nccl-sleep "$W_NCCL" "$K_NCCL"
want triton && scenario launched triton "$W_TRITON" "$K_TRITON"
want launch-blocking && scenario launched launch-blocking "$wl launch-blocking" "$K_SPIN" "$C_LAUNCH"
want queue-full && scenario launched queue-full "$wl queue-full" "$K_SPIN" "$C_LAUNCH"
want free-sync && scenario launched free-sync "$wl free-sync" "$K_SPIN" cuMemFree_v2
want queue-full-nccl && scenario launched queue-full-nccl "$wl queue-full-nccl" "$K_SPIN" "$C_LAUNCH" MASTER_PORT=29514
want ddp4 && scenario ddp4
want graph-late && scenario graph_late
{ want ddp4-watch || want ddp4-agent; } && scenario ddp4_late
wait

order=(overhead paired rate8 train-step nccl-sleep triton ddp4 graph-late ddp4-watch ddp4-agent launch-blocking queue-full free-sync queue-full-nccl)
failed=0
{
	echo "gpu-check $([ $DRY = 1 ] && echo "--dry (fake GPU testbed)" || echo "on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"), hang timeout ${T}s, $(since "$start_all") s in all"
	printf '%-12s | %-44s | %-58s | %6s | %s\n' scenario expected got seconds verdict
	for r in "${order[@]}"; do
		if [ -f "$ART/rows/$r" ]; then
			cat "$ART/rows/$r"
		elif want "$r"; then
			printf '%-12s | %-44s | %-58s | %6s | %s\n' "$r" - "no result" - FAIL
		else
			printf '%-12s | %-44s | %-58s | %6s | %s\n' "$r" - "not run (ONLY)" - skip
		fi
	done
	for f in overhead paired/paired train-step; do
		[ -f "$ART/$f.txt" ] && echo && cat "$ART/$f.txt"
	done
} | tee "$ART/table.txt"
for r in "${order[@]}"; do
	want "$r" || continue
	grep -q '| ok$' "$ART/rows/$r" 2>/dev/null || failed=$((failed + 1))
done
echo "artefacts: $ART" >&2
exit $failed

#!/usr/bin/env bash
# The demo (`make demo`): a fake 4-rank training job on the fake GPU testbed
# hangs because rank 2 skips an all-reduce of step 3. xpu_timer_launch
# detects the hang on every rank, dumps every rank's native and Python
# stacks, the stack viewer names the culprit, and /metrics shows the hang.
# Then the job is ended. Needs root (eBPF probes and ptrace).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

if [ "$(id -u)" -ne 0 ]; then
	echo "demo: run as root: the probes need CAP_BPF and CAP_PERFMON, the dumps CAP_SYS_PTRACE" >&2
	exit 1
fi
# `make demo` has done these; run alone, the script does them (both are
# quick when up to date; testbed installs missing packages first).
make -s testbed build

timeout=5
work=$(mktemp -d /tmp/xpu-timer-demo.XXXXXX)
timeline=$work/timeline
view=$work/view
log=$work/launch.log
export XPU_FAKEGPU_STORE=$work/store # where the fake NCCL's id goes
mkdir -p "$XPU_FAKEGPU_STORE"
launcher=

segments() { # the fake NCCL's shared memory of this job
	local id
	id=$(head -c 32 "$XPU_FAKEGPU_STORE/nccl_id" 2>/dev/null) || return 0
	echo "/dev/shm/xpufake-cu-$id /dev/shm/xpufake-mc-$id"
}
cleanup() {
	if [ -n "$launcher" ] && kill -0 "$launcher" 2>/dev/null; then
		kill -KILL -- "-$launcher" 2>/dev/null || true
		wait "$launcher" 2>/dev/null || true
	fi
	# shellcheck disable=SC2046
	rm -f $(segments)
	rm -rf "$XPU_FAKEGPU_STORE"
}
trap cleanup EXIT

fetch() { # curl, or Python where curl is not installed
	if command -v curl >/dev/null; then
		curl -s "$1"
	else
		python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' "$1"
	fi
}
if [ -t 1 ]; then
	say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
	say() { printf '\n== %s\n' "$*"; }
fi
# The launcher's log lines without the time stamp and component.
tidy() { sed -E 's/^time=[^ ]+ //; s/ component=xpu_timer_launch//'; }

# The fake libraries are named (--libraries) so that they are probed before
# the ranks load them: found in the ranks' maps instead, they are probed a
# moment after loading, and the ranks' first NCCL calls (the communicator's
# init) may come before the probes, leaving its id and sequence numbers
# unknown to the culprit report.
fake=testdata/fakegpu/build
libs=$PWD/$fake/libcudart.so.12,$PWD/$fake/libcuda.so.1,$PWD/$fake/libnccl.so.2

say "xpu_timer_launch --hang-timeout ${timeout}s: 4 ranks, rank 2 skips the all-reduce of step 3"
# A session of its own (setsid), so that the whole job can be ended.
setsid bin/xpu_timer_launch --hang-timeout "$timeout" --timeline-path "$timeline" --port 0 --libraries "$libs" \
	python3 testdata/fakegpu/run.py --nproc 4 --steps 30 \
	--fault skip-collective --fault-rank 2 --fault-step 3 >"$log" 2>&1 &
launcher=$!
start=$(date +%s.%N)

for _ in $(seq 1 300); do # up to 60 s
	grep -q 'msg="dumped ranks"' "$log" && break
	if ! kill -0 "$launcher" 2>/dev/null; then
		echo "demo: the launcher exited early:" >&2
		cat "$log" >&2
		exit 1
	fi
	sleep 0.2
done
if ! grep -q 'msg="dumped ranks"' "$log"; then
	echo "demo: no hang dump after 60 s:" >&2
	cat "$log" >&2
	exit 1
fi
sleep 0.3 # the marker line follows the dumps

echo "job progress (last step each rank finished):"
for r in 0 1 2 3; do
	s=$(grep -oP "^xpu-fakegpu rank=$r step=\K[0-9]+" "$log" | tail -1 || true)
	echo "  rank $r: step ${s:-none}"
done
echo "detector log:"
grep -E 'msg=(rank|hang|dump|"dumped ranks"|"hang marker written"|"serving metrics")' "$log" | tidy | sed 's/^/  /'
echo "hang decided and every rank dumped $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s after the job started (timeout $timeout s)"

say "dump files in $timeline"
ls -l "$timeline"
echo "rank 2's dump, first lines of $timeline/00002-00004.txt:"
head -n 12 "$timeline/00002-00004.txt" | sed 's/^/  /'

say "xpu_timer_stacktrace_viewer --path $timeline --out $view"
bin/xpu_timer_stacktrace_viewer --path "$timeline" --out "$view" >/dev/null 2>"$work/viewer.log" || {
	cat "$work/viewer.log" >&2
	exit 1
}
sed -n '1,/^Communicators:/p' "$view/summary.txt" | head -n -1
sed -n '/^Communicators:/,/^$/p' "$view/summary.txt"
echo "flame graphs (open in a browser):"
ls "$view"/*.svg | sed 's/^/  /'

port=$(grep -oP 'msg="serving metrics".* addr=\S*:\K[0-9]+' "$log" | head -1)
say "curl -s http://127.0.0.1:$port/metrics (hang families)"
fetch "http://127.0.0.1:$port/metrics" | grep -E '^(XPU_TIMER_COMMON_HANG|XPU_TIMER_COMMON_END_DUMP|xpu_timer_rank_hung)[{ ]'

say "ending the job (SIGTERM to xpu_timer_launch, forwarded to the job)"
kill -TERM "$launcher"
status=0
wait "$launcher" || status=$?
launcher=
echo "xpu_timer_launch exited with status $status (the job's)"
left=$(pgrep -f "testdata/fakegpu/run.py --nproc 4 --steps 30 --fault skip-collective" || true)
if [ -n "$left" ]; then
	echo "demo: processes left: $left" >&2
	exit 1
fi
echo "no process of the job is left; outputs stay in $work"

#!/bin/bash
# capture.sh FAULT OUT: runs job.py as 4 ranks on gloo with rank 2 faulty at
# step 5, waits for the hang, dumps every live rank into OUT as the agent
# names its files (RRRRR-00004.stacktrace), and stops the job. Needs root.
# The vanish fault runs the ranks without a launcher (under shells that stay),
# so that the others hang instead of being stopped.
#   CAPTURE: the capture command (default: go run ./testdata/torchjob/capture)
set -eu
fault=$1 out=$2
here=$(dirname "$(readlink -f "$0")")
root=$(readlink -f "$here/../..")
capture=${CAPTURE:-go run $root/testdata/torchjob/capture}
py=/usr/bin/python3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
mkdir -p "$out"
args=(--steps 40 --fault "$fault" --fault-rank 2 --fault-step 5 --timeout 300)
if [ "$fault" = vanish ]; then
	port=$((29600 + $$ % 300))
	setsid bash -c "for r in 0 1 2 3; do RANK=\$r WORLD_SIZE=4 LOCAL_RANK=\$r LOCAL_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
		bash -c '$py $here/job.py ${args[*]}; sleep 300' & done; wait" >"$log" 2>&1 &
else
	setsid "$py" "$here/job.py" --spawn 4 "${args[@]}" >"$log" 2>&1 &
fi
leader=$!
stop() { kill -TERM -- -"$leader" 2>/dev/null || true; sleep 3; kill -KILL -- -"$leader" 2>/dev/null || true; }
for _ in $(seq 1 240); do
	sleep 1
	if [ "$(grep -c 'step=4 done' "$log")" -ge 3 ]; then
		break
	fi
done
sleep 10 # the peers are now inside the step-5 allreduce
targets=()
while read -r rank pid; do
	if kill -0 "$pid" 2>/dev/null; then
		targets+=("$rank:$pid")
	fi
done < <(sed -n 's/.*xpu-torchjob rank=\([0-9]*\) pid=\([0-9]*\) started.*/\1 \2/p' "$log")
echo "capturing ${targets[*]}"
$capture -out "$out" -world 4 -job "torchjob-$fault" "${targets[@]}" || { stop; exit 1; }
stop
grep -o 'rank=[0-9] step=[0-9]*' "$log" | sort -t= -k3 -n | awk -F'[ =]' '{m[$2]=$4} END {for (r in m) printf "rank %s reached step %s\n", r, m[r]}' | sort

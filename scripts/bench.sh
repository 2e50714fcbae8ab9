#!/usr/bin/env bash
# Runs every benchmark once (BENCH=regexp picks some, BENCH_PKGS the
# packages, default ./...) and ends with one table of what they measured:
# each figure beside its anchor, measured in the same run (or a target),
# and their ratio.
#
# Table rows: a benchmark logs (b.Logf, or internal/benchtable.Row) lines
# holding, tab-separated,
#
#   BENCH-TABLE<TAB>name<TAB>figure<TAB>anchor<TAB>ratio
#
# figure and anchor are free text ("3055 ns", "2318 ns (empty uprobe)"),
# ratio is figure/anchor as a number, or "-" when there is none. This
# script greps those lines out of the go test output, wherever the log
# prefix puts them. go test runs with -v: without it, a benchmark's log is
# cut to its first lines and later rows would be lost.
#
# Exit status: non-zero when go test failed (a benchmark calls b.Fatal when
# it measured nothing or lost events), when no benchmark ran, or when no
# benchmark printed a table row.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
go test -v -run '^$' -bench "${BENCH:-.}" -benchtime=1x -timeout "${BENCH_TIMEOUT:-90m}" ${BENCH_PKGS:-./...} 2>&1 | tee "$out" |
	grep -v '^ok\|no test files'
status=${PIPESTATUS[0]}
set -e

echo
echo "== summary (figure, anchor, ratio = figure/anchor) =="
rows=$(grep -o $'BENCH-TABLE\t.*' "$out" | cut -f2- || true)
if [ -n "$rows" ]; then
	{
		printf 'name\tfigure\tanchor\tratio\n'
		printf '%s\n' "$rows"
	} | if command -v column >/dev/null; then column -t -s $'\t'; else cat; fi
fi

ran=$(grep -c '^Benchmark' "$out" || true)
if [ "$status" -ne 0 ] || grep -q '^--- FAIL\|^FAIL' "$out"; then
	echo "bench: a benchmark failed (see above)" >&2
	exit 1
fi
if [ "$ran" -eq 0 ]; then
	echo "bench: no benchmark matched ${BENCH:-.}: nothing was measured" >&2
	exit 1
fi
if [ -z "$rows" ]; then
	echo "bench: no benchmark printed a table row: nothing was measured" >&2
	exit 1
fi

#!/usr/bin/env bash
# Runs every test. Everything is a Go test (privileged ones included); see
# docs/testing.md. XPU_TIMER_REQUIRE_PRIVILEGED=1 turns privileged skips into failures.
#
# The packages whose tests measure detection latency against a deadline
# (ebpf, the end-to-end tests) run alone, after the rest: on a 2-core
# machine, sharing the CPU with other packages' tests delays the fake
# training processes by seconds and turns a latency check into noise.
set -euo pipefail
cd "$(dirname "$0")/.."
# gofmt, go vet and staticcheck over every module first (scripts/lint.sh).
scripts/lint.sh
# The product's module, then the modules of the deploy/ tests and of
# scripts/dist (their libraries, Helm, Kubernetes, an image library, stay
# out of the product's go.mod): tested alike.
modules=(deploy scripts/dist)
# The capture is built for x86-64 Linux; everything else builds elsewhere too
# (the capture packages then report "not supported"), and the engine, the
# viewer, the file formats and the timeline build on any OS.
GOARCH=arm64 go build ./...
GOOS=darwin go build ./timer/... ./viewer/... ./collector/format/... ./timeline/...
alone=(github.com/xpu-timer/xpu-timer/ebpf github.com/xpu-timer/xpu-timer/cmd/internal/e2e)
mapfile -t rest < <(go list ./... | grep -vxF -e "${alone[0]}" -e "${alone[1]}")
go test -count=1 -timeout 10m "${rest[@]}"
for m in "${modules[@]}"; do go -C "$m" test -count=1 -timeout 10m ./...; done
# The e2e fault matrix runs every cell once and the late-attach and
# stack-wait cases twice each (two matrix jobs at a time: about 4 and 5
# minutes on 2 cores; XPU_TIMER_MATRIX_RUNS and XPU_TIMER_E2E_RUNS for
# more); make bench (BenchmarkFaultMatrix) runs every cell twice and
# prints its detection table.
go test -count=1 -timeout 6m "${alone[0]}"
go test -count=1 -timeout 35m "${alone[1]}"

#!/usr/bin/env bash
# Runs every benchmark once; each prints the ratios it measured in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench "${BENCH:-.}" -benchtime=1x -timeout 30m ./... | grep -v '^ok\|no test files'

#!/usr/bin/env bash
# Runs every test. Everything is a Go test (privileged ones included); see
# README.md. XPU_TIMER_REQUIRE_PRIVILEGED=1 turns privileged skips into failures.
set -euo pipefail
cd "$(dirname "$0")/.."
go vet ./...
go test -count=1 -timeout 19m ./...

#!/usr/bin/env bash
# Lints every Go module of the repository (the product's, deploy/'s,
# scripts/dist's): gofmt, go vet and staticcheck, whose checks and their
# exceptions are in staticcheck.conf. make lint runs it; so does make test,
# first.
set -euo pipefail
cd "$(dirname "$0")/.."
# staticcheck, pinned: built from the Go module proxy on first use (about
# 2 minutes), then from the build cache.
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2
modules=(. deploy scripts/dist)
unformatted=$(git ls-files -z '*.go' | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
	echo "gofmt: not formatted:" $unformatted >&2
	exit 1
fi
for m in "${modules[@]}"; do
	go -C "$m" vet ./...
	go -C "$m" run "$staticcheck" ./...
done

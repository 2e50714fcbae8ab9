#!/usr/bin/env bash
# Lints every Go module of the repository (the product's, deploy/'s,
# scripts/dist's): gofmt, go vet and staticcheck, whose checks and their
# exceptions are in staticcheck.conf. make lint runs it; so does make test,
# first.
set -euo pipefail
cd "$(dirname "$0")/.."
# staticcheck and goimports, pinned: built from the Go module proxy on
# first use (about 2 minutes), then from the build cache.
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2
goimports=golang.org/x/tools/cmd/goimports@v0.52.0
modules=(. deploy scripts/dist)
unformatted=$(git ls-files -z '*.go' | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
	echo "gofmt: not formatted:" $unformatted >&2
	exit 1
fi
# Imports in three groups: the standard library, other modules, this
# module's own packages.
misordered=$(git ls-files -z '*.go' | xargs -0 go run "$goimports" -local github.com/xpu-timer/xpu-timer -l)
if [ -n "$misordered" ]; then
	echo "goimports -local github.com/xpu-timer/xpu-timer: imports not grouped:" $misordered >&2
	exit 1
fi
for m in "${modules[@]}"; do
	go -C "$m" vet ./...
	go -C "$m" run "$staticcheck" ./...
done

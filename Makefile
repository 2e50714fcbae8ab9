# xpu-timer. `make demo` runs the main job on the fake GPU testbed;
# `make test` runs every test. Both install what they need.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
export PATH := /usr/local/go/bin:$(PATH)

# Stamped into every binary (--version, xpu_timer_build_info): the nearest
# tag (docs/release.md), "dev" before the first one.
VERSION  ?= $(shell git describe --tags --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VPKG     := github.com/xpu-timer/xpu-timer/internal/version
LDFLAGS  := -X $(VPKG).Version=$(VERSION) -X $(VPKG).Revision=$(REVISION)
# Go's resolver and user lookup, not cgo's: xpu-timer-dump and the viewer
# come out static (internal/version.BuildTags says why; a test keeps the two
# equal).
GOTAGS   := netgo,osusergo

.PHONY: all build dist test lint demo bench generate check-generate testbed deps clean gpu-check gpu-check-dry

all: build

deps:
	@scripts/deps.sh

build:
	@mkdir -p $(BIN)
	$(GO) build -tags $(GOTAGS) -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# Release files in dist/ (docs/release.md): tarball, .deb, wheel, OCI image
# layout, all stamped with $(VERSION). scripts/dist is a Go module of its own
# (its image library is not the product's); DISTFLAGS=-fast compresses least.
DISTFLAGS ?=
dist: build
	@rm -rf dist
	$(GO) -C scripts/dist run . -root $(CURDIR) -bin $(CURDIR)/$(BIN) -out $(CURDIR)/dist \
		-version $(VERSION) -revision $(REVISION) $(DISTFLAGS)

testbed: deps
	@$(MAKE) -s -C testdata/fakegpu

# Rebuild the committed BPF objects with the pinned clang.
generate: deps
	@scripts/generate.sh

# Fail when the committed BPF objects differ from what the sources produce.
check-generate: deps
	@scripts/generate.sh --check

test: deps testbed
	@scripts/test.sh

# gofmt, go vet and staticcheck (pinned in the script; checks in
# staticcheck.conf) over every Go module; make test runs it first.
lint:
	@scripts/lint.sh

demo: deps testbed build
	@scripts/demo.sh

bench: deps testbed build
	@scripts/bench.sh

# The real-GPU check (scripts/gpu-check.sh): static binaries into
# $(BIN)/gpu-check/, run at once where a GPU is; elsewhere copy bin/gpu-check/
# and scripts/ to a GPU host and run scripts/gpu-check.sh run there.
# gpu-check-dry runs the same scenarios here on the fake GPU testbed.
gpu-check: deps
	@scripts/gpu-check.sh build
	@if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then scripts/gpu-check.sh run; \
	else echo "no GPU here: copy bin/gpu-check/ and scripts/ to a GPU host and run scripts/gpu-check.sh run"; fi

gpu-check-dry: deps testbed
	@scripts/gpu-check.sh build
	@scripts/gpu-check.sh run --dry

clean:
	rm -rf $(BIN) dist
	@$(MAKE) -s -C testdata/fakegpu clean

module github.com/xpu-timer/xpu-timer/scripts/dist

go 1.26.8

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/xpu-timer/xpu-timer v0.0.0
)

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.24.0 // indirect
)

// The product's packages (internal/privileged, collector/metrics, ...) from
// this checkout, never a published version.
replace github.com/xpu-timer/xpu-timer => ../..

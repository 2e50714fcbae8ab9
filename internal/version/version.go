// Package version holds what `make build` stamps into every binary from git:
//
//	go build -ldflags "-X github.com/xpu-timer/xpu-timer/internal/version.Version=v0.1.0 \
//	                   -X github.com/xpu-timer/xpu-timer/internal/version.Revision=$(git rev-parse HEAD)"
//
// A plain `go build` leaves Version "dev" and Revision "unknown".
package version

import (
	"fmt"
	"runtime"
)

// BuildTags are the build tags `make build` gives every binary (the
// Makefile's GOTAGS): Go's own DNS resolver and user lookup instead of the
// C library's, so that no binary links cgo for them. xpu-timer-dump and
// the viewer are then static: they run in any container whatever its C
// library, and a one-shot dump starts without the dynamic loader, libc
// and cgo's thread set-up (a tenth of a first dump of a torch rank,
// docs/measurements.md). xpu-timer and xpu_timer_launch still link cgo, for NVML.
// Tests that build a binary to measure or run it build with these.
const BuildTags = "netgo,osusergo"

// Stamped at link time; see the package comment.
var (
	Version  = "dev"     // `git describe --tags --dirty`, "dev" without a tag
	Revision = "unknown" // the full commit hash
)

// GoVersion is the Go release the binary was built with.
func GoVersion() string { return runtime.Version() }

// String is the one-line version every binary prints for --version:
// "v0.1.0 (revision 0123abc, go1.26.8, linux/amd64)".
func String() string {
	rev := Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return fmt.Sprintf("%s (revision %s, %s, %s/%s)", Version, rev, GoVersion(), runtime.GOOS, runtime.GOARCH)
}

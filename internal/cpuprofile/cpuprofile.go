// Package cpuprofile writes a Go CPU profile of a whole run of one of our
// binaries when XPU_TIMER_CPU_PROFILE names a file: how the launcher's or
// agent's own CPU time splits, where a node's only tool is the binary
// (make gpu-check's rate8 reads it; `go tool pprof BINARY FILE` shows it).
// A "%p" in the name is replaced by the process id, so that several of our
// processes given the same name write one file each.
package cpuprofile

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// Env names the profile's file.
const Env = "XPU_TIMER_CPU_PROFILE"

// Start starts the profile when Env is set and returns what stops it and
// closes the file; a profile that cannot start is reported on stderr and
// the run goes on without it.
func Start() (stop func()) {
	path := os.Getenv(Env)
	if path == "" {
		return func() {}
	}
	path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v (no CPU profile)\n", Env, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		fmt.Fprintf(os.Stderr, "%s: %v (no CPU profile)\n", Env, err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", Env, err)
		}
	}
}

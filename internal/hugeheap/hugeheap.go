// Package hugeheap backs the Go heap of a short-lived command with
// transparent huge pages.
//
// A one-shot dump fills about 10 MB of fresh heap in a tenth of a second.
// Each 4 KiB page of it is a page fault, and on a VM a fault costs
// microseconds (BenchmarkFault measures it): the faults were a large share
// of a first dump's time (docs/measurements.md). The kernel hands out transparent huge pages only to
// mappings that ask for them when its mode is "madvise" (the common
// default), and the Go runtime no longer asks; one 2 MiB page is one
// fault. A long-lived process, the agent, has no use for this: its heap
// is warm.
package hugeheap

import (
	"bytes"
	"os"
)

// modeFile holds the kernel's transparent huge page mode; tests point it
// elsewhere.
var modeFile = "/sys/kernel/mm/transparent_hugepage/enabled"

// Mode is the kernel's transparent huge page mode: "always", "madvise",
// "never", or "" when it cannot be read.
func Mode() string {
	b, err := os.ReadFile(modeFile)
	if err != nil {
		return ""
	}
	// "always [madvise] never": the bracketed one is in force.
	i, j := bytes.IndexByte(b, '['), bytes.IndexByte(b, ']')
	if i < 0 || j < i {
		return ""
	}
	return string(b[i+1 : j])
}

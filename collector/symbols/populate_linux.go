package symbols

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// populated returns a zeroed buffer of n bytes with every page of it mapped
// by one madvise. A first dump fills megabytes of fresh memory, and a page
// fault costs several microseconds on a VM (about 10 here: 5,000 faults
// were half of a first dump); MADV_POPULATE_WRITE maps the pages at a
// fraction of that. Before Linux 5.14 it is refused and pages fault as
// usual. Memory of a small buffer, shared with other objects, is left be.
func populated(n int) []byte {
	b := make([]byte, n)
	if n < populateMin {
		return b
	}
	page := os.Getpagesize()
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := int(-start & uintptr(page-1)) // to the first page boundary
	if hi := lo + (n-lo)&^(page-1); hi > lo {
		unix.Madvise(b[lo:hi], unix.MADV_POPULATE_WRITE)
	}
	return b
}

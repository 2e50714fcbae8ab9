package hugeheap

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// page is the size of a transparent huge page on x86-64 and arm64 (4 KiB
// base pages).
const page = 2 << 20

// Reserve asks for huge pages under the next n bytes of the Go heap, and
// reports whether it asked: only in mode "madvise" (in "always" they
// come unasked, in "never" not at all) and for n of at least one huge
// page. It takes the n bytes from the runtime, marks the 2 MiB pages they
// cover, and gives them back at once (one collection of a heap still
// small), so that the allocations that follow land there and not in
// fresh, unmarked arena. The memory counts in the resident size only as
// the heap touches it, a huge page at a time: a dump's peak RSS grew by
// 2 MB.
//
// The kernel may compact memory to find a huge page (its defrag setting);
// where it finds none, the page is an ordinary one.
func Reserve(n int) bool {
	if n < page || Mode() != "madvise" {
		return false
	}
	b := make([]byte, n)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo, hi := start&^(page-1), (start+uintptr(n))&^(page-1)
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_HUGEPAGE)
	runtime.KeepAlive(b) // then garbage
	runtime.GC()
	return errno == 0
}

package symbols

import (
	"io"
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

// mapFile maps n bytes of r's file from off, read-only and outside the Go
// heap, and returns them and what unmaps them; nil when r is no file or
// mmap fails. The pages are the page cache's own: nothing is copied, and
// no fresh memory is faulted in (10 µs a page on a VM). Reading them after
// the file is truncated faults (SIGBUS): see faultSafe.
func mapFile(r io.ReaderAt, off int64, n int) ([]byte, func()) {
	f := osFile(r)
	if f == nil || n <= 0 || off < 0 {
		return nil, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, nil
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	var m []byte
	cerr := rc.Control(func(fd uintptr) {
		m, err = unix.Mmap(int(fd), start, int(off-start)+n, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_POPULATE)
	})
	if cerr != nil || err != nil {
		return nil, nil
	}
	return m[off-start:], func() { unix.Munmap(m) }
}

// osFile returns the file whose contents r is, or nil.
func osFile(r io.ReaderAt) *os.File {
	switch r := r.(type) {
	case *os.File:
		return r
	case readAt:
		return osFile(r.ReaderAt)
	}
	return nil
}

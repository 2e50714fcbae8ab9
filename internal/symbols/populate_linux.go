package symbols

import (
	"debug/elf"
	"io"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/hugeheap"
	"github.com/xpu-timer/xpu-timer/internal/rawfile"
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

// hugePage is the size of a transparent huge page on x86-64.
const hugePage = 2 << 20

// hugeMin is the least size of a buffer that offHeap makes.
const hugeMin = 512 << 10

// hugePages reports whether the kernel hands out transparent huge pages
// to a mapping that asks for them.
var hugePages = sync.OnceValue(func() bool {
	m := hugeheap.Mode()
	return m == "always" || m == "madvise"
})

// offHeap returns a zeroed buffer of n bytes outside the Go heap, in
// transparent huge pages, and what unmaps it; nil when n is below
// hugeMin, the kernel has huge pages off, or mmap fails. A first dump
// inflates megabytes of libc's DWARF: on the Go heap those are a thousand
// 4 KiB pages, each faulted in (or populated) and cleared, which on a VM
// cost more than the inflating itself; a 2 MiB page is one fault. The
// pages are mapped on another goroutine, from the first: the caller goes
// on at once (clearing libc's 6 MB was on the critical path of a dump
// when done here), and whoever fills the buffer from its start finds
// them there before it. The buffer must not be used
// once unmapped: its owner unmaps it when it is itself unreachable (see
// openSection).
func offHeap(n int) ([]byte, func()) {
	if n < hugeMin || !hugePages() {
		return nil, nil
	}
	size := (n + hugePage - 1) &^ (hugePage - 1)
	// Mapped a huge page larger, then cut to the first huge page boundary.
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size+hugePage), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil
	}
	head := int(-uintptr(p) & (hugePage - 1))
	start := unsafe.Add(p, head)
	if head > 0 {
		unix.MunmapPtr(p, uintptr(head))
	}
	if tail := hugePage - head; tail > 0 {
		unix.MunmapPtr(unsafe.Add(start, size), uintptr(tail))
	}
	b := unsafe.Slice((*byte)(start), size)
	unix.Madvise(b, unix.MADV_HUGEPAGE)
	mapped := make(chan struct{})
	go func() {
		unix.Madvise(b, unix.MADV_POPULATE_WRITE) // else faulted in as written
		close(mapped)
	}()
	return b[:n:n], func() {
		<-mapped
		unix.MunmapPtr(start, uintptr(size))
	}
}

// mapFile maps n bytes of r's file from off, read-only and outside the Go
// heap, and returns them and what unmaps them; nil when r is no file or
// mmap fails. The pages are the page cache's own: nothing is copied, and
// no fresh memory is faulted in (microseconds a page on a VM). Reading them after
// the file is truncated faults (SIGBUS): see faultSafe.
func mapFile(r io.ReaderAt, off int64, n int, populate bool) ([]byte, func()) {
	f := fileOf(r)
	if f == nil || n <= 0 || off < 0 {
		return nil, nil
	}
	page := int64(os.Getpagesize())
	start := off &^ (page - 1)
	var m []byte
	var err error
	cerr := f.Control(func(fd int) {
		flags := unix.MAP_PRIVATE
		if populate {
			flags |= unix.MAP_POPULATE
		}
		m, err = unix.Mmap(fd, start, int(off-start)+n, unix.PROT_READ, flags)
	})
	if cerr != nil || err != nil {
		return nil, nil
	}
	return m[off-start:], func() { unix.Munmap(m) }
}

// mapSection maps s, an uncompressed section, from the file it was read
// from, as mapFile does; nil when it is compressed or no file's.
func mapSection(s *elf.Section, populate bool) ([]byte, func()) {
	if s.Flags&elf.SHF_COMPRESSED != 0 || s.Type == elf.SHT_NOBITS || s.ReaderAt == nil {
		return nil, nil
	}
	n, err := elfcheck.Size(s)
	if err != nil || n < populateMin {
		return nil, nil
	}
	// debug/elf reads a section through a SectionReader at its offset,
	// over (elfcheck's) SectionReader over the file.
	r, off := io.ReaderAt(s.ReaderAt), int64(0)
	for {
		sr, ok := r.(*io.SectionReader)
		if !ok {
			break
		}
		outer, base, _ := sr.Outer()
		r, off = outer, off+base
	}
	return mapFile(r, off, n, populate)
}

// fileOf returns the open file whose contents r is, or nil.
func fileOf(r io.ReaderAt) *rawfile.File {
	switch r := r.(type) {
	case *rawfile.File:
		return r
	case readAt:
		return fileOf(r.ReaderAt)
	case interface{ Underlying() io.ReaderAt }: // elfcheck.Salvage's, over the file
		return fileOf(r.Underlying())
	}
	return nil
}

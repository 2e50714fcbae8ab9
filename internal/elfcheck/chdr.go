package elfcheck

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// Chdr is the compression header that starts a compressed section
// (Elf64_Chdr, Elf32_Chdr).
type Chdr struct {
	Type      elf.CompressionType
	Size      uint64 // inflated, as claimed
	Addralign uint64
	Len       int // of the header itself: the compressed stream follows
}

// chdrSize is the size of a compression header of class.
func chdrSize(class elf.Class) int {
	if class == elf.ELFCLASS32 {
		return 12 // type, size, alignment
	}
	return 24 // type, reserved, size, alignment
}

// ReadChdr reads the compression header at the start of b, the first
// bytes of a compressed section of n bytes in a file of class and order,
// and checks its claims: a kind debug/elf inflates (zlib or zstd), a size
// at most MaxRatio times the section's and within MaxSection, an
// alignment that is a power of two. What it refuses, debug/elf would
// believe: it allocates the claimed size before inflating.
func ReadChdr(b []byte, class elf.Class, order binary.ByteOrder, n uint64) (Chdr, error) {
	h := Chdr{Len: chdrSize(class)}
	if len(b) < h.Len || n < uint64(h.Len) {
		return h, fmt.Errorf("compression header of %d bytes, less than %d: %w", min(uint64(len(b)), n), h.Len, ErrCorrupt)
	}
	h.Type = elf.CompressionType(order.Uint32(b))
	if class == elf.ELFCLASS32 {
		h.Size, h.Addralign = uint64(order.Uint32(b[4:])), uint64(order.Uint32(b[8:]))
	} else {
		h.Size, h.Addralign = order.Uint64(b[8:]), order.Uint64(b[16:])
	}
	switch {
	case h.Type != elf.COMPRESS_ZLIB && h.Type != elf.COMPRESS_ZSTD:
		return h, fmt.Errorf("compressed by unknown kind %d: %w", uint32(h.Type), ErrCorrupt)
	case h.Size/MaxRatio > n-uint64(h.Len):
		return h, fmt.Errorf("compression header claims %d bytes from %d: %w", h.Size, n, ErrCorrupt)
	case h.Size > MaxSection:
		return h, fmt.Errorf("compression header claims %d bytes, more than %d: %w", h.Size, MaxSection, ErrTooLarge)
	case h.Addralign&(h.Addralign-1) != 0:
		return h, fmt.Errorf("compression header aligns to %d: %w", h.Addralign, ErrCorrupt)
	}
	return h, nil
}

//go:build !linux

package symbols

import (
	"debug/elf"
	"io"
)

// populated returns a zeroed buffer of n bytes.
func populated(n int) []byte { return make([]byte, n) }

// mapFile maps nothing here: the caller reads the file.
func mapFile(r io.ReaderAt, off int64, n int, populate bool) ([]byte, func()) { return nil, nil }

// offHeap makes no buffer here: the caller uses the Go heap.
func offHeap(n int) ([]byte, func()) { return nil, nil }

// mapSection maps nothing here: the caller reads the section.
func mapSection(s *elf.Section, populate bool) ([]byte, func()) { return nil, nil }

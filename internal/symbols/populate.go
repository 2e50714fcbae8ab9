package symbols

import (
	"debug/elf"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
)

// populateMin is the least size of a buffer that populated maps at once:
// below it a buffer may share its pages with other objects.
const populateMin = 64 << 10

// sectionBytes returns the contents of s, an uncompressed section read into a
// buffer of populated memory (see populated), else as debug/elf reads it;
// a section over elfcheck.MaxSection is refused.
func sectionBytes(s *elf.Section) ([]byte, error) {
	size, err := elfcheck.Size(s)
	if err != nil {
		return nil, err
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 || s.ReaderAt == nil || size < populateMin {
		return s.Data()
	}
	b := populated(size)
	if _, err := s.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// sectionMapped returns s mapped from its file (mapSection), with what
// unmaps it, else read (sectionBytes) with a nil unmap.
func sectionMapped(s *elf.Section, populate bool) (b []byte, unmap func(), err error) {
	if b, unmap = mapSection(s, populate); b != nil {
		return b, unmap, nil
	}
	b, err = sectionBytes(s)
	return b, nil, err
}

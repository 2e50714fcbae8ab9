package symbols

import "debug/elf"

// populateMin is the least size of a buffer that populated maps at once:
// below it a buffer may share its pages with other objects.
const populateMin = 64 << 10

// sectionBytes returns the contents of s, an uncompressed section read into a
// buffer of populated memory (see populated), else as debug/elf reads it.
func sectionBytes(s *elf.Section) ([]byte, error) {
	if s.Flags&elf.SHF_COMPRESSED != 0 || s.ReaderAt == nil || s.Type == elf.SHT_NOBITS || s.Size < populateMin || s.Size > 1<<31 {
		return s.Data()
	}
	b := populated(int(s.Size))
	if _, err := s.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

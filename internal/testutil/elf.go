package testutil

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
)

// Section is one section of an ELF file ELF writes.
type Section struct {
	Name    string
	Type    elf.SectionType
	Flags   elf.SectionFlag
	Addr    uint64
	Link    uint32
	Entsize uint64
	Data    []byte
}

// ELF returns a little-endian x86-64 ELF64 shared object holding sections
// (a null section first, the name table last) and one PT_LOAD segment
// covering the file: small crafted libraries for tests of what reads them.
func ELF(sections ...Section) []byte {
	const ehsize, phsize, shsize = 64, 56, 64
	all := append([]Section{{}}, sections...)
	var names bytes.Buffer
	names.WriteByte(0)
	nameOff := make([]uint32, len(all)+1)
	for i, s := range all {
		if s.Name != "" {
			nameOff[i] = uint32(names.Len())
			names.WriteString(s.Name + "\x00")
		}
	}
	nameOff[len(all)] = uint32(names.Len())
	names.WriteString(".shstrtab\x00")
	all = append(all, Section{Name: ".shstrtab", Type: elf.SHT_STRTAB, Data: names.Bytes()})

	le := binary.LittleEndian
	body := bytes.Buffer{}
	offs := make([]uint64, len(all))
	for i, s := range all {
		for (ehsize+phsize+body.Len())%8 != 0 {
			body.WriteByte(0)
		}
		offs[i] = uint64(ehsize + phsize + body.Len())
		if s.Type != elf.SHT_NOBITS {
			body.Write(s.Data)
		}
	}
	for (ehsize+phsize+body.Len())%8 != 0 {
		body.WriteByte(0)
	}
	shoff := uint64(ehsize + phsize + body.Len())
	size := shoff + uint64(len(all))*shsize

	out := make([]byte, ehsize+phsize, size)
	copy(out, elf.ELFMAG)
	out[elf.EI_CLASS], out[elf.EI_DATA], out[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le.PutUint16(out[16:], uint16(elf.ET_DYN))
	le.PutUint16(out[18:], uint16(elf.EM_X86_64))
	le.PutUint32(out[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(out[32:], ehsize) // e_phoff
	le.PutUint64(out[40:], shoff)
	le.PutUint16(out[52:], ehsize)
	le.PutUint16(out[54:], phsize)
	le.PutUint16(out[56:], 1)
	le.PutUint16(out[58:], shsize)
	le.PutUint16(out[60:], uint16(len(all)))
	le.PutUint16(out[62:], uint16(len(all)-1))
	ph := out[ehsize:]
	le.PutUint32(ph[0:], uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_X))
	le.PutUint64(ph[32:], size) // p_filesz
	le.PutUint64(ph[40:], size) // p_memsz
	le.PutUint64(ph[48:], 0x1000)
	out = append(out, body.Bytes()...)
	for i, s := range all {
		var sh [shsize]byte
		le.PutUint32(sh[0:], nameOff[i])
		le.PutUint32(sh[4:], uint32(s.Type))
		le.PutUint64(sh[8:], uint64(s.Flags))
		le.PutUint64(sh[16:], s.Addr)
		le.PutUint64(sh[24:], offs[i])
		le.PutUint64(sh[32:], uint64(len(s.Data)))
		le.PutUint32(sh[40:], s.Link)
		le.PutUint64(sh[48:], 1)
		le.PutUint64(sh[56:], s.Entsize)
		out = append(out, sh[:]...)
	}
	return out
}

// Compressed returns data zlib-compressed behind an Elf64_Chdr claiming
// claim bytes inflated: the contents of a SHF_COMPRESSED section.
func Compressed(claim uint64, data []byte) []byte {
	var b bytes.Buffer
	var hdr [24]byte
	binary.LittleEndian.PutUint32(hdr[0:], uint32(elf.COMPRESS_ZLIB))
	binary.LittleEndian.PutUint64(hdr[8:], claim)
	binary.LittleEndian.PutUint64(hdr[16:], 1)
	b.Write(hdr[:])
	w, _ := zlib.NewWriterLevel(&b, zlib.BestSpeed)
	w.Write(data)
	w.Close()
	return b.Bytes()
}

// Symbol is one entry of a symbol table Symbols writes.
type Symbol struct {
	Name        string
	Type        elf.SymType
	Value, Size uint64
}

// Symbols returns an ELF64 symbol table of syms (global, defined in
// section 1) after the null symbol, and its string table.
func Symbols(syms ...Symbol) (symtab, strtab []byte) {
	strtab = []byte{0}
	symtab = make([]byte, elf.Sym64Size, (len(syms)+1)*elf.Sym64Size)
	for _, s := range syms {
		var e [elf.Sym64Size]byte
		binary.LittleEndian.PutUint32(e[0:], uint32(len(strtab)))
		e[4] = byte(elf.STB_GLOBAL)<<4 | byte(s.Type)
		binary.LittleEndian.PutUint16(e[6:], 1)
		binary.LittleEndian.PutUint64(e[8:], s.Value)
		binary.LittleEndian.PutUint64(e[16:], s.Size)
		symtab = append(symtab, e[:]...)
		strtab = append(append(strtab, s.Name...), 0)
	}
	return symtab, strtab
}

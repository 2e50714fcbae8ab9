package symbols

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/go-delve/delve/pkg/dwarf/frame"
	"github.com/ianlancetaylor/demangle"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/rawfile"
)

// ErrNoFDE reports that an object has no call frame information for an address.
var ErrNoFDE = errors.New("no call frame information")

// Object is one parsed ELF file (a library, an executable or the vDSO).
// It is parsed lazily: opening reads only the headers; the symbol tables and
// call frame information are read on the first lookup, the DWARF line tables
// on the first line lookup. An Object is safe for concurrent use.
type Object struct {
	Path    string // the path as the process maps it, or "[vdso]"
	BuildID string // hex, "" when the file has none

	open  func() (io.ReaderAt, io.Closer, error) // re-opens the file's contents
	size  int64                                  // of the file: what parsing it may cost
	loads []segment

	symOnce sync.Once
	symErr  error
	syms    []sym // function symbols sorted by address
	strtab  [][]byte
	// strMapped says a table of strtab is the file's pages (mapSection),
	// unmapped with the object.
	strMapped bool

	pltAt    []span // the PLT sections, where only PLT entries lie
	pltOnce  sync.Once
	plt      []sym // PLT entries, by address, named in pltNames
	pltNames []byte

	nameOnce sync.Once
	byName   map[string]int // symbol name without version -> index into syms

	cfiOnce sync.Once
	cfiErr  error
	eh      *ehIndex                      // .eh_frame through its search table; nil when parsed whole
	fdes    frame.FrameDescriptionEntries // .eh_frame parsed whole, and .debug_frame

	lineOnce  sync.Once
	lines     *lineTable  // nil when there is no DWARF
	lineErr   error       // why lines is nil, when the DWARF could not be read
	linesRead atomic.Bool // lineOnce has run: lines and lineErr are set

	mem atomic.Int64 // bytes of memory what was read so far holds (see Cache)

	// damage is what of the file (its headers: elfcheck.Salvage; its
	// debug file) could not be trusted and was left out, one line each,
	// guarded by damageMu; namesFrom says which table named its
	// functions (set with the symbols).
	damageMu  sync.Mutex
	damage    []string
	namesFrom string
}

// note adds a line to o's damage, once.
func (o *Object) note(line string) {
	o.damageMu.Lock()
	defer o.damageMu.Unlock()
	if !slices.Contains(o.damage, line) {
		o.damage = append(o.damage, line)
	}
}

// damaged reports whether anything of o's file was left out.
func (o *Object) damaged() bool {
	o.damageMu.Lock()
	defer o.damageMu.Unlock()
	return len(o.damage) > 0
}

// Damage says what of o's file could not be trusted and was left out, and
// where its functions' names came from then, or why they could not be
// read ("" for a sound file): the reason a dump gives for names and lines
// it lacks. It reads o's symbols if they are not yet, not its debug
// information: what failed there is said once something read it.
func (o *Object) Damage() string {
	err := o.loadSymbols()
	o.damageMu.Lock()
	lines := slices.Clone(o.damage)
	o.damageMu.Unlock()
	// The debug information says what went wrong with it only once read:
	// a dump that named its frames from the symbol tables did not read it.
	if o.linesRead.Load() {
		if lt := o.lines; lt != nil {
			lt.mu.Lock()
			if lt.err != nil {
				lines = append(lines, lt.err.Error())
			}
			lt.mu.Unlock()
		} else if o.lineErr != nil {
			lines = append(lines, o.lineErr.Error())
		}
	}
	if len(lines) == 0 {
		return ""
	}
	switch {
	case err != nil:
		lines = append(lines, err.Error())
	case o.namesFrom == "":
		lines = append(lines, "no function names")
	default:
		lines = append(lines, "names from "+o.namesFrom)
	}
	return strings.Join(lines, "; ")
}

// Bytes returns about how much memory the object holds: the symbol and
// string tables, call frame information, the debug sections read (their
// inflated size) and what was decoded from them. It grows as lookups read
// more.
func (o *Object) Bytes() int64 { return o.mem.Load() }

// span is an address range [lo, hi).
type span struct{ lo, hi uint64 }

// segment is one PT_LOAD program header.
type segment struct{ vaddr, off, filesz, memsz uint64 }

// sym is a function symbol; the name stays in its string table until looked up.
type sym struct {
	addr, size uint64
	name       uint32 // offset into that string table
	tab        uint8  // index into Object.strtab
	global     bool   // 24 bytes in all, in this order (32 with name last)
}

// eagerFile is the size up to which a file's symbols, call frame
// information and debug information are read when its headers are: every
// object a dump resolves lies on a stack and needs all three, and for a
// small file opening and parsing it again costs more than reading them.
// A larger file is read a part at a time, as needed, and so is what a
// small one keeps in a separate debug file.
const eagerFile = 4 << 20

// smallFile is the size up to which a file is read whole, at once, to be
// parsed: a read per section costs more.
const smallFile = 256 << 10

// openObject reads an ELF file's headers, and the rest of a file of up to
// eagerFile bytes (size): its debug information too when lines says that
// its lookups will want source lines. open must return the same contents
// each time it is called.
func openObject(path string, size int64, open func() (io.ReaderAt, io.Closer, error), lines bool) (*Object, error) {
	r, c, err := open()
	if err != nil {
		return nil, err
	}
	if size <= smallFile {
		// One read instead of one per section and header.
		b := make([]byte, size)
		_, err := r.ReadAt(b, 0)
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		r, c = bytes.NewReader(b), io.NopCloser(nil)
	}
	f, damage, err := elfcheck.Salvage(r, size)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("parse elf %s: %w", path, err)
	}
	o := &Object{Path: path, open: open, size: size, damage: damage}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			o.loads = append(o.loads, segment{p.Vaddr, p.Off, p.Filesz, p.Memsz})
		}
	}
	o.BuildID = buildID(f)
	if size > eagerFile {
		c.Close()
		return o, nil
	}
	o.cfiOnce.Do(func() { o.cfiFrom(f, true) })
	// What lies in a separate debug file (libc's symbols and DWARF, say:
	// megabytes, compressed) is left for later, so that the unwinder,
	// which needs only the call frame information, is not kept waiting.
	ownSyms := f.Section(".symtab") != nil
	ownLines := f.Section(".debug_info") != nil && f.Section(".debug_line") != nil
	separate := !(ownSyms && ownLines) && o.mayHaveDebugFile(f)
	if !separate || ownSyms {
		o.symOnce.Do(func() { o.symbolsFrom(f) })
	}
	if lines && (!separate || ownLines) {
		o.readLines(func() { o.linesFrom(f, readAt{r, c}) }) // closes c
	} else {
		c.Close()
	}
	return o, nil
}

func fileOpener(path string) func() (io.ReaderAt, io.Closer, error) {
	return func() (io.ReaderAt, io.Closer, error) {
		f, err := rawfile.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return f, f, nil
	}
}

func bytesOpener(b []byte) func() (io.ReaderAt, io.Closer, error) {
	return func() (io.ReaderAt, io.Closer, error) {
		return bytes.NewReader(b), io.NopCloser(nil), nil
	}
}

// buildID returns the GNU build-id note in hex, or "": from the note
// sections, else, in a file without them (its section headers left out),
// from the PT_NOTE segments.
func buildID(f *elf.File) string {
	notes := false
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		notes = true
		b, err := sectionBytes(s)
		if err != nil {
			continue
		}
		if id := buildIDNote(f, b); id != "" {
			return id
		}
	}
	if notes {
		return ""
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxNotes {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			continue
		}
		if id := buildIDNote(f, b); id != "" {
			return id
		}
	}
	return ""
}

// maxNotes bounds a PT_NOTE segment read for its build-id: real ones are
// tens of bytes.
const maxNotes = 64 << 10

// buildIDNote returns the GNU build-id of the notes b, in hex, or "".
func buildIDNote(f *elf.File, b []byte) string {
	for len(b) >= 12 {
		namesz := f.ByteOrder.Uint32(b[0:])
		descsz := f.ByteOrder.Uint32(b[4:])
		typ := f.ByteOrder.Uint32(b[8:])
		nameEnd := 12 + align4(uint64(namesz))
		descEnd := nameEnd + align4(uint64(descsz))
		if descEnd > uint64(len(b)) {
			break
		}
		if typ == 3 && namesz == 4 && string(b[12:15]) == "GNU" {
			return fmt.Sprintf("%x", b[nameEnd:nameEnd+uint64(descsz)])
		}
		b = b[descEnd:]
	}
	return ""
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// Vaddr converts a file offset of a mapping into the ELF virtual address it
// was linked at, using the PT_LOAD segment holding that offset. The second
// result is false when no segment holds it.
func (o *Object) vaddrDelta(off uint64) (uint64, bool) {
	for _, s := range o.loads {
		if off >= s.off&^0xfff && off < s.off+s.filesz {
			return s.vaddr - s.off, true
		}
	}
	return 0, false
}

// parse opens o's file again and parses its headers; contents holds the
// file's contents and closes them.
func (o *Object) parse() (f *elf.File, contents file, err error) {
	r, c, err := o.open()
	if err != nil {
		return nil, nil, err
	}
	if f, _, err = elfcheck.Salvage(r, o.size); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("parse elf %s: %w", o.Path, err)
	}
	return f, readAt{r, c}, nil
}

func (o *Object) loadSymbols() error {
	o.symOnce.Do(func() {
		f, c, err := o.parse()
		if err != nil {
			o.symErr = err
			return
		}
		defer c.Close()
		o.symbolsFrom(f)
	})
	return o.symErr
}

// symbolsFrom reads the symbol tables of f, o's file, or of its separate
// debug file when f has none, and the dynamic symbol table through the
// dynamic segment, as ld.so reads it, when f's section headers give none
// (they were left out, or lie). Called once, from symOnce.
func (o *Object) symbolsFrom(f *elf.File) {
	defer func() {
		if r := recover(); r != nil {
			o.symErr = fmt.Errorf("read symbols of %s: %w", o.Path, recovered(r))
		}
	}()
	o.addSymbols(f, "")
	o.pltAt = pltSections(f)
	if len(o.syms) == 0 || f.Section(".symtab") == nil {
		// A stripped file: its separate debug file may hold .symtab.
		if df := o.debugFile(f); df != nil {
			o.addSymbols(df.File, " of "+df.path)
			df.Close()
		}
	}
	if sectionOfType(f, elf.SHT_DYNSYM) == nil {
		symtab, strtab, err := elfcheck.DynamicSymbols(f, o.size)
		if err == nil {
			if len(f.Sections) == 0 && !o.damaged() {
				o.note("no section headers")
			}
			o.addTable(f.ByteOrder, symtab, strtab, "the dynamic segment")
		} else if !errors.Is(err, elfcheck.ErrNoDynamic) || o.damaged() {
			o.note(fmt.Sprintf("dynamic segment: %v", err))
		}
	}
	sortSyms(o.syms)
	n := cap(o.syms) * int(unsafe.Sizeof(sym{}))
	for _, t := range o.strtab {
		n += cap(t)
	}
	o.mem.Add(int64(n))
}

// addSymbols appends the function symbols of f's .symtab and .dynsym
// (whose file is named by where). A table is read where the file lies,
// mapped (see mapSection), not copied: a large library's is megabytes
// of fresh memory for one pass, and the slice of symbols is sized in a
// first pass, not grown. A file truncated while mapped faults;
// symbolsFrom recovers.
func (o *Object) addSymbols(f *elf.File, where string) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		s := sectionOfType(f, typ)
		if s == nil || f.Class != elf.ELFCLASS64 || len(o.strtab) >= 255 {
			continue
		}
		if s.Link >= uint32(len(f.Sections)) {
			o.note(fmt.Sprintf("%s%s: names in section %d of %d: not read", s.Name, where, s.Link, len(f.Sections)))
			continue
		}
		if t := f.Sections[s.Link].Type; t != elf.SHT_STRTAB {
			o.note(fmt.Sprintf("%s%s: names in a section of type %v: not read", s.Name, where, t))
			continue
		}
		// The names are mapped for the object's life: a dump reads a few
		// of libtorch's 2.7 MB. A truncated file faults: see symName.
		strs, unmapStrs, err := sectionMapped(f.Sections[s.Link], false)
		if err != nil {
			continue
		}
		if unmapStrs != nil {
			o.strMapped = true
			runtime.AddCleanup(o, func(unmap func()) { unmap() }, unmapStrs)
		}
		data, unmap, err := sectionMapped(s, true) // read whole, at once
		if err != nil {
			continue
		}
		if unmap != nil {
			defer unmap() // at the end, or when a fault panics
		}
		o.addTable(f.ByteOrder, data, strs, s.Name+where)
	}
}

// addTable appends the function symbols of data, an ELF64 symbol table
// whose names strs holds, which from names (for namesFrom). The slice of
// symbols is sized in a first pass, not grown.
func (o *Object) addTable(order binary.ByteOrder, data, strs []byte, from string) {
	if len(o.strtab) >= 255 {
		return
	}
	tab := uint8(len(o.strtab))
	o.strtab = append(o.strtab, strs)
	funcs := func(yield func(e []byte) bool) {
		for i := elf.Sym64Size; i+elf.Sym64Size <= len(data); i += elf.Sym64Size {
			e := data[i : i+elf.Sym64Size]
			t := elf.SymType(e[4] & 0xf)
			if (t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC) || order.Uint16(e[6:]) == uint16(elf.SHN_UNDEF) || order.Uint64(e[8:]) == 0 {
				continue
			}
			if !yield(e) {
				return
			}
		}
	}
	n := 0
	for range funcs {
		n++
	}
	if n > 0 && o.namesFrom == "" {
		o.namesFrom = from
	}
	o.syms = slices.Grow(o.syms, n)
	for e := range funcs {
		o.syms = append(o.syms, sym{addr: order.Uint64(e[8:]), size: order.Uint64(e[16:]), tab: tab,
			name: order.Uint32(e[0:]), global: elf.SymBind(e[4]>>4) != elf.STB_LOCAL})
	}
}

// pltSections returns where f's PLT sections lie.
func pltSections(f *elf.File) []span {
	var out []span
	for _, name := range pltNames {
		if s := f.Section(name); s != nil && s.Type == elf.SHT_PROGBITS && s.Size > 0 {
			out = append(out, span{s.Addr, s.Addr + s.Size})
		}
	}
	return out
}

var pltNames = []string{".plt", ".plt.sec", ".plt.got"}

// loadPLT names o's PLT entries, once: a stack seldom stops in one, and
// a large library (libtorch_cpu.so) has 15,000 of them, named through
// 35,000 dynamic symbols and 170,000 relocations.
func (o *Object) loadPLT() {
	f, c, err := o.parse()
	if err != nil {
		return
	}
	defer c.Close()
	s := sectionOfType(f, elf.SHT_DYNSYM)
	if s == nil || s.Link >= uint32(len(f.Sections)) {
		return
	}
	dynsym, err := sectionBytes(s)
	if err != nil {
		return
	}
	o.plt, o.pltNames = plt(f, dynsym, f.Sections[s.Link])
	slices.SortFunc(o.plt, func(a, b sym) int { return cmp.Compare(a.addr, b.addr) })
}

// plt names the PLT entries of f "func@plt", as gdb does: each entry
// jumps through a GOT slot (jmp *disp(%rip), after endbr64 or a bnd prefix
// in some layouts), and the dynamic relocation of that slot names the
// function, a symbol of dynsym, f's .dynsym, whose strings dynstr holds.
// The names lie in names.
func plt(f *elf.File, dynsym []byte, dynstr *elf.Section) (entries []sym, names []byte) {
	if f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		return nil, nil
	}
	strs, err := sectionBytes(dynstr)
	if err != nil {
		return nil, nil
	}
	var slotOf []uint64
	slots := map[uint64]uint32{} // GOT slot -> .dynstr offset of its function's name
	gotPLT := false
	for _, name := range pltNames {
		s := f.Section(name)
		if s == nil || s.Type != elf.SHT_PROGBITS {
			continue
		}
		data, err := sectionBytes(s)
		if err != nil {
			continue
		}
		size := 16
		if name == ".plt.got" && s.Entsize == 8 {
			size = 8
		}
		for e := 0; e+size <= len(data); e += size {
			for p := e; p+6 <= e+size; p++ {
				if data[p] != 0xff || data[p+1] != 0x25 {
					continue
				}
				next := s.Addr + uint64(p+6)
				slot := next + uint64(int64(int32(f.ByteOrder.Uint32(data[p+2:]))))
				entries = append(entries, sym{addr: s.Addr + uint64(e), size: uint64(size)})
				slotOf = append(slotOf, slot)
				slots[slot] = 0
				gotPLT = gotPLT || name == ".plt.got"
				break
			}
		}
	}
	for _, name := range []string{".rela.plt", ".rela.dyn"} {
		s := f.Section(name)
		if s == nil || s.Type != elf.SHT_RELA || name == ".rela.dyn" && !gotPLT {
			// .plt.got's slots are named by .rela.dyn, the others' by .rela.plt.
			continue
		}
		data, err := relocations(f, s)
		if err != nil {
			continue
		}
		for i := 0; i+24 <= len(data); i += 24 {
			off, info := f.ByteOrder.Uint64(data[i:]), f.ByteOrder.Uint64(data[i+8:])
			typ, idx := elf.R_X86_64(info&0xffffffff), info>>32
			if typ != elf.R_X86_64_JMP_SLOT && typ != elf.R_X86_64_GLOB_DAT || idx == 0 || idx >= uint64(len(dynsym)/elf.Sym64Size) {
				continue
			}
			if _, ok := slots[off]; ok {
				slots[off] = f.ByteOrder.Uint32(dynsym[idx*elf.Sym64Size:])
			}
		}
	}
	named := entries[:0]
	for i, e := range entries {
		if n := slots[slotOf[i]]; n != 0 {
			if fn := cstring(strs, n); fn != "" {
				e.name = uint32(len(names))
				named = append(named, e)
				names = append(append(names, fn...), "@plt\x00"...)
			}
		}
	}
	return named, names
}

// relocations reads s, a relocation section of f, less the relative
// relocations at its start (DT_RELACOUNT of them), which name no symbol.
func relocations(f *elf.File, s *elf.Section) ([]byte, error) {
	var skip uint64
	if n, err := f.DynValue(elf.DT_RELACOUNT); err == nil && len(n) == 1 && s.Name == ".rela.dyn" {
		skip = min(n[0]*24, s.Size)
	}
	if skip == 0 || s.Flags&elf.SHF_COMPRESSED != 0 {
		return sectionBytes(s)
	}
	b := make([]byte, s.Size-skip)
	if _, err := s.ReadAt(b, int64(skip)); err != nil {
		return nil, err
	}
	return b, nil
}

func sectionOfType(f *elf.File, t elf.SectionType) *elf.Section {
	for _, s := range f.Sections {
		if s.Type == t {
			return s
		}
	}
	return nil
}

// symbolAt finds the function symbol holding vaddr.
func (o *Object) symbolAt(vaddr uint64) (name string, start uint64, ok bool) {
	if o.loadSymbols() != nil {
		return "", 0, false
	}
	for _, p := range o.pltAt {
		if vaddr >= p.lo && vaddr < p.hi {
			o.pltOnce.Do(o.loadPLT)
			i := sort.Search(len(o.plt), func(i int) bool { return o.plt[i].addr > vaddr }) - 1
			if i >= 0 && vaddr < o.plt[i].addr+o.plt[i].size {
				return cstring(o.pltNames, o.plt[i].name), o.plt[i].addr, true
			}
			return "", 0, false
		}
	}
	i := sort.Search(len(o.syms), func(i int) bool { return o.syms[i].addr > vaddr }) - 1
	if i < 0 {
		return "", 0, false
	}
	// Go back over symbols at the same address to the preferred (first) one,
	// and over zero-sized or shorter symbols that do not hold vaddr.
	best := -1
	for j := i; j >= 0 && j > i-64; j-- {
		s := o.syms[j]
		if s.size == 0 || vaddr < s.addr+s.size {
			if best < 0 || s.addr == o.syms[best].addr {
				best = j
			}
			continue
		}
		if best >= 0 && s.addr != o.syms[best].addr {
			break
		}
	}
	if best < 0 {
		return "", 0, false
	}
	s := o.syms[best]
	name, ok = o.symName(s)
	return Demangle(name), s.addr, ok
}

// symName returns a symbol's name; false when its string table is mapped
// from a file truncated since (the read faults).
func (o *Object) symName(s sym) (name string, ok bool) {
	err := faultSafely(o.strMapped, func() { name = cstring(o.strtab[s.tab], s.name) })
	return name, err == nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func cstring(b []byte, off uint32) string {
	if int(off) >= len(b) {
		return ""
	}
	b = b[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Demangle turns a raw symbol name into the name gdb prints for a function:
// the symbol version (`@@GLIBC_2.3.2`) dropped, C++ and Rust names demangled
// with template arguments but without the parameter list.
func Demangle(raw string) string {
	if i := strings.IndexByte(raw, '@'); i > 0 {
		raw = raw[:i]
	}
	if strings.HasPrefix(raw, "_Z") || strings.HasPrefix(raw, "_R") {
		if s, err := demangle.ToString(raw, demangle.NoParams, demangle.NoClones); err == nil {
			return s
		}
	}
	return stripClone(raw)
}

// stripClone drops GCC's clone suffixes (`.constprop.0`, `.isra.0`,
// `.part.0`, `.cold`) from a C name, as gdb does when it names the function
// from its debug information.
func stripClone(name string) string {
	for _, suf := range []string{".constprop.", ".isra.", ".part.", ".cold", ".lto_priv."} {
		if i := strings.Index(name, suf); i > 0 {
			name = name[:i]
		}
	}
	return name
}

// FDE returns the call frame information entry covering vaddr, from
// .eh_frame or, failing that, .debug_frame. The entry's addresses are ELF
// virtual addresses.
func (o *Object) FDE(vaddr uint64) (*frame.FrameDescriptionEntry, error) {
	o.cfiOnce.Do(o.loadCFI)
	if o.eh != nil {
		fde, err := o.eh.lookup(vaddr)
		if err == nil || !errors.Is(err, ErrNoFDE) || len(o.fdes) == 0 {
			if err != nil {
				return nil, fmt.Errorf("%s at %#x: %w", o.Path, vaddr, err)
			}
			return fde, nil
		}
	}
	if o.cfiErr != nil && len(o.fdes) == 0 {
		return nil, o.cfiErr
	}
	fde, err := o.fdes.FDEForPC(vaddr)
	if err != nil {
		return nil, fmt.Errorf("%s at %#x: %w", o.Path, vaddr, ErrNoFDE)
	}
	return fde, nil
}

func (o *Object) loadCFI() {
	f, c, err := o.parse()
	if err != nil {
		o.cfiErr = err
		return
	}
	defer c.Close()
	// Its frames are named later: read the file's own symbols on the way,
	// but not those of a separate debug file (as openObject).
	if f.Section(".symtab") != nil || !o.mayHaveDebugFile(f) {
		o.symOnce.Do(func() { o.symbolsFrom(f) })
	}
	o.cfiFrom(f, false)
}

// cfiFrom reads the call frame information of f, o's file: .eh_frame's
// search table, then .eh_frame's entries one at a time through it, read
// from the file as needed or, when whole, held in memory (a small file);
// all of .eh_frame when there is no table. Called once, from cfiOnce.
func (o *Object) cfiFrom(f *elf.File, whole bool) {
	var all frame.FrameDescriptionEntries
	held := 0
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		var data []byte
		var err error
		if whole {
			data, err = sectionBytes(s)
		}
		if err == nil {
			o.eh, err = newEhIndex(f, data, o.open)
			if errors.Is(err, errNoHdr) {
				err = nil // parsed whole below
			}
		}
		if err != nil && !errors.Is(err, errNoHdr) {
			o.cfiErr = fmt.Errorf("read .eh_frame_hdr of %s: %w", o.Path, err)
		}
		if o.eh == nil && data == nil {
			data, err = sectionBytes(s)
		}
		held += cap(data)
		if o.eh == nil && err == nil {
			fdes, err := ParseCFI(data, f.ByteOrder, s.Addr)
			if err != nil {
				o.cfiErr = fmt.Errorf("parse .eh_frame of %s: %w", o.Path, err)
			}
			all = all.Append(fdes)
		}
	}
	if f.Section(".eh_frame") == nil {
		// No section says where it lies (its header was left out, or all
		// of them): the program headers do, as to the program's own
		// unwinder.
		var err error
		if o.eh, err = segmentEhIndex(f, o.size, o.open); err != nil && !errors.Is(err, errNoHdr) {
			o.cfiErr = fmt.Errorf("read PT_GNU_EH_FRAME of %s: %w", o.Path, err)
		}
	}
	if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		if data, err := sectionBytes(s); err == nil {
			held += cap(data)
			fdes, err := ParseCFI(data, f.ByteOrder, 0)
			if err != nil && o.cfiErr == nil {
				o.cfiErr = fmt.Errorf("parse .debug_frame of %s: %w", o.Path, err)
			}
			all = all.Append(fdes)
		}
	}
	if len(all) == 0 && o.eh == nil && o.cfiErr == nil {
		o.cfiErr = fmt.Errorf("%s: %w", o.Path, ErrNoFDE)
	}
	o.fdes = all
	// The entries point into the sections' bytes, which they keep.
	o.mem.Add(int64(held + cap(all)*int(8+unsafe.Sizeof(frame.FrameDescriptionEntry{}))))
}

// ParseCFI parses .eh_frame (ehFrameAddr is its address, non-zero) or
// .debug_frame (ehFrameAddr 0) contents. Corrupt input returns an error.
func ParseCFI(data []byte, order binary.ByteOrder, ehFrameAddr uint64) (fdes frame.FrameDescriptionEntries, err error) {
	defer func() {
		if r := recover(); r != nil {
			fdes, err = nil, fmt.Errorf("corrupt call frame information: %v", r)
		}
	}()
	if ehFrameAddr != 0 {
		// .eh_frame ends with a zero terminator that the parser does not expect.
		for len(data) >= 4 && order.Uint32(data[len(data)-4:]) == 0 {
			data = data[:len(data)-4]
		}
	}
	fdes, err = frame.Parse(data, order, 0, 8, ehFrameAddr)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(fdes, func(a, b *frame.FrameDescriptionEntry) int { return cmp.Compare(a.Begin(), b.Begin()) })
	return fdes, nil
}

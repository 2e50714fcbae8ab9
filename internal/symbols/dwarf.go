package symbols

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/inflate"
)

// A large object (libc's debug file, a framework library) holds thousands
// of compile units in megabytes of DWARF, often compressed, while a dump
// needs a handful of units. Two things keep the cost to what is needed:
//
//   - compressed .debug_info, .debug_abbrev and .debug_line are read
//     (decompressed) only as far as the units needed so far, which are
//     found by address through .debug_aranges; zlib, the usual kind, is
//     inflated by internal/inflate, at twice compress/zlib's speed
//     (inflating libc's is most of a first dump), from the file's pages
//     mapped, not copied; .debug_abbrev and .debug_line of up to maxAhead
//     are inflated on another goroutine meanwhile (see readAhead);
//   - debug/dwarf parses the abbreviation table of every unit it is given,
//     so each unit not needed yet points at an empty table in our copy of
//     .debug_info; a unit gets its own back when first needed.
//
// Offsets are kept, so entries read at one time stay valid later. The
// parts of .debug_abbrev and .debug_line not read yet are zeros: an empty
// table, an empty line program; a unit's are read before it is used.

// wholeSections are the small sections read whole.
var wholeSections = []string{"str", "line_str", "ranges", "rnglists", "addr", "str_offsets", "aranges"}

// readChunk is the least read from a compressed section at a time.
const readChunk = 256 << 10

// section is one DWARF section, read as far as needed.
type section struct {
	b     []byte                    // the section, then zero bytes; b[:n] read
	n     int                       // bytes read
	size  int                       // bytes of the section itself
	fill  func(to int) (int, error) // reads on to at least to bytes, returns how far; nil once read whole
	file  bool                      // fill reads from the file (else from memory)
	ahead *ahead                    // the section being read on another goroutine, until read whole
	unmap func()                    // unmaps the stream fill reads (see mapFile); nil when it is in memory
}

// ahead is a section being read on another goroutine (see readAhead).
type ahead struct {
	mu   sync.Mutex
	cond sync.Cond // signalled as n grows
	n    int       // bytes read so far
	err  error
	done bool // read whole, or failed
}

// maxAhead bounds the sections readAhead reads whole: a larger one is read
// as far as needed.
const maxAhead = 8 << 20

// readAhead starts reading the section whole on another goroutine, when it
// is inflated from memory and no larger than maxAhead; read waits for it
// as far as asked. It is used for .debug_abbrev and .debug_line: a first
// dump needs 2 MB of libc's, inflated meanwhile instead of after each
// unit of .debug_info that points into them. .debug_info itself is
// inflated as far as needed by whoever needs it: reading all of libc's
// ahead (6 MB, a third more than the benchmark's stacks need) cost more
// CPU and gained nothing on 2 CPUs (docs/measurements.md).
func (s *section) readAhead() {
	if s.fill == nil || s.file || s.size > maxAhead {
		return
	}
	a, fill, size := &ahead{}, s.fill, s.size
	a.cond.L = &a.mu
	s.ahead = a
	go func() {
		for n := 0; ; {
			k, err := fill(min(n+readChunk, size))
			n = k
			a.mu.Lock()
			a.n, a.err, a.done = k, err, k >= size || err != nil
			done := a.done
			a.cond.Broadcast()
			a.mu.Unlock()
			if done {
				break
			}
		}
		runtime.KeepAlive(s) // and what it maps, while fill reads it
	}()
}

// wait waits until at least to bytes are read, or no more will be, and
// returns how many are.
func (a *ahead) wait(to int) (n int, done bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.n < to && !a.done {
		a.cond.Wait()
	}
	return a.n, a.done, a.err
}

// file is an ELF file's contents and what closes it.
type file interface {
	io.ReaderAt
	io.Closer
}

// readAt pairs a file's contents with its closer.
type readAt struct {
	io.ReaderAt
	io.Closer
}

// openSection reads s, a section of f whose contents r holds, whole when
// it is not compressed, else prepares to read it as needed: a zlib
// section (the common kind) is read raw and inflated in memory, another
// kind streamed. extra zero bytes follow the section in b. A large
// compressed section is inflated outside the Go heap (see offHeap) when
// own says that nothing keeps b past the section itself.
func openSection(f *elf.File, s *elf.Section, r io.ReaderAt, extra int, own bool) (*section, error) {
	if s.Flags&elf.SHF_COMPRESSED == 0 {
		b, err := sectionBytes(s)
		if err != nil {
			return nil, err
		}
		b = append(b[:len(b):len(b)], make([]byte, extra)...)
		return &section{b: b, n: len(b) - extra, size: len(b) - extra}, nil
	}
	size, err := elfcheck.Size(s)
	if err != nil {
		return nil, err
	}
	var sec *section
	if own {
		if b, unmap := offHeap(size + extra); b != nil {
			sec = &section{b: b, size: size}
			runtime.AddCleanup(sec, func(unmap func()) { unmap() }, unmap)
		}
	}
	if sec == nil {
		sec = &section{b: populated(size + extra), size: size}
	}
	raw, unmap, err := zlibContents(f, s, r)
	switch {
	case err != nil:
		return nil, err
	case raw != nil:
		d, err := inflate.NewZlib(raw, sec.b[:size])
		if err != nil {
			if unmap != nil {
				unmap()
			}
			return nil, err
		}
		sec.fill = d.Fill
		if unmap != nil {
			// Unmapped once read whole, or once the section is dropped
			// before that: the stream is the decoder's alone.
			sec.unmap = sync.OnceFunc(unmap)
			runtime.AddCleanup(sec, func(unmap func()) { unmap() }, sec.unmap)
			sec.fill = faultSafe(d)
		}
	default:
		rest := s.Open()
		sec.file = true
		sec.fill = func(to int) (int, error) {
			k, err := io.ReadFull(rest, sec.b[sec.n:min(to, size)])
			return sec.n + k, err
		}
	}
	return sec, nil
}

// zlibContents returns the zlib stream of s, a compressed section of f
// whose contents r holds, mapped from the file (with what unmaps it) or
// else read into memory; nil when s is compressed another way.
func zlibContents(f *elf.File, s *elf.Section, r io.ReaderAt) (raw []byte, unmap func(), err error) {
	hdr := 24 // Elf64_Chdr: type, reserved, size, alignment
	if f.Class == elf.ELFCLASS32 {
		hdr = 12 // Elf32_Chdr: type, size, alignment
	}
	if s.FileSize < uint64(hdr) || s.FileSize > 1<<31 {
		return nil, nil, fmt.Errorf("compressed section %s of %d bytes", s.Name, s.FileSize)
	}
	var typ [4]byte
	if _, err := r.ReadAt(typ[:], int64(s.Offset)); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", s.Name, err)
	}
	if elf.CompressionType(f.ByteOrder.Uint32(typ[:])) != elf.COMPRESS_ZLIB {
		return nil, nil, nil
	}
	off, n := int64(s.Offset)+int64(hdr), int(s.FileSize)-hdr
	if n >= populateMin {
		if raw, unmap := mapFile(r, off, n, true); raw != nil {
			return raw, unmap, nil
		}
	}
	raw = populated(n)
	if _, err := r.ReadAt(raw, off); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", s.Name, err)
	}
	return raw, nil, nil
}

// faultSafe returns d's Fill with a fault reading its stream, a mapped
// file truncated meanwhile, turned into an error.
func faultSafe(d *inflate.Decoder) func(to int) (int, error) {
	return func(to int) (n int, err error) {
		if ferr := faultSafely(true, func() { n, err = d.Fill(to) }); ferr != nil {
			return d.Filled(), fmt.Errorf("read the mapped file: %v", ferr)
		}
		return n, err
	}
}

// sectionData returns the contents of s, a section of f whose contents r
// holds, inflated when compressed.
func sectionData(f *elf.File, s *elf.Section, r io.ReaderAt) ([]byte, error) {
	sec, err := openSection(f, s, r, 0, false)
	if err != nil {
		return nil, err
	}
	if err := sec.read(sec.size); err != nil {
		return nil, err
	}
	return sec.b, nil
}

// read reads the section on to at least to bytes of b (the zero bytes
// after the section need no reading).
func (s *section) read(to int) error {
	if to > len(s.b) {
		return io.ErrUnexpectedEOF
	}
	to = min(to, s.size)
	if to <= s.n {
		return nil
	}
	if s.fill == nil {
		return io.ErrUnexpectedEOF
	}
	var n int
	var err error
	if a := s.ahead; a != nil {
		var done bool
		n, done, err = a.wait(to)
		if done {
			s.ahead = nil
		}
	} else {
		n, err = s.fill(max(to, s.n+readChunk))
	}
	s.n = n
	if s.ahead == nil && (n == s.size || err != nil) {
		s.fill = nil
		if s.unmap != nil {
			s.unmap()
		}
	}
	if err != nil {
		return fmt.Errorf("read at %d of %d bytes: %w", n, s.size, err)
	}
	if n < to {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// debugInfo is the DWARF of one object, made ready unit by unit. It is
// guarded by its lineTable's mutex.
type debugInfo struct {
	order  binary.ByteOrder
	sec    map[string][]byte // the sections read whole
	info   *section          // stubs edited in
	abbrev *section          // with the empty table (a 0) after it
	line   *section
	file   io.Closer    // what the sections read from, closed once none is left to read from it
	units  []unitHeader // the units read whole, by offset
	next   int          // where the next unit starts
	stub   uint64       // offset of the empty abbreviation table
	data   *dwarf.Data  // over the units read; nil when outdated
}

// unitHeader is where one unit lies in .debug_info and its abbreviation
// table offset.
type unitHeader struct {
	off, end dwarf.Offset // the header's start, the unit's end
	die      dwarf.Offset // its first entry: the unit's offset to debug/dwarf
	field    int          // position of the abbreviation offset in .debug_info
	abbrev   uint64       // the real offset
	is64     bool
	live     bool // given its table back
}

// openDebugInfo opens the DWARF of f, reading its small sections whole:
// file, f's contents, stays open while a section compressed other than
// with zlib is read from it as needed (else it is closed now). It fails
// when the sections are compressed the legacy (.zdebug) way or there is
// no .debug_info.
func openDebugInfo(f *elf.File, file file) (di *debugInfo, err error) {
	defer func() {
		if di == nil || !di.reading() {
			file.Close()
		}
	}()
	if f.Section(".zdebug_info") != nil {
		return nil, errors.New("legacy compressed debug sections")
	}
	// Each section is within elfcheck.MaxSection; together as well, so
	// that one library's DWARF cannot take several times the limit.
	var total uint64
	for _, name := range append([]string{"info", "abbrev", "line"}, wholeSections...) {
		if s := f.Section(".debug_" + name); s != nil && s.Type != elf.SHT_NOBITS {
			total += s.Size
		}
	}
	if total > elfcheck.MaxSection {
		return nil, fmt.Errorf("debug sections of %d bytes, more than %d: %w", total, elfcheck.MaxSection, elfcheck.ErrTooLarge)
	}
	di = &debugInfo{order: f.ByteOrder, sec: map[string][]byte{}, file: file}
	for name, p := range map[string]**section{"info": &di.info, "abbrev": &di.abbrev, "line": &di.line} {
		s := f.Section(".debug_" + name)
		if s == nil || s.Type == elf.SHT_NOBITS {
			if name == "line" {
				continue
			}
			return nil, fmt.Errorf("no .debug_%s", name)
		}
		extra := 0
		if name == "abbrev" {
			extra = 1
		}
		// Kept by di alone, and by what di.dwarf parses from them.
		if *p, err = openSection(f, s, file, extra, true); err != nil {
			return nil, fmt.Errorf("read .debug_%s: %w", name, err)
		}
	}
	di.stub = uint64(len(di.abbrev.b) - 1)
	// Compressed ones are inflated concurrently; the rest are small reads,
	// cheaper done in turn.
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for _, name := range wholeSections {
		s := f.Section(".debug_" + name)
		if s == nil {
			continue
		}
		read := func() {
			b, err := sectionData(f, s, file)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("read .debug_%s: %w", name, err)
			}
			di.sec[name] = b
		}
		if s.Flags&elf.SHF_COMPRESSED == 0 {
			read()
			continue
		}
		wg.Go(read)
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	di.index()
	di.abbrev.readAhead()
	if di.line != nil {
		di.line.readAhead()
	}
	return di, nil
}

// done reports whether every section is read whole.
func (di *debugInfo) done() bool {
	return di.info.fill == nil && di.abbrev.fill == nil && (di.line == nil || di.line.fill == nil)
}

// reading reports whether a section is still to be read from the file.
func (di *debugInfo) reading() bool {
	for _, s := range []*section{di.info, di.abbrev, di.line} {
		if s != nil && s.fill != nil && s.file {
			return true
		}
	}
	return false
}

// read reads s on to at least to bytes, closing the file when no section
// is left to read from it.
func (di *debugInfo) read(s *section, to int) error {
	open := di.reading()
	err := s.read(to)
	if open && !di.reading() {
		di.file.Close()
	}
	return err
}

// index adds the units of .debug_info that are now read whole, each
// stubbed.
func (di *debugInfo) index() {
	order, info := di.order, di.info.b[:di.info.n]
	for off := di.next; off+4 <= len(info); off = di.next {
		h := unitHeader{off: dwarf.Offset(off)}
		n := uint64(order.Uint32(info[off:]))
		p := off + 4
		if n == 0xffffffff {
			if p+8 > len(info) {
				return
			}
			n, h.is64, p = order.Uint64(info[p:]), true, p+8
		}
		if n == 0 {
			di.next = p // padding
			continue
		}
		end := uint64(p) + n
		if n < 7 || end > uint64(len(info)) {
			return // not read whole yet (or corrupt: never whole)
		}
		version := order.Uint16(info[p:])
		p += 2
		utype := byte(1) // DW_UT_compile
		if version >= 5 {
			utype = info[p]
			p += 2 // unit type, address size
		}
		h.field = p
		if h.is64 {
			h.abbrev = order.Uint64(info[p:])
			order.PutUint64(info[p:], di.stub)
			p += 8
		} else {
			h.abbrev = uint64(order.Uint32(info[p:]))
			order.PutUint32(info[p:], uint32(di.stub))
			p += 4
		}
		switch {
		case version < 5:
			p++ // address size
		case utype == 4 || utype == 5: // skeleton, split compile: unit id
			p += 8
		case utype == 2 || utype == 6: // type units: signature, type offset
			p += 8 + 4
			if h.is64 {
				p += 4
			}
		}
		h.die, h.end = dwarf.Offset(p), dwarf.Offset(end)
		di.units = append(di.units, h)
		di.next = int(end)
	}
}

// unit returns the unit holding off, reading .debug_info that far.
func (di *debugInfo) unit(off dwarf.Offset) (*unitHeader, error) {
	for {
		i := sort.Search(len(di.units), func(i int) bool { return di.units[i].end > off })
		if i < len(di.units) {
			if di.units[i].off > off {
				return nil, fmt.Errorf("no unit holds offset %#x", off)
			}
			return &di.units[i], nil
		}
		if err := di.read(di.info, di.info.n+1); err != nil {
			return nil, fmt.Errorf("no unit holds offset %#x: %w", off, err)
		}
		di.index()
	}
}

// readAbbrev reads .debug_abbrev as far as the end of the table at off.
func (di *debugInfo) readAbbrev(off uint64) error {
	for {
		if _, ok := abbrevEnd(di.abbrev.b[:di.abbrev.n], int(off)); ok {
			return nil
		}
		if di.abbrev.n >= di.abbrev.size {
			return fmt.Errorf("read .debug_abbrev at %#x: table not terminated: %w", off, io.ErrUnexpectedEOF)
		}
		if err := di.read(di.abbrev, di.abbrev.n+1); err != nil {
			return fmt.Errorf("read .debug_abbrev at %#x: %w", off, err)
		}
	}
}

// readLine reads .debug_line as far as the end of the line program at off.
func (di *debugInfo) readLine(off int64) error {
	if di.line == nil || off < 0 {
		return nil
	}
	size := int64(di.line.size)
	if off > size-4 {
		return fmt.Errorf("line program at %#x past .debug_line's %d bytes", off, size)
	}
	if err := di.read(di.line, int(min(off+12, size))); err != nil && int64(di.line.n) < off+4 {
		return fmt.Errorf("read .debug_line at %#x: %w", off, err)
	}
	b := di.line.b
	n := uint64(di.order.Uint32(b[off:]))
	hdr := uint64(4)
	if n == 0xffffffff {
		if off+12 > int64(di.line.n) {
			return fmt.Errorf("line program at %#x: truncated length", off)
		}
		n, hdr = di.order.Uint64(b[off+4:]), 12
	}
	if n > uint64(size-off)-hdr {
		return fmt.Errorf("line program at %#x of %d bytes runs past .debug_line", off, n)
	}
	end := off + int64(hdr+n)
	return di.read(di.line, int(end))
}

// abbrevEnd returns where the abbreviation table at off in b ends, false
// when b ends first.
func abbrevEnd(b []byte, off int) (int, bool) {
	p := off
	uleb := func() (uint64, bool) {
		var v uint64
		for shift := 0; p < len(b); shift += 7 {
			c := b[p]
			p++
			if shift < 64 {
				v |= uint64(c&0x7f) << shift
			}
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	for {
		code, ok := uleb()
		if !ok {
			return 0, false
		}
		if code == 0 {
			return p, true
		}
		if _, ok := uleb(); !ok || p >= len(b) { // tag, children
			return 0, false
		}
		p++
		for {
			name, ok1 := uleb()
			form, ok2 := uleb()
			if !ok1 || !ok2 {
				return 0, false
			}
			if form == 0x21 { // DW_FORM_implicit_const: a signed constant follows
				if _, ok := uleb(); !ok {
					return 0, false
				}
			}
			if name == 0 && form == 0 {
				break
			}
		}
	}
}

// dwarf returns the data with the units holding offs ready.
func (di *debugInfo) dwarf(offs ...dwarf.Offset) (*dwarf.Data, error) {
	for _, off := range offs {
		h, err := di.unit(off)
		if err != nil {
			return nil, err
		}
		if h.live {
			continue
		}
		if err := di.readAbbrev(h.abbrev); err != nil {
			return nil, err
		}
		info := di.info.b
		if h.is64 {
			di.order.PutUint64(info[h.field:], h.abbrev)
		} else {
			di.order.PutUint32(info[h.field:], uint32(h.abbrev))
		}
		h.live = true
		di.data = nil
	}
	if di.data != nil {
		return di.data, nil
	}
	var line []byte
	if di.line != nil {
		line = di.line.b
	}
	d, err := dwarf.New(di.abbrev.b, nil, nil, di.info.b[:di.next:di.next], line, nil, di.sec["ranges"], di.sec["str"])
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"line_str", "rnglists", "addr", "str_offsets"} {
		if b := di.sec[name]; b != nil {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, err
			}
		}
	}
	di.data = d
	return d, nil
}

// all reads the whole of .debug_info and returns every unit's header
// offset.
func (di *debugInfo) all() ([]dwarf.Offset, error) {
	if err := di.read(di.info, len(di.info.b)); err != nil {
		return nil, err
	}
	di.index()
	offs := make([]dwarf.Offset, len(di.units))
	for i, u := range di.units {
		offs[i] = u.off
	}
	return offs, nil
}

// aranges reads .debug_aranges: the address ranges of each unit, by the
// offset of the unit's header.
func aranges(b []byte, order binary.ByteOrder) ([]unitRange, error) {
	var out []unitRange
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, errors.New("truncated .debug_aranges")
		}
		n := uint64(order.Uint32(b))
		hdr := 4
		is64 := false
		if n == 0xffffffff {
			if len(b) < 12 {
				return nil, errors.New("truncated .debug_aranges")
			}
			n, hdr, is64 = order.Uint64(b[4:]), 12, true
		}
		if n > uint64(len(b)-hdr) {
			return nil, errors.New("bad .debug_aranges length")
		}
		set := b[hdr : hdr+int(n)]
		b = b[hdr+int(n):]
		p := 2 // version
		var off uint64
		if is64 {
			if len(set) < p+8 {
				return nil, errors.New("truncated .debug_aranges")
			}
			off, p = order.Uint64(set[p:]), p+8
		} else {
			if len(set) < p+4 {
				return nil, errors.New("truncated .debug_aranges")
			}
			off, p = uint64(order.Uint32(set[p:])), p+4
		}
		if len(set) < p+2 || set[p] != 8 || set[p+1] != 0 {
			return nil, errors.New("unsupported .debug_aranges address size")
		}
		p += 2
		// Tuples start at a multiple of twice the address size from the
		// start of the set (its length field included).
		for (hdr+p)%16 != 0 {
			p++
		}
		for ; p+16 <= len(set); p += 16 {
			lo, size := order.Uint64(set[p:]), order.Uint64(set[p+8:])
			if lo == 0 && size == 0 {
				break
			}
			if size > 0 {
				out = append(out, unitRange{lo, lo + size, dwarf.Offset(off)})
			}
		}
	}
	return out, nil
}

package symbols

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/xpu-timer/xpu-timer/internal/elfcheck"
	"github.com/xpu-timer/xpu-timer/internal/rawfile"
)

// DebugRoot is where separate debug files are looked up (by build-id under
// .build-id/, or by .gnu_debuglink); tests may point it elsewhere.
var DebugRoot = "/usr/lib/debug"

// debugFileHandle is an opened separate debug file.
type debugFileHandle struct {
	*elf.File
	f    *rawfile.File
	path string
}

func (d *debugFileHandle) Close() error { return d.f.Close() }

// debugCandidate is where a separate debug file may be.
type debugCandidate struct {
	path string
	// crc is the CRC-32 of the right file, when .gnu_debuglink named it
	// (link) with one.
	crc          uint32
	link, hasCRC bool
}

// debugFile opens the separate debug file of an object, if one exists:
// /usr/lib/debug/.build-id/xx/rest.debug, then the .gnu_debuglink name next
// to the file, in its .debug directory, and under /usr/lib/debug. A file
// whose build-id is not the object's is not it; nor is one that the
// link names whose CRC-32 is not the link's, when the two files have no
// build-ids to tell (as gdb checks): another library's, or an older
// build's, whose names and lines would be wrong.
func (o *Object) debugFile(f *elf.File) *debugFileHandle {
	for _, c := range o.debugFiles(f) {
		fi, err := os.Stat(c.path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		fh, err := rawfile.Open(c.path)
		if err != nil {
			continue
		}
		ef, err := elfcheck.NewFile(fh, fi.Size())
		if err != nil {
			fh.Close()
			o.note(fmt.Sprintf("separate debug file %s: %v: not read", c.path, err))
			continue
		}
		id := buildID(ef)
		if o.BuildID != "" && id != "" && id != o.BuildID {
			fh.Close()
			continue
		}
		if c.link && c.hasCRC && (o.BuildID == "" || id == "") {
			if sum, err := crcOf(fh, fi.Size()); err != nil || sum != c.crc {
				fh.Close()
				o.note(fmt.Sprintf("separate debug file %s: not the one .gnu_debuglink names (CRC-32 %08x, not %08x): not read", c.path, sum, c.crc))
				continue
			}
		}
		return &debugFileHandle{File: ef, f: fh, path: c.path}
	}
	return nil
}

// crcOf returns the CRC-32 (IEEE, as .gnu_debuglink's) of the size bytes r holds.
func crcOf(r io.ReaderAt, size int64) (uint32, error) {
	buf := make([]byte, 64<<10)
	var sum uint32
	for off := int64(0); off < size; {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		sum = crc32.Update(sum, crc32.IEEETable, buf[:n])
		off += int64(n)
		if err != nil && off < size {
			return 0, err
		}
	}
	return sum, nil
}

// mayHaveDebugFile reports whether a file is where debugFile looks for the
// separate debug file of an object, without opening it.
func (o *Object) mayHaveDebugFile(f *elf.File) bool {
	for _, c := range o.debugFiles(f) {
		if _, err := os.Stat(c.path); err == nil {
			return true
		}
	}
	return false
}

// debugFiles lists where the separate debug file of an object may be, in
// the order debugFile tries them.
func (o *Object) debugFiles(f *elf.File) []debugCandidate {
	var cands []debugCandidate
	if len(o.BuildID) > 2 {
		cands = append(cands, debugCandidate{path: filepath.Join(DebugRoot, ".build-id", o.BuildID[:2], o.BuildID[2:]+".debug")})
	}
	if s := f.Section(".gnu_debuglink"); s != nil && o.Path != "" && o.Path[0] == '/' {
		if b, err := sectionBytes(s); err == nil {
			// The name, zero bytes to a multiple of 4, the CRC-32.
			name := cstring(b, 0)
			at := align4(uint64(len(name)) + 1)
			c := debugCandidate{link: true}
			if at+4 <= uint64(len(b)) {
				c.crc, c.hasCRC = f.ByteOrder.Uint32(b[at:]), true
			}
			if name != "" && !strings.Contains(name, "/") {
				dir := filepath.Dir(o.Path)
				for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name), filepath.Join(DebugRoot, dir, name)} {
					c.path = p
					cands = append(cands, c)
				}
			}
		}
	}
	return cands
}

// lineTable answers file:line, inlined calls and call sites for addresses
// of one object. Its fields are guarded by mu.
type lineTable struct {
	mu    sync.Mutex
	mem   *atomic.Int64 // the object's Bytes
	di    *debugInfo
	units []unitRange // by lo; off is the unit's header
	// per-unit data, filled on first use
	rows  map[dwarf.Offset][]lineRow
	err   error // the first unit whose line table could not be read
	infos map[dwarf.Offset]*unitInfo
}

// data returns the DWARF with the units holding offs ready. Called with
// mu held; it panics, for its callers to recover, when a unit cannot be
// read.
func (lt *lineTable) data(offs ...dwarf.Offset) *dwarf.Data {
	d, err := lt.di.dwarf(offs...)
	if err != nil {
		panic(err)
	}
	return d
}

// lineReader reads the line table of unit cu. Called with mu held.
func (lt *lineTable) lineReader(d *dwarf.Data, cu *dwarf.Entry) (*dwarf.LineReader, error) {
	if off, ok := cu.Val(dwarf.AttrStmtList).(int64); ok {
		if err := lt.di.readLine(off); err != nil {
			return nil, err
		}
	}
	return d.LineReader(cu)
}

// entryOf returns the offset of the first entry of the unit whose header
// is at off. Called with mu held; panics like data.
func (lt *lineTable) entryOf(off dwarf.Offset) dwarf.Offset {
	h, err := lt.di.unit(off)
	if err != nil {
		panic(err)
	}
	return h.die
}

// unitOverhead is what debug/dwarf and our maps keep per unit read,
// beyond the decoded rows and scopes counted one by one: an estimate.
const unitOverhead = 1 << 10

// bytes returns the memory the sections read hold, inflated.
func (di *debugInfo) bytes() int64 {
	var n int
	for _, s := range []*section{di.info, di.abbrev, di.line} {
		if s != nil {
			n += len(s.b)
		}
	}
	for _, b := range di.sec {
		n += cap(b)
	}
	return int64(n)
}

type unitRange struct {
	lo, hi uint64
	off    dwarf.Offset
}

type lineRow struct {
	addr uint64
	file string
	line int
	end  bool
}

// line returns the source position of vaddr from the DWARF line tables of
// the object or its separate debug file.
func (o *Object) line(vaddr uint64) (string, int) {
	o.readLines(o.loadLines)
	if o.lines == nil {
		return "", 0
	}
	return o.lines.lookup(vaddr)
}

// lineTable returns the object's DWARF, read on first use; nil without.
func (o *Object) lineTable() *lineTable {
	o.readLines(o.loadLines)
	return o.lines
}

// readLines reads o's DWARF with load, once, and marks it read.
func (o *Object) readLines(load func()) {
	o.lineOnce.Do(func() {
		defer o.linesRead.Store(true)
		load()
	})
}

func (o *Object) loadLines() {
	f, c, err := o.parse()
	if err != nil {
		o.lineErr = err
		return
	}
	o.linesFrom(f, c)
}

// linesFrom reads the DWARF of f, o's file whose contents are contents,
// or of its separate debug file. It closes contents, or hands it on to
// read compressed sections from as needed. Called once, from lineOnce;
// what failed is kept in lineErr.
func (o *Object) linesFrom(f *elf.File, contents file) {
	defer func() {
		if r := recover(); r != nil {
			o.lines, o.lineErr = nil, fmt.Errorf("debug information: %w", recovered(r))
		}
	}()
	src := f
	if f.Section(".debug_line") == nil || f.Section(".debug_info") == nil {
		contents.Close()
		df := o.debugFile(f)
		if df == nil {
			return
		}
		src, contents = df.File, readAt{df.f, df}
	}
	di, err := openDebugInfo(src, contents)
	if err != nil {
		o.lineErr = fmt.Errorf("debug information: %w", err)
		return
	}
	lt := &lineTable{mem: &o.mem, di: di, rows: map[dwarf.Offset][]lineRow{}}
	lt.mem.Add(di.bytes())
	if b := di.sec["aranges"]; b != nil {
		lt.units, err = aranges(b, src.ByteOrder)
	}
	if di.sec["aranges"] == nil || err != nil {
		// Without an address index, read every unit's ranges.
		lt.units = nil
		offs, err := di.all()
		if err != nil {
			o.lineErr = fmt.Errorf("debug information: %w", err)
			return
		}
		d := lt.data(offs...)
		rd := d.Reader()
		for {
			e, err := rd.Next()
			if err != nil || e == nil {
				break
			}
			if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
				h, err := di.unit(e.Offset)
				if ranges, rerr := d.Ranges(e); err == nil && rerr == nil {
					for _, rg := range ranges {
						if rg[0] < rg[1] {
							lt.units = append(lt.units, unitRange{rg[0], rg[1], h.off})
						}
					}
				}
			}
			rd.SkipChildren()
		}
	}
	slices.SortFunc(lt.units, func(a, b unitRange) int { return cmp.Compare(a.lo, b.lo) })
	o.lines = lt
}

// warm reads what the lookups of vaddrs need. Their units are made ready
// at once: each time units are added, debug/dwarf reads the headers of
// all the units before them again (for libc, a thousand).
func (lt *lineTable) warm(vaddrs []uint64) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	var offs []dwarf.Offset
	for _, v := range vaddrs {
		if u, ok := lt.unitOf(v); ok {
			offs = append(offs, u.off)
		}
	}
	func() {
		defer func() { // a unit that cannot be read: each lookup finds out
			if r := recover(); r != nil {
				recovered(r)
			}
		}()
		lt.data(offs...)
	}()
	for _, v := range vaddrs {
		lt.unitAt(v)
		lt.lookupLocked(v)
	}
}

func (lt *lineTable) lookup(vaddr uint64) (string, int) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.lookupLocked(vaddr)
}

// unitOf returns the address range of the unit holding vaddr.
func (lt *lineTable) unitOf(vaddr uint64) (unitRange, bool) {
	i := sort.Search(len(lt.units), func(i int) bool { return lt.units[i].lo > vaddr }) - 1
	for ; i >= 0; i-- {
		if u := lt.units[i]; vaddr < u.hi {
			return u, true
		}
	}
	return unitRange{}, false
}

func (lt *lineTable) lookupLocked(vaddr uint64) (string, int) {
	u, ok := lt.unitOf(vaddr)
	if !ok {
		return "", 0
	}
	rows, err := lt.unitRows(u.off)
	if err != nil {
		if lt.err == nil {
			lt.err = fmt.Errorf("debug information: %w", err)
		}
		return "", 0
	}
	j := sort.Search(len(rows), func(j int) bool { return rows[j].addr > vaddr }) - 1
	if j >= 0 && !rows[j].end {
		return rows[j].file, rows[j].line
	}
	return "", 0
}

func (lt *lineTable) unitRows(off dwarf.Offset) (rows []lineRow, err error) {
	if rows, ok := lt.rows[off]; ok {
		return rows, nil
	}
	defer func() {
		if r := recover(); r != nil {
			rows, err = nil, fmt.Errorf("read unit at %#x: %w", off, recovered(r))
		}
	}()
	d := lt.data(off)
	rd := d.Reader()
	rd.Seek(lt.entryOf(off))
	cu, err := rd.Next()
	if err != nil || cu == nil {
		return nil, fmt.Errorf("read unit at %#x: %v", off, err)
	}
	lr, err := lt.lineReader(d, cu)
	if err != nil || lr == nil {
		lt.rows[off] = nil
		return nil, err
	}
	var le dwarf.LineEntry
	for lr.Next(&le) == nil {
		file := ""
		if le.File != nil {
			file = le.File.Name
		}
		rows = append(rows, lineRow{addr: le.Address, file: file, line: le.Line, end: le.EndSequence})
	}
	slices.SortStableFunc(rows, func(a, b lineRow) int {
		if c := cmp.Compare(a.addr, b.addr); c != 0 {
			return c
		}
		return cmp.Compare(b2i(b.end), b2i(a.end)) // an end of sequence gives way to a new row at the same address
	})
	lt.rows[off] = rows
	lt.mem.Add(int64(cap(rows))*int64(unsafe.Sizeof(lineRow{})) + unitOverhead)
	return rows, nil
}

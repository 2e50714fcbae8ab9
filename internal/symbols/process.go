package symbols

import (
	"fmt"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/rawfile"
)

// Symbol is what an address resolves to.
type Symbol struct {
	Name   string // demangled function name, "" when unknown
	Module string // mapped object path, "[vdso]", or "" for anonymous memory
	Offset uint64 // addr - function start; addr - module base when Name is ""
	File   string // source file from DWARF, when known
	Line   int
}

// Module is one executable mapping of a process and the object behind it.
type Module struct {
	Start, End uint64
	Path       string  // as in /proc/PID/maps; "" for anonymous memory
	Object     *Object // nil for anonymous memory or an unreadable file
	Bias       uint64  // ELF virtual address = process address - Bias
	Base       uint64  // lowest address the object is mapped at
}

// Vaddr converts a process address in the module to the object's ELF address.
func (m *Module) Vaddr(addr uint64) uint64 { return addr - m.Bias }

// Process resolves addresses of one process. It is safe for concurrent use.
type Process struct {
	PID   int
	cache *Cache
	lines bool // the files opened for it read their debug information with their headers

	mu   sync.Mutex
	dir  string     // the /proc directory the mappings were read through
	maps []*mapping // executable mappings, sorted
	all  []procfs.Mapping
}

type mapping struct {
	procfs.Mapping
	base uint64 // lowest start among mappings of the same file
	once sync.Once
	mod  Module
	err  error
}

// Process reads /proc/PID/maps and returns a resolver for the process.
// Files are parsed only when an address falls in them.
func (c *Cache) Process(pid int) (*Process, error) { return c.OpenProcess(pid, true) }

// OpenProcess is Process; lines says whether its lookups will want source
// lines and inlined calls (Lookup, LookupInline, TailCalls, Prefetch with
// lines) or names alone (LookupName, Prefetch without). Either kind of
// lookup works either way: lines only decides whether a small file read
// for it reads its debug information at once, with its headers, or when
// first asked for.
func (c *Cache) OpenProcess(pid int, lines bool) (*Process, error) {
	p := &Process{PID: pid, cache: c, lines: lines}
	if err := p.Refresh(); err != nil {
		return nil, err
	}
	return p, nil
}

// Refresh re-reads the process's mappings (libraries loaded late). Mappings
// that did not change keep what was resolved for them.
func (p *Process) Refresh() error {
	ms, err := procfs.Maps(p.PID)
	if err != nil {
		return err
	}
	dir := fmt.Sprintf("%s/%d", procfs.Root, p.PID)
	if len(ms) == 0 {
		// The main thread has exited (a zombie shows no mappings): read
		// through a thread that lives.
		if tms, tdir, ok := taskMaps(p.PID); ok {
			ms, dir = tms, tdir
		}
	}
	p.mu.Lock()
	p.dir = dir
	defer p.mu.Unlock()
	old := map[procfs.Mapping]*mapping{}
	for _, m := range p.maps {
		old[m.Mapping] = m
	}
	base := map[string]uint64{}
	for _, m := range ms {
		if m.Path == "" || m.Path[0] != '/' {
			continue
		}
		if b, ok := base[m.Path]; !ok || m.Start < b {
			base[m.Path] = m.Start
		}
	}
	var maps []*mapping
	for _, m := range ms {
		if !m.Exec() {
			continue
		}
		if o, ok := old[m]; ok {
			maps = append(maps, o)
			continue
		}
		b := base[m.Path]
		if b == 0 {
			b = m.Start
		}
		maps = append(maps, &mapping{Mapping: m, base: b})
	}
	p.maps = maps
	p.all = ms
	return nil
}

// taskMaps reads the mappings of pid through its first thread that shows any.
func taskMaps(pid int) ([]procfs.Mapping, string, bool) {
	tids, err := procfs.Tasks(pid)
	if err != nil {
		return nil, "", false
	}
	for _, tid := range tids {
		dir := fmt.Sprintf("%s/%d/task/%d", procfs.Root, pid, tid)
		b, err := rawfile.ReadFile(dir + "/maps")
		if err != nil {
			continue
		}
		if ms, err := procfs.ParseMaps(b); err == nil && len(ms) > 0 {
			return ms, dir, true
		}
	}
	return nil, "", false
}

// Mappings returns every mapping of the process as last read.
func (p *Process) Mappings() []procfs.Mapping {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.all
}

func (p *Process) procDir() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dir
}

func (p *Process) find(addr uint64) *mapping {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].End > addr })
	if i < len(p.maps) && p.maps[i].Contains(addr) {
		return p.maps[i]
	}
	return nil
}

// Mapped reports whether addr lies in an executable mapping, as last
// read, without reading the file behind it.
func (p *Process) Mapped(addr uint64) bool { return p.find(addr) != nil }

// Module returns the executable mapping holding addr, parsing its file's
// headers on first use. The second result is false when addr is in no
// executable mapping.
func (p *Process) Module(addr uint64) (*Module, bool) {
	m := p.find(addr)
	if m == nil {
		return nil, false
	}
	m.once.Do(func() { m.resolve(p) })
	return &m.mod, true
}

func (m *mapping) resolve(p *Process) {
	m.mod = Module{Start: m.Start, End: m.End, Path: m.Path, Base: m.base}
	var o *Object
	switch {
	case m.Path == "[vdso]":
		o, m.err = p.cache.vdso(p.procDir(), m.Mapping)
		m.mod.Base = m.Start
	case m.Path != "" && m.Path[0] == '/':
		o, m.err = p.cache.object(p.procDir(), m.Mapping, p.lines)
	default:
		return // anonymous or JIT memory
	}
	if o == nil {
		return
	}
	off := m.Offset
	if m.Path == "[vdso]" {
		off = 0
	}
	delta, ok := o.vaddrDelta(off)
	if !ok {
		return
	}
	// vaddr = addr - Start + Offset + delta
	m.mod.Object = o
	m.mod.Bias = m.Start - off - delta
}

// Function names the function symbol holding addr, from the symbol tables
// only (no debug information is read).
func (p *Process) Function(addr uint64) (string, bool) {
	mod, ok := p.Module(addr)
	if !ok || mod.Object == nil {
		return "", false
	}
	name, _, ok := mod.Object.symbolAt(mod.Vaddr(addr))
	return name, ok
}

// Prefetch reads the symbol tables of the modules holding addrs and, with
// lines, the debug information about addrs (their compile units, inlined
// calls, line tables and call sites), several modules at a time and the
// largest first, so that naming frames afterwards waits on none of it. A
// module's symbols and its debug information are read apart: both may
// come from a separate debug file (libc's), each costing milliseconds.
func (p *Process) Prefetch(addrs []uint64, lines bool) {
	type work struct {
		o      *Object
		vaddrs []uint64
	}
	byObj := map[*Object]*work{}
	var objs []*work
	for _, a := range addrs {
		mod, ok := p.Module(a)
		if !ok || mod.Object == nil {
			continue
		}
		w := byObj[mod.Object]
		if w == nil {
			w = &work{o: mod.Object}
			byObj[mod.Object] = w
			objs = append(objs, w)
		}
		w.vaddrs = append(w.vaddrs, mod.Vaddr(a))
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].o.size > objs[j].o.size })
	type task struct {
		w     *work
		lines bool
	}
	queue := make(chan task)
	var wg sync.WaitGroup
	for range min(runtime.NumCPU(), (1+b2i(lines))*len(objs)) {
		wg.Go(func() {
			for t := range queue {
				if !t.lines {
					t.w.o.loadSymbols()
				} else if lt := t.w.o.lineTable(); lt != nil {
					lt.warm(t.w.vaddrs)
				}
			}
		})
	}
	for _, w := range objs {
		if lines {
			queue <- task{w, true}
		}
		queue <- task{w, false}
	}
	close(queue)
	wg.Wait()
}

// Lookup resolves addr to its function and its source line. The second
// result is false when no function symbol holds addr; Module and Offset
// (from the module's base), and the line, are still filled when addr is
// in a mapped file.
func (p *Process) Lookup(addr uint64) (Symbol, bool) {
	return p.lookup(addr, true)
}

// LookupName is Lookup from the symbol tables alone: File and Line stay
// empty, and no debug information is read.
func (p *Process) LookupName(addr uint64) (Symbol, bool) {
	return p.lookup(addr, false)
}

func (p *Process) lookup(addr uint64, lines bool) (Symbol, bool) {
	mod, ok := p.Module(addr)
	if !ok {
		return Symbol{}, false
	}
	s := Symbol{Module: mod.Path, Offset: addr - mod.Base}
	if mod.Object == nil {
		return s, false
	}
	v := mod.Vaddr(addr)
	name, start, ok := mod.Object.symbolAt(v)
	if lines {
		s.File, s.Line = mod.Object.line(v)
	}
	if !ok {
		return s, false
	}
	s.Name, s.Offset = name, v-start
	return s, true
}

// Damage says, for each file holding one of addrs whose headers or debug
// file could not be trusted (Object.Damage), what was left out and where
// names came from, as "path: what" lines, in the order of addrs.
func (p *Process) Damage(addrs []uint64) []string {
	var out []string
	seen := map[*Object]bool{}
	for _, a := range addrs {
		mod, ok := p.Module(a)
		if !ok || mod.Object == nil || seen[mod.Object] {
			continue
		}
		seen[mod.Object] = true
		if d := mod.Object.Damage(); d != "" {
			out = append(out, mod.Path+": "+d)
		}
	}
	return out
}

// ReadLibcAhead starts reading, on another goroutine, the symbols of the
// C library the process maps (libc.so.6, or musl's loader), and returns
// at once: every thread's stack ends in it and most threads wait in it,
// and its symbols may lie in a separate debug file. Lookups that need
// them meanwhile wait for them. Its debug information is not read ahead:
// inflating it (megabytes of zlib) while a dump's threads are stopped
// took the CPU and the scheduler's slots that the stop needs (stops many
// times longer, docs/measurements.md), and is read once they
// run again (Prefetch).
func (p *Process) ReadLibcAhead() {
	p.mu.Lock()
	var libc *mapping
	for _, m := range p.maps {
		if base := path.Base(m.Path); strings.HasPrefix(base, "libc.so") || strings.HasPrefix(base, "libc-") || strings.HasPrefix(base, "ld-musl-") {
			libc = m
			break
		}
	}
	p.mu.Unlock()
	if libc == nil {
		return
	}
	go func() {
		mod, ok := p.Module(libc.Start)
		if !ok || mod.Object == nil {
			return
		}
		mod.Object.loadSymbols()
	}()
}

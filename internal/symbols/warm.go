package symbols

// maxWarmSection bounds the compressed debug sections Warm inflates ahead:
// a larger one is left to be read as far as a dump needs.
const maxWarmSection = 64 << 20

// Warm reads ahead, for every file pid maps executable, what a dump of it
// will need: symbol tables, call frame information, the address index of
// the debug information, and the compressed debug sections inflated whole
// (the costly part of a first dump: libc's .debug_info alone is 2 MB of
// zlib that inflate to 6 MB, which can only be read from its start).
// Everything lands in the cache, so that a later dump of any process
// mapping the same files, the hang dump, finds it there. It reads one file
// at a time, and errors only mean less was read ahead.
func (c *Cache) Warm(pid int) error {
	p, err := c.Process(pid)
	if err != nil {
		return err
	}
	p.Warm()
	return nil
}

// Warm is Cache.Warm for a process whose mappings are read.
func (p *Process) Warm() {
	p.mu.Lock()
	maps := append([]*mapping(nil), p.maps...)
	p.mu.Unlock()
	seen := map[*Object]bool{}
	for _, m := range maps {
		mod, ok := p.Module(m.Start)
		if !ok || mod.Object == nil || seen[mod.Object] {
			continue
		}
		o := mod.Object
		seen[o] = true
		o.FDE(0) // call frame information
		o.loadSymbols()
		if lt := o.lineTable(); lt != nil {
			lt.inflate()
		}
	}
}

// inflate reads the compressed sections of the table's DWARF whole, each
// up to maxWarmSection.
func (lt *lineTable) inflate() {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	di := lt.di
	for _, s := range []*section{di.info, di.abbrev, di.line} {
		if s != nil && s.fill != nil && s.size <= maxWarmSection {
			if di.read(s, s.size) != nil {
				return
			}
		}
	}
	di.index()
}

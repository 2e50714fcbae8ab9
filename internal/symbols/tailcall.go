package symbols

import (
	"debug/dwarf"
	"errors"
	"strings"
)

// GNU (DWARF 4) spellings of the DWARF 5 call site entries.
const (
	tagGNUCallSite          dwarf.Tag  = 0x4109
	attrGNUCallSiteTarget   dwarf.Attr = 0x2113
	attrGNUTailCall         dwarf.Attr = 0x2115
	attrGNUAllTailCallSites dwarf.Attr = 0x2116
	attrGNUAllCallSites     dwarf.Attr = 0x2117
	attrMIPSLinkageName     dwarf.Attr = 0x2007
)

// function is a concrete (out-of-line) function of a compile unit.
type function struct {
	entry    uint64      // ELF address
	complete bool        // every tail call it makes has a call site entry
	tails    []*callSite // its tail calls
}

// callSite is a DW_TAG_call_site: a call, or with tail a jump, to another
// function.
type callSite struct {
	pc     uint64       // ELF address of the instruction after the call or jump
	tail   bool         // a jump: the callee returns to our caller
	origin dwarf.Offset // DIE of the called function; 0 when unknown (an indirect call)

	resolved bool     // addrs and name filled from origin
	addrs    []uint64 // ELF entry addresses of a callee defined in this object
	name     string   // linkage name of a callee only declared here
}

// readCallSite reads a call site entry, nil when it has no address.
func readCallSite(e *dwarf.Entry) *callSite {
	pc, ok := e.Val(dwarf.AttrCallReturnPC).(uint64)
	if !ok {
		if pc, ok = e.Val(dwarf.AttrLowpc).(uint64); !ok {
			return nil
		}
	}
	cs := &callSite{pc: pc, tail: flag(e.Val(dwarf.AttrCallTailCall)) || flag(e.Val(attrGNUTailCall))}
	// A computed target (DW_AT_call_target) needs the caller's registers,
	// which a frame reached by a jump does not have: unknown, as for gdb.
	if e.Val(dwarf.AttrCallTarget) == nil && e.Val(attrGNUCallSiteTarget) == nil {
		if ref, ok := e.Val(dwarf.AttrCallOrigin).(dwarf.Offset); ok {
			cs.origin = ref
		} else if ref, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok {
			cs.origin = ref
		}
	}
	return cs
}

func flag(v any) bool {
	b, ok := v.(bool)
	return ok && b
}

// entry reads the DIE at off. Called with lt.mu held.
func (lt *lineTable) entry(off dwarf.Offset) (e *dwarf.Entry) {
	defer func() {
		if r := recover(); r != nil {
			e = nil
			recovered(r)
		}
	}()
	rd := lt.data(off).Reader()
	rd.Seek(off)
	e, err := rd.Next()
	if err != nil {
		return nil
	}
	return e
}

// attr returns attribute a of e, looking through DW_AT_specification and
// DW_AT_abstract_origin when e lacks it.
func (lt *lineTable) attr(e *dwarf.Entry, a dwarf.Attr) any {
	for hop := 0; hop < 4 && e != nil; hop++ {
		if v := e.Val(a); v != nil {
			return v
		}
		ref, ok := e.Val(dwarf.AttrSpecification).(dwarf.Offset)
		if !ok {
			if ref, ok = e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); !ok {
				return nil
			}
		}
		e = lt.entry(ref)
	}
	return nil
}

// allTailCalls reports whether a function's DIE lists every tail call it
// makes, the condition for searching through it.
func (lt *lineTable) allTailCalls(e *dwarf.Entry) bool {
	for _, a := range []dwarf.Attr{dwarf.AttrCallAllCalls, dwarf.AttrCallAllTailCalls, attrGNUAllCallSites, attrGNUAllTailCallSites} {
		if flag(lt.attr(e, a)) {
			return true
		}
	}
	return false
}

// resolve fills the callee of cs from its origin DIE. Called with lt.mu held.
func (lt *lineTable) resolve(cs *callSite) {
	if cs.resolved {
		return
	}
	cs.resolved = true
	if cs.origin == 0 {
		return
	}
	e := lt.entry(cs.origin)
	if e == nil {
		return
	}
	if flag(lt.attr(e, dwarf.AttrDeclaration)) && lt.attr(e, dwarf.AttrSpecification) == nil {
		for _, a := range []dwarf.Attr{dwarf.AttrLinkageName, attrMIPSLinkageName, dwarf.AttrName} {
			if n, ok := lt.attr(e, a).(string); ok && n != "" {
				cs.name = n
				return
			}
		}
		return
	}
	ranges, _ := lt.data().Ranges(e)
	for _, rg := range ranges {
		cs.addrs = append(cs.addrs, rg[0])
	}
}

// siteRef is a call site in one module of a process.
type siteRef struct {
	mod *Module
	cs  *callSite
}

// pc is the site's return address in the process.
func (s siteRef) pc() uint64 { return s.cs.pc + s.mod.Bias }

// errNoChain stops the search for tail calls: something on the way is
// unknown, so no chain can be trusted.
var errNoChain = errors.New("no tail call chain")

// maxTailSearch bounds the call sites one search visits.
const maxTailSearch = 4096

// TailCalls returns the return addresses of the calls that ran between a
// caller and its callee by tail calls (jumps, which leave nothing on the
// stack), innermost first, recovered from DWARF call site information the
// way gdb does: ret is the return address in the caller, callee an address
// in the callee's function. It returns nil when the call was direct, or the
// information is missing or does not single out one chain; where several
// chains fit, only the calls they share at both ends are returned.
func (p *Process) TailCalls(ret, callee uint64) []uint64 {
	target, ok := p.funcStart(callee)
	if !ok {
		return nil
	}
	first, ok := p.callSiteAt(ret)
	if !ok {
		return nil
	}
	s := &tailSearch{p: p, target: target, seen: map[uint64]bool{}}
	if _, err := s.visit(first); err != nil || s.result == nil || len(s.result) == 0 {
		return nil
	}
	// Innermost first: the callees end of the chain, then, when the two
	// ends do not cover it all, its callers end.
	var out []uint64
	n := len(s.result)
	for i := 0; i < s.callees; i++ {
		out = append(out, s.result[n-1-i].pc())
	}
	if s.callees != n {
		for i := 0; i < s.callers; i++ {
			out = append(out, s.result[s.callers-1-i].pc())
		}
	}
	return out
}

// tailSearch is one depth-first search for the tail calls from a call site
// to a function (gdb's call_site_find_chain).
type tailSearch struct {
	p      *Process
	target uint64          // entry of the callee
	seen   map[uint64]bool // call sites on the current path
	chain  []siteRef       // the current path: tail call sites, outermost first
	steps  int

	result           []siteRef // nil until a chain reaches the target
	callers, callees int       // how many of result's ends every chain shares
}

// visit follows the call at site; false stops the search.
func (s *tailSearch) visit(site siteRef) (bool, error) {
	if s.steps++; s.steps > maxTailSearch {
		return false, errNoChain
	}
	addrs, err := s.p.targets(site, s.target)
	if err != nil {
		return false, err
	}
	for _, a := range addrs {
		if a == s.target {
			return s.candidate(), nil
		}
	}
	for _, a := range addrs {
		tails, err := s.p.tailsOf(a)
		if err != nil {
			return false, err
		}
		for _, t := range tails {
			if s.seen[t.pc()] {
				continue
			}
			s.seen[t.pc()] = true
			s.chain = append(s.chain, t)
			if ok, err := s.visit(t); !ok || err != nil {
				return false, err
			}
			s.chain = s.chain[:len(s.chain)-1]
			delete(s.seen, t.pc())
		}
	}
	return true, nil
}

// candidate records the current path as one chain that reaches the
// target, keeping only the ends all chains share. False: nothing is shared.
func (s *tailSearch) candidate() bool {
	n := len(s.chain)
	if s.result == nil {
		s.result = append([]siteRef{}, s.chain...)
		s.callers, s.callees = n, n
		return true
	}
	for i := 0; i < min(s.callers, n); i++ {
		if s.result[i].pc() != s.chain[i].pc() {
			s.callers = i
			break
		}
	}
	s.callers = min(s.callers, n)
	for i := 0; i < min(s.callees, n); i++ {
		if s.result[len(s.result)-1-i].pc() != s.chain[n-1-i].pc() {
			s.callees = i
			break
		}
	}
	s.callees = min(s.callees, n)
	if s.callers == 0 && s.callees == 0 {
		s.result = nil
		return false
	}
	return true
}

// funcStart returns the entry of the (not inlined) function holding addr:
// from DWARF, else from the symbol tables.
func (p *Process) funcStart(addr uint64) (uint64, bool) {
	mod, ok := p.Module(addr)
	if !ok || mod.Object == nil {
		return 0, false
	}
	v := mod.Vaddr(addr)
	if lt := mod.Object.lineTable(); lt != nil {
		lt.mu.Lock()
		u := lt.unitAt(v)
		if u != nil {
			for _, sc := range u.at(v) {
				if sc.fn != nil {
					lt.mu.Unlock()
					return sc.fn.entry + mod.Bias, true
				}
			}
		}
		lt.mu.Unlock()
	}
	if _, start, ok := mod.Object.symbolAt(v); ok {
		return start + mod.Bias, true
	}
	return 0, false
}

// callSiteAt finds the call site whose return address is ret.
func (p *Process) callSiteAt(ret uint64) (siteRef, bool) {
	mod, ok := p.Module(ret - 1)
	if !ok || mod.Object == nil {
		return siteRef{}, false
	}
	lt := mod.Object.lineTable()
	if lt == nil {
		return siteRef{}, false
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	u := lt.unitAt(mod.Vaddr(ret - 1))
	if u == nil {
		return siteRef{}, false
	}
	cs, ok := u.sites[mod.Vaddr(ret)]
	if !ok {
		return siteRef{}, false
	}
	return siteRef{mod: mod, cs: cs}, true
}

// targets returns the entry addresses a call site may call; target, the
// callee searched for, tells where to look for a callee known by name first.
func (p *Process) targets(s siteRef, target uint64) ([]uint64, error) {
	lt := s.mod.Object.lineTable()
	lt.mu.Lock()
	lt.resolve(s.cs)
	addrs, name := s.cs.addrs, s.cs.name
	lt.mu.Unlock()
	if len(addrs) > 0 {
		out := make([]uint64, len(addrs))
		for i, a := range addrs {
			out[i] = a + s.mod.Bias
		}
		return out, nil
	}
	if name != "" {
		if a, ok := p.addrOf(name, s.mod, target); ok {
			return []uint64{a}, nil
		}
	}
	return nil, errNoChain
}

// tailsOf returns the tail call sites of the function entered at addr. It
// fails when no function with debug information starts there; a function
// whose tail calls are not all known has none to follow.
func (p *Process) tailsOf(addr uint64) ([]siteRef, error) {
	mod, ok := p.Module(addr)
	if !ok || mod.Object == nil {
		return nil, errNoChain
	}
	lt := mod.Object.lineTable()
	if lt == nil {
		return nil, errNoChain
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	u := lt.unitAt(mod.Vaddr(addr))
	if u == nil {
		return nil, errNoChain
	}
	fn, ok := u.funcs[mod.Vaddr(addr)]
	if !ok {
		return nil, errNoChain
	}
	if !fn.complete {
		return nil, nil
	}
	out := make([]siteRef, len(fn.tails))
	for i, cs := range fn.tails {
		out[i] = siteRef{mod: mod, cs: cs}
	}
	return out, nil
}

// addrOf finds a function by its symbol name in the process: the first
// module defining it globally, else the first defining it locally. gdb
// looks modules up in load order; here the modules of the caller and of
// the callee come first, and a local definition there ends the search,
// which saves reading the symbols of every module. Only a name defined in
// several modules (interposed) can resolve differently.
func (p *Process) addrOf(name string, caller *Module, callee uint64) (uint64, bool) {
	var local uint64
	found := false
	seen := map[*Object]bool{}
	look := func(mod *Module) bool {
		o := mod.Object
		if o == nil || seen[o] {
			return false
		}
		seen[o] = true
		v, global, ok := o.addrOf(name)
		if !ok {
			return false
		}
		if global {
			local, found = v+mod.Bias, true
			return true
		}
		if !found {
			local, found = v+mod.Bias, true
		}
		return false
	}
	first := []*Module{caller}
	if mod, ok := p.Module(callee); ok {
		first = append(first, mod)
	}
	for _, mod := range first {
		if look(mod) {
			return local, true
		}
	}
	if found {
		// A local definition next to the call (a hidden alias such as
		// glibc's __GI_ names): what gdb finds too, unless another module
		// defined the name globally.
		return local, true
	}
	for _, mod := range p.modules() {
		if look(mod) {
			return local, true
		}
	}
	return local, found
}

// modules resolves every executable mapping, in address order.
func (p *Process) modules() []*Module {
	p.mu.Lock()
	maps := append([]*mapping(nil), p.maps...)
	p.mu.Unlock()
	out := make([]*Module, 0, len(maps))
	for _, m := range maps {
		m.once.Do(func() { m.resolve(p) })
		out = append(out, &m.mod)
	}
	return out
}

// addrOf finds a function symbol by name (any version), preferring a
// global one.
func (o *Object) addrOf(name string) (vaddr uint64, global, ok bool) {
	if o.loadSymbols() != nil {
		return 0, false, false
	}
	o.nameOnce.Do(func() {
		byName := make(map[string]int, len(o.syms))
		if err := faultSafely(o.strMapped, func() {
			for i, s := range o.syms {
				n := cstring(o.strtab[s.tab], s.name)
				if at := strings.IndexByte(n, '@'); at > 0 {
					n = n[:at]
				}
				if j, dup := byName[n]; !dup || (s.global && !o.syms[j].global) {
					byName[n] = i
				}
			}
		}); err != nil {
			byName = map[string]int{} // the file was truncated: no names
		}
		o.byName = byName
		// A map entry (about 48 bytes with its share of buckets) and the
		// name's own copy.
		n := 0
		for k := range o.byName {
			n += 48 + len(k)
		}
		o.mem.Add(int64(n))
	})
	i, ok := o.byName[name]
	if !ok {
		return 0, false, false
	}
	return o.syms[i].addr, o.syms[i].global, true
}

package symbols

import (
	"cmp"
	"debug/dwarf"
	"slices"
	"sort"
)

// scope is a function or an inlined call of one compile unit.
type scope struct {
	lo, hi   uint64
	depth    int
	name     string
	callFile string // for inlined calls: where the call sits in the enclosing function
	callLine int
	order    int       // DIE order in the unit
	fn       *function // the concrete function, nil for an inlined call
}

// unitInfo is what one compile unit's DIEs say about its code.
type unitInfo struct {
	scopes []scope
	funcs  map[uint64]*function // concrete functions by entry address
	sites  map[uint64]*callSite // call sites by return address
}

// unitInfo parses the unit at off on first use. Called with lt.mu held.
func (lt *lineTable) unitInfo(off dwarf.Offset) *unitInfo {
	if lt.infos == nil {
		lt.infos = map[dwarf.Offset]*unitInfo{}
	}
	if u, ok := lt.infos[off]; ok {
		return u
	}
	u := &unitInfo{funcs: map[uint64]*function{}, sites: map[uint64]*callSite{}}
	func() {
		defer func() { recover() }() // corrupt DWARF: what was read so far
		d := lt.data(off)
		rd := d.Reader()
		rd.Seek(lt.entryOf(off))
		cu, err := rd.Next()
		if err != nil || cu == nil {
			return
		}
		var files []*dwarf.LineFile
		if lr, err := lt.lineReader(d, cu); err == nil && lr != nil {
			files = lr.Files()
		}
		names := map[dwarf.Offset]string{}
		var ns []string // enclosing namespaces and classes
		depth := 0
		type open struct {
			pushed bool      // pushed a namespace
			fn     *function // a concrete function
		}
		var stack []open // per open DIE with children
		var fns []*function
		for {
			e, err := rd.Next()
			if err != nil || e == nil {
				break
			}
			if e.Tag == 0 {
				depth--
				if len(stack) > 0 {
					top := stack[len(stack)-1]
					if top.pushed {
						ns = ns[:len(ns)-1]
					}
					if top.fn != nil {
						fns = fns[:len(fns)-1]
					}
					stack = stack[:len(stack)-1]
				}
				if depth < 0 {
					break
				}
				continue
			}
			o := open{}
			switch e.Tag {
			case dwarf.TagNamespace, dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType:
				n, _ := e.Val(dwarf.AttrName).(string)
				if n == "" {
					n = "(anonymous namespace)"
				}
				ns = append(ns, n)
				o.pushed = true
			case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
				name := lt.dieName(e, ns, names)
				if name != "" {
					names[e.Offset] = name
				}
				ranges, _ := lt.data().Ranges(e)
				var cf string
				var cl int
				var fn *function
				if e.Tag == dwarf.TagInlinedSubroutine {
					if i, ok := e.Val(dwarf.AttrCallFile).(int64); ok && i >= 0 && int(i) < len(files) && files[i] != nil {
						cf = files[i].Name
					}
					if l, ok := e.Val(dwarf.AttrCallLine).(int64); ok {
						cl = int(l)
					}
				} else if len(ranges) > 0 {
					fn = &function{entry: ranges[0][0], complete: lt.allTailCalls(e)}
					if _, dup := u.funcs[fn.entry]; !dup {
						u.funcs[fn.entry] = fn
					}
					o.fn = fn
				}
				for _, rg := range ranges {
					if rg[0] < rg[1] {
						u.scopes = append(u.scopes, scope{lo: rg[0], hi: rg[1], depth: depth, name: name, callFile: cf, callLine: cl, order: len(u.scopes), fn: fn})
					}
				}
			case dwarf.TagCallSite, tagGNUCallSite:
				if cs := readCallSite(e); cs != nil {
					u.sites[cs.pc] = cs
					if cs.tail && len(fns) > 0 {
						f := fns[len(fns)-1]
						f.tails = append(f.tails, cs)
					}
				}
			}
			if e.Children {
				depth++
				stack = append(stack, o)
				if o.fn != nil {
					fns = append(fns, o.fn)
				}
			} else if o.pushed {
				ns = ns[:len(ns)-1]
			}
		}
	}()
	slices.SortFunc(u.scopes, func(a, b scope) int { return cmp.Compare(a.lo, b.lo) })
	lt.infos[off] = u
	return u
}

// unitAt returns the unit holding vaddr. Called with lt.mu held.
func (lt *lineTable) unitAt(vaddr uint64) *unitInfo {
	if u, ok := lt.unitOf(vaddr); ok {
		return lt.unitInfo(u.off)
	}
	return nil
}

// at lists the scopes holding vaddr, innermost first. Of aliases at one
// depth (assembly functions with several labels) it keeps the last, as gdb
// does.
func (u *unitInfo) at(vaddr uint64) []scope {
	var hit []scope
	for _, s := range u.scopes {
		if s.lo > vaddr {
			break
		}
		if vaddr < s.hi {
			hit = append(hit, s)
		}
	}
	sort.SliceStable(hit, func(a, b int) bool {
		if hit[a].depth != hit[b].depth {
			return hit[a].depth > hit[b].depth
		}
		return hit[a].order > hit[b].order
	})
	uniq := hit[:0]
	for k, s := range hit {
		if k == 0 || s.depth != hit[k-1].depth {
			uniq = append(uniq, s)
		}
	}
	return uniq
}

// dieName names a subprogram or inlined call the way gdb does: its linkage
// name demangled when it has one, else its qualified name, following
// abstract origins and specifications.
func (lt *lineTable) dieName(e *dwarf.Entry, ns []string, names map[dwarf.Offset]string) string {
	for hop := 0; hop < 4 && e != nil; hop++ {
		for _, a := range []dwarf.Attr{dwarf.AttrLinkageName, 0x2007 /* DW_AT_MIPS_linkage_name */} {
			if n, ok := e.Val(a).(string); ok && n != "" {
				return Demangle(n)
			}
		}
		if n, ok := e.Val(dwarf.AttrName).(string); ok && n != "" {
			q := ""
			if hop == 0 {
				for _, p := range ns {
					q += p + "::"
				}
			}
			return q + n
		}
		var ref dwarf.Offset
		var ok bool
		if ref, ok = e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); !ok {
			if ref, ok = e.Val(dwarf.AttrSpecification).(dwarf.Offset); !ok {
				return ""
			}
		}
		if n, ok := names[ref]; ok {
			return n
		}
		if e = lt.entry(ref); e == nil {
			return ""
		}
	}
	return ""
}

// inline returns the functions at vaddr, innermost inlined call first,
// the function holding them last. nil without DWARF.
func (o *Object) inline(vaddr uint64) []Symbol {
	lt := o.lineTable()
	if lt == nil {
		return nil
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	u := lt.unitAt(vaddr)
	if u == nil {
		return nil
	}
	hit := u.at(vaddr)
	if len(hit) == 0 {
		return nil
	}
	file, line := lt.lookupLocked(vaddr)
	out := make([]Symbol, 0, len(hit))
	for _, s := range hit {
		out = append(out, Symbol{Name: s.name, File: file, Line: line})
		file, line = s.callFile, s.callLine
	}
	return out
}

// LookupInline resolves addr to the chain of functions executing there,
// innermost inlined call first (as gdb prints inlined frames). It returns
// nil when the module has no DWARF for addr; use Lookup then.
func (p *Process) LookupInline(addr uint64) []Symbol {
	mod, ok := p.Module(addr)
	if !ok || mod.Object == nil {
		return nil
	}
	v := mod.Vaddr(addr)
	out := mod.Object.inline(v)
	if len(out) == 0 {
		return nil
	}
	name, start, found := mod.Object.symbolAt(v)
	for i := range out {
		out[i].Module = mod.Path
		out[i].Offset = v - start
		if out[i].Name == "" && found {
			out[i].Name = name
		}
	}
	if !found {
		for i := range out {
			out[i].Offset = addr - mod.Base
		}
	}
	return out
}

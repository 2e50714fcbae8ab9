//go:build linux && (386 || amd64)

package ebpf

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/xpu-timer/xpu-timer/internal/symbols"
)

// kernelNames names the func pointer of a launch, cached per process and
// address. Two sources, in this order:
//
//   - the BPF map func_names: the name a process passed to
//     cuModuleGetFunction or cuLibraryGetKernel for the handle it got back,
//     the only name an opaque CUfunction or CUkernel of NVIDIA's driver has;
//   - the ELF symbol that starts at the address, demangled: a runtime
//     launch's host stub, or a function pointer standing for the kernel.
//
// An address neither names stays "" (the timer shows the handle). The
// reader's, used from Run's goroutine only, but for since, which the
// follower sets as it attaches and detaches the lookups' probes.
type kernelNames struct {
	cache   *symbols.Cache
	handles *ebpf.Map // func_names; nil in tests without BPF
	procs   map[int]*procNames
	recent  [recentNames]recentName // the latest lookups, by a hash of pid and address

	// The kernel lookups' news (lookups.go). A handle nothing names when
	// it is first launched is pending until its first launch after the
	// lookups' probes came (since, monotonic ns; 0 while they are away),
	// plus lookupMargin: a lookup made before that launch (cuBLASLt's,
	// before each) named it then, or none will, and it is given up. One
	// that launches no more is given up after maxPendingAge.
	since    *atomic.Int64
	unnamed  bool // a handle became pending since takeNews
	npending int  // handles pending, all processes
}

// maxUnnamed bounds the handles of a process pending or given up: a
// process with more keeps the kernel lookups' probes as they are.
const maxUnnamed = 4096

// lookupMargin is how long after the lookups' probes came a launch must
// come for its lookup, made just before it, to have been probed.
const lookupMargin = int64(time.Millisecond)

// maxPendingAge is how long a handle stays pending at most.
const maxPendingAge = int64(30 * time.Second)

// recentName is a lookup kept in kernelNames.recent.
type recentName struct {
	pid     int
	addr    uint64
	name    string
	pending bool // the handle is pending: looked up again (lookup)
}

// recentNames is how many lookups are kept, each in the slot of its pid
// and address (recentSlot): the ranks of a node launch at once, their
// records interleaved, each a loop of a few dozen kernels. A hit costs
// a compare where the two maps cost 20-25 ns a launch.
const recentNames = 256

// recentSlot is the slot of pid's address addr in kernelNames.recent.
func recentSlot(pid int, addr uint64) uint {
	return uint((addr^uint64(pid)<<40)*0x9e3779b97f4a7c15>>56) % recentNames
}

// forgetRecent clears pid's kept lookups, or only those that named
// nothing (unnamed).
func (k *kernelNames) forgetRecent(pid int, unnamed bool) {
	for i := range k.recent {
		if r := &k.recent[i]; r.pid == pid && (!unnamed || r.name == "") {
			*r = recentName{}
		}
	}
}

type procNames struct {
	syms    *symbols.Process
	names   map[uint64]string
	stale   bool             // the process mapped code since its maps were last read
	pending map[uint64]int64 // handles pending (kernelNames), since when (launch time)
	given   map[uint64]bool  // handles given up on: never named by a lookup the probes saw
}

func newKernelNames(handles *ebpf.Map) *kernelNames {
	return &kernelNames{cache: symbols.NewCache(), handles: handles, procs: map[int]*procNames{}, since: new(atomic.Int64)}
}

// lookup names the function at addr in pid, launched at at (monotonic
// ns), "" when nothing names it.
func (k *kernelNames) lookup(pid int, addr uint64, at int64) string {
	if addr == 0 {
		return ""
	}
	r := &k.recent[recentSlot(pid, addr)]
	if r.pid == pid && r.addr == addr && !r.pending {
		return r.name
	}
	p := k.procs[pid]
	if p == nil {
		syms, err := k.cache.Process(pid)
		if err != nil {
			return ""
		}
		p = &procNames{syms: syms, names: map[uint64]string{}}
		k.procs[pid] = p
	}
	name, ok := p.names[addr]
	_, pending := p.pending[addr]
	switch {
	case !ok:
		name = k.handleName(pid, addr)
		if name == "" {
			name = p.symbol(addr)
		}
		p.names[addr] = name
		switch {
		case name != "" && pending: // named since (learned)
			delete(p.pending, addr)
			k.npending--
		case name == "" && !pending && !p.given[addr] && len(p.pending)+len(p.given) < maxUnnamed:
			if p.pending == nil {
				p.pending, p.given = map[uint64]int64{}, map[uint64]bool{}
			}
			p.pending[addr] = at
			k.npending++
			k.unnamed = true
		}
	case pending:
		// Its first launch since the probes came: named by the lookup
		// before it, or never.
		if since := k.since.Load(); since != 0 && at > since+lookupMargin {
			name = k.handleName(pid, addr)
			p.names[addr] = name
			delete(p.pending, addr)
			k.npending--
			if name == "" {
				p.given[addr] = true
			}
		}
	}
	_, pending = p.pending[addr]
	*r = recentName{pid: pid, addr: addr, name: name, pending: pending}
	return name
}

// takeNews says whether a handle became pending since the last call, and
// how many are pending, after giving up on those pending since before
// now - maxPendingAge (monotonic ns).
func (k *kernelNames) takeNews(now int64) (unnamed bool, pending int) {
	if k.npending > 0 {
		for pid, p := range k.procs {
			for a, at := range p.pending {
				if now-at > maxPendingAge {
					delete(p.pending, a)
					p.given[a] = true
					k.npending--
					k.forgetRecent(pid, true)
				}
			}
		}
	}
	u := k.unnamed
	k.unnamed = false
	return u, k.npending
}

// handleName is the name the driver's lookup of addr was made with.
func (k *kernelNames) handleName(pid int, addr uint64) string {
	if k.handles == nil {
		return ""
	}
	var v probesFuncName
	if err := k.handles.Lookup(probesFuncKey{Pid: uint32(pid), Handle: addr}, &v); err != nil {
		return ""
	}
	return keptName(unsafe.Slice((*byte)(unsafe.Pointer(&v.Name[0])), len(v.Name)))
}

// symbol is the name of the function starting at addr. An address inside
// a function (or in data after a symbol) is no kernel's entry: not named.
func (p *procNames) symbol(addr uint64) string {
	s, ok := p.syms.Lookup(addr)
	if !ok && p.stale {
		// A library mapped since the maps were read: read them again.
		p.stale = false
		if p.syms.Refresh() == nil {
			s, ok = p.syms.Lookup(addr)
		}
	}
	if !ok || s.Offset != 0 {
		return ""
	}
	return s.Name
}

// mapped marks that pid mapped code: the next miss reads its maps again,
// and what was not found before may be found now.
func (k *kernelNames) mapped(pid int) {
	p := k.procs[pid]
	if p == nil {
		return
	}
	p.stale = true
	k.forgetRecent(pid, true)
	for a, n := range p.names {
		if n == "" {
			delete(p.names, a)
		}
	}
}

// learned is told that the BPF side named handles it had not: what named
// nothing is looked up again at its next launch.
func (k *kernelNames) learned() {
	for i := range k.recent {
		if k.recent[i].name == "" {
			k.recent[i] = recentName{}
		}
	}
	for _, p := range k.procs {
		for a, n := range p.names {
			if n == "" {
				delete(p.names, a)
			}
		}
	}
}

// forget drops what is known of a process (exit or exec), in the BPF map
// too.
func (k *kernelNames) forget(pid int) {
	if p := k.procs[pid]; p != nil {
		k.npending -= len(p.pending)
	}
	delete(k.procs, pid)
	k.forgetRecent(pid, false)
	if k.handles == nil {
		return
	}
	var (
		key  probesFuncKey
		val  probesFuncName
		gone []probesFuncKey
	)
	it := k.handles.Iterate()
	for it.Next(&key, &val) {
		if key.Pid == uint32(pid) {
			gone = append(gone, key)
		}
	}
	for _, key := range gone {
		_ = k.handles.Delete(key)
	}
}

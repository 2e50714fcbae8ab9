//go:build linux && (386 || amd64)

package ebpf

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

var descendants = procfs.Descendants

// defaultLinger is how long a library nobody follows keeps its probes: a
// process that execs (a shell or pyenv shim chain), a launcher that
// restarts its ranks, or a scan that runs behind the events maps the same
// file again within it, and detaching costs the kernel an RCU grace period
// per link.
const defaultLinger = 10 * time.Second

// library is one probed library file, shared by every followed process
// that maps it. Its uprobes carry no PID: the kernel puts them into every
// process mapping the file (so a second rank that loads it is covered from
// its first call) and the programs keep only followed thread groups.
type library struct {
	key    libKey
	path   string
	refs   int
	idle   time.Time // when refs fell to 0; zero while referenced
	links  []link.Link
	probes int   // symbols probed, entry and return probes counted apart
	gpu    bool  // probes GPU calls (not only the loader's)
	roles  uint8 // roleDriver, roleCollective (hold_linux.go)

	// The kernel lookups' probes (partLookup), attached on demand
	// (lookups.go): where and what to attach, and their links while
	// attached.
	file         string
	syms         map[string]uint64
	lookup       []probe
	lookups      []link.Link
	lookupProbes int
}

// allLinks are l's links, the lookups' too.
func (l *library) allLinks() []link.Link {
	return append(append([]link.Link(nil), l.links...), l.lookups...)
}

// closeLinks detaches links concurrently: a uprobe's detach waits for an
// RCU grace period, so 40 links take one grace period, not 40. Never
// called with f.mu held.
func closeLinks(links []link.Link) {
	var wg sync.WaitGroup
	for _, k := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = k.Close()
		}()
	}
	wg.Wait()
}

// detach closes links in the background, so that neither the event loop
// nor a lock waits on the kernel; Close waits for them, bounded.
func (f *follower) detach(links []link.Link) {
	if len(links) == 0 {
		return
	}
	f.closing.Add(1)
	go func() {
		defer f.closing.Done()
		closeLinks(links)
	}()
}

// acquire takes a reference on a library for pid, attaching its probes
// when it is not attached yet (attached says so); f.mu held.
func (f *follower) acquire(pid int, m mappedLib, syms map[string]uint64) (attached bool, err error) {
	if l := f.libs[m.Key]; l != nil {
		l.refs++
		l.idle = time.Time{}
		return false, nil
	}
	file := m.Path // preloaded (pid 0): as named here
	if pid != 0 {
		file = procPath(pid, m.Path)
	}
	l, probed, missing, err := f.attach(file, syms)
	if err != nil {
		return false, err
	}
	l.key, l.path = m.Key, m.Path
	l.refs = 1
	f.libs[m.Key] = l
	f.notice(Notice{Kind: NoticeAttach, PID: pid, Library: m.Path, Attached: probed})
	if len(missing) > 0 {
		f.notice(Notice{Kind: NoticeMissing, PID: pid, Library: m.Path, Missing: missing})
	}
	return true, nil
}

// preload probes a library named by its path before any process maps it.
// Uprobes live on the file: a process that loads it later is traced from
// its first call, where one found by a scan of its maps races the scan.
// The tracer holds this reference until Close. What fails is a notice.
func (f *follower) preload(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(err error) { f.notice(Notice{Kind: NoticeError, Library: path, Err: err}) }
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		fail(fmt.Errorf("preload %s: %w", path, err))
		return
	}
	// As /proc/PID/maps names the device: "fd:01".
	k := libKey{Dev: fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev)), Inode: st.Ino}
	syms, err := exportedProbeSymbols(path)
	if err != nil {
		fail(err)
		return
	}
	f.scanned[k] = syms
	if len(syms) == 0 {
		fail(fmt.Errorf("preload %s: %w", path, ErrNoProbedSymbols))
		return
	}
	if _, err := f.acquire(0, mappedLib{Key: k, Path: path}, syms); err != nil {
		fail(err)
	}
}

// release drops a reference. A library nobody references keeps its probes
// for Options.Linger (see expire); f.mu held.
func (f *follower) release(k libKey) {
	l := f.libs[k]
	if l == nil {
		return
	}
	if l.refs--; l.refs <= 0 {
		l.refs = 0
		l.idle = time.Now()
	}
}

// expire detaches the libraries nobody has referenced for Options.Linger;
// f.mu held (the links close in the background).
func (f *follower) expire(now time.Time) {
	linger := f.opts.Linger
	if linger <= 0 {
		linger = defaultLinger
	}
	for k, l := range f.libs {
		if l.refs == 0 && !l.idle.IsZero() && now.Sub(l.idle) >= linger {
			f.detach(l.allLinks())
			delete(f.libs, k)
		}
	}
}

// attach probes every known symbol a library exports, at the file offsets
// the scan found. With uprobe_multi links (Linux 6.6+) each program takes
// the library's symbols in one call, each with its cookie; otherwise one
// uprobe per symbol. A symbol the library lacks is reported missing; any
// other failure detaches what was attached and fails.
//
// The kernel lookups' probes (partLookup) are attached with the rest, the
// lookups' learning begins (lookups.go), and they are kept apart so that
// they can go and come back on their own.
func (f *follower) attach(path string, syms map[string]uint64) (*library, []string, []string, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	want, missing := plan(syms, f.opts)
	l := &library{file: path, syms: syms}
	var core []probe
	for _, p := range want {
		l.gpu = l.gpu || p.Group != loaderProbe.Group
		l.roles |= roleOf(p)
		if p.Part == partLookup {
			l.lookup = append(l.lookup, p)
		} else {
			core = append(core, p)
		}
	}
	attached, absent, err := f.attachSet(l, ex, core, syms)
	if err == nil && len(l.lookup) > 0 {
		lk := &library{}
		var more []string
		more, _, err = f.attachSet(lk, ex, l.lookup, syms)
		l.lookups, l.lookupProbes = lk.links, lk.probes
		attached = append(attached, more...)
		now := monotonicNow()
		if err == nil {
			f.since.Store(int64(now))
		}
		f.lookupNews(now) // learning begins
	}
	if err != nil {
		f.detach(l.allLinks())
		return nil, nil, nil, fmt.Errorf("attach in %s: %w", path, err)
	}
	missing = append(missing, absent...)
	sort.Strings(missing)
	return l, attached, missing, nil
}

// attachSet attaches the probes want of a library into l's links, and
// says which it attached and which symbols it lacks (single uprobes
// only: a uprobe_multi link takes them all or fails).
func (f *follower) attachSet(l *library, ex *link.Executable, want []probe, syms map[string]uint64) (attached, missing []string, err error) {
	if f.multi {
		err = f.attachMulti(l, ex, want, syms)
		for _, p := range want {
			attached = append(attached, p.Symbol)
		}
		return attached, nil, err
	}
	// the issuers last (issuersLast)
	want = slices.Clone(want)
	slices.SortStableFunc(want, func(a, b probe) int { return issuersLast(a.Entry, b.Entry) })
	for _, p := range want {
		err = f.attachProbe(l, ex, p, syms[p.Symbol], cookieOf(p, syms))
		if errors.Is(err, link.ErrNoSymbol) {
			missing = append(missing, p.Symbol)
			err = nil
			continue
		}
		if err != nil {
			return attached, missing, fmt.Errorf("%s: %w", p.Symbol, err)
		}
		attached = append(attached, p.Symbol)
	}
	return attached, missing, nil
}

// attachMulti attaches one uprobe_multi link per program (and one
// uretprobe_multi link per exit program) covering every symbol it serves.
func (f *follower) attachMulti(l *library, ex *link.Executable, want []probe, syms map[string]uint64) error {
	type group struct{ offsets, cookies []uint64 }
	entries, exits := map[string]*group{}, map[string]*group{}
	add := func(m map[string]*group, prog string, p probe) {
		g := m[prog]
		if g == nil {
			g = &group{}
			m[prog] = g
		}
		l.probes++
		g.offsets = append(g.offsets, syms[p.Symbol])
		g.cookies = append(g.cookies, cookieOf(p, syms))
	}
	for _, p := range want {
		if p.Entry != "" {
			add(entries, p.Entry, p)
		}
		if p.Exit != "" && !f.opts.NoReturnProbes {
			add(exits, p.Exit, p)
		}
	}
	// Return probes first (see attachProbe), then the entries, the
	// issuers last (issuersLast).
	for _, side := range []struct {
		groups map[string]*group
		attach func([]string, *ebpf.Program, *link.UprobeMultiOptions) (link.Link, error)
	}{{exits, ex.UretprobeMulti}, {entries, ex.UprobeMulti}} {
		for _, name := range slices.SortedFunc(maps.Keys(side.groups), issuersLast) {
			g := side.groups[name]
			prog, err := f.program(name)
			if err != nil {
				return err
			}
			k, err := side.attach(nil, prog, &link.UprobeMultiOptions{Addresses: g.offsets, Cookies: g.cookies})
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			l.links = append(l.links, k)
		}
	}
	return nil
}

// attachProbe attaches p's return probe, then its entry probe. Processes
// run on while their libraries are probed, and a call that begins between
// the two attaches is seen by the one attached first alone. A return seen
// without its entry finds no stash and records nothing; an entry seen
// without its return would leave the call outstanding for good: a thread
// waiting forever in a synchronize that returned, a false hang
// (TestAttachWhileCalling).
func (f *follower) attachProbe(l *library, ex *link.Executable, p probe, offset, cookie uint64) error {
	opts := &link.UprobeOptions{Cookie: cookie, Address: offset}
	if p.Exit != "" && !f.opts.NoReturnProbes {
		prog, err := f.program(p.Exit)
		if err != nil {
			return err
		}
		k, err := ex.Uretprobe(p.Symbol, prog, opts)
		if err != nil {
			return err
		}
		l.links = append(l.links, k)
		l.probes++
	}
	if p.Entry != "" {
		prog, err := f.program(p.Entry)
		if err != nil {
			return err
		}
		k, err := ex.Uprobe(p.Symbol, prog, opts)
		if err != nil {
			return err
		}
		l.links = append(l.links, k)
		l.probes++
	}
	return nil
}

// programs indexes the loaded programs by their names in probes.bpf.c,
// from the ebpf struct tags bpf2go wrote.
func programs(objs *probesPrograms) map[string]*ebpf.Program {
	out := map[string]*ebpf.Program{}
	v := reflect.ValueOf(objs).Elem()
	for i := 0; i < v.NumField(); i++ {
		if name := v.Type().Field(i).Tag.Get("ebpf"); name != "" {
			if p, ok := v.Field(i).Interface().(*ebpf.Program); ok {
				out[name] = p
			}
		}
	}
	return out
}

// program finds a loaded program by its name in probes.bpf.c.
func (f *follower) program(name string) (*ebpf.Program, error) {
	if p := f.progs[name]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("no program %s", name)
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

var descendants = procfs.Descendants

// library is one probed library file, shared by every followed process
// that maps it. Its uprobes carry no PID: the kernel puts them into every
// process mapping the file (so a second rank that loads it is covered from
// its first call) and the programs keep only followed thread groups.
type library struct {
	path  string
	refs  int
	links []link.Link
}

// close detaches every probe of the library. Detaching a uprobe costs the
// kernel tens of milliseconds (it waits for an RCU grace period), so the
// links are closed concurrently: 40 probes take one grace period, not 40.
func (l *library) close() {
	closeLinks(l.links)
	l.links = nil
}

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

// acquire takes a reference on a library for pid, attaching its probes
// when it is the first; t.mu held.
func (t *Tracer) acquire(pid int, m mappedLib, syms map[string]bool) error {
	if l := t.libs[m.Key]; l != nil {
		l.refs++
		return nil
	}
	file := m.Path // preloaded (pid 0): as named here
	if pid != 0 {
		file = procPath(pid, m.Path)
	}
	l, attached, missing, err := t.attach(file, syms)
	if err != nil {
		return err
	}
	l.path = m.Path
	l.refs = 1
	t.libs[m.Key] = l
	t.notice(Notice{Kind: "attach", PID: pid, Library: m.Path, Attached: attached})
	if len(missing) > 0 {
		t.notice(Notice{Kind: "missing", PID: pid, Library: m.Path, Missing: missing})
	}
	return nil
}

// preload probes a library named by its path before any process maps it.
// Uprobes live on the file: a process that loads it later is traced from
// its first call, where one found by a scan of its maps races the scan.
// The tracer holds this reference until Close. What fails is a notice.
func (t *Tracer) preload(path string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fail := func(err error) { t.notice(Notice{Kind: "error", Library: path, Err: err}) }
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
	t.scanned[k] = syms
	if len(syms) == 0 {
		fail(fmt.Errorf("preload %s: %w", path, ErrNoProbedSymbols))
		return
	}
	if err := t.acquire(0, mappedLib{Key: k, Path: path}, syms); err != nil {
		fail(err)
	}
}

// release drops a reference and detaches the library with the last; t.mu held.
func (t *Tracer) release(k libKey) {
	l := t.libs[k]
	if l == nil {
		return
	}
	if l.refs--; l.refs <= 0 {
		l.close()
		delete(t.libs, k)
	}
}

// attach probes every known symbol a library exports. A symbol the
// library lacks is reported missing; any other failure detaches what was
// attached and fails.
func (t *Tracer) attach(path string, syms map[string]bool) (*library, []string, []string, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	want, missing := plan(syms)
	l := &library{}
	var attached []string
	for _, p := range want {
		err := t.attachProbe(l, ex, p)
		if errors.Is(err, link.ErrNoSymbol) {
			missing = append(missing, p.Symbol)
			continue
		}
		if err != nil {
			l.close()
			return nil, nil, nil, fmt.Errorf("attach %s in %s: %w", p.Symbol, path, err)
		}
		attached = append(attached, p.Symbol)
	}
	sort.Strings(missing)
	return l, attached, missing, nil
}

func (t *Tracer) attachProbe(l *library, ex *link.Executable, p probe) error {
	opts := &link.UprobeOptions{Cookie: p.Cookie()}
	if p.Entry != "" {
		prog, err := t.program(p.Entry)
		if err != nil {
			return err
		}
		k, err := ex.Uprobe(p.Symbol, prog, opts)
		if err != nil {
			return err
		}
		l.links = append(l.links, k)
	}
	if p.Exit != "" && !t.opts.NoReturnProbes {
		prog, err := t.program(p.Exit)
		if err != nil {
			return err
		}
		k, err := ex.Uretprobe(p.Symbol, prog, opts)
		if err != nil {
			return err
		}
		l.links = append(l.links, k)
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
func (t *Tracer) program(name string) (*ebpf.Program, error) {
	if p := t.progs[name]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("no program %s", name)
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/ebpf/internal/ring"
	"github.com/xpu-timer/xpu-timer/internal/monoclock"
	"github.com/xpu-timer/xpu-timer/timer"
)

// rescanDelay is how long after a fork or exec a process's maps are read
// once more, after the scan made at once: a safety net for what the first
// read might have missed.
const rescanDelay = 20 * time.Millisecond

// pollInterval bounds how long a call record may wait in its ring while
// records come: the BPF side wakes the reader only each quarter ring, and
// only a resting one heeds it (reserve in probes.bpf.c, ring.Rings.Poll),
// so the reader looks on its own this often (ring.IdleInterval while the rings
// are idle), and before each process record.
const pollInterval = ring.CollectInterval

// inFlightWait bounds how long a process record waits for call records
// that were reserved but not yet published when it was read (a writer
// preempted inside its program), so that a process's calls come before
// its exit.
const inFlightWait = time.Millisecond

// maxScanLag bounds how long a process that mapped code waits for its scan
// while records keep coming: scans wait for the ring buffer to drain, so
// that a burst of mmaps (a Python import) costs one read of the maps.
const maxScanLag = 2 * time.Millisecond

// closeWait bounds how long Close waits for links to detach: the kernel
// may take long under load, and nothing is lost by returning first (the
// links go with this process at the latest).
const closeWait = 2 * time.Second

// Tracer follows processes and reports their GPU API calls.
type Tracer struct {
	opts     Options
	objs     probesObjects
	followed *followedSet    // the map followed, mapped
	hooks    []link.Link     // scheduler hooks
	rd       *ringbuf.Reader // process records (map procs)
	procWait *readyWait      // Run waits for them here, or nil (see newReadyWait)
	rings    *ring.Rings     // call records (map calls)
	wakes    *wakeWait       // the collector waits for the programs here, or nil
	nudged   atomic.Bool     // the collector ended Run's wait (nudge)
	calls    []ring.Record   // records being delivered; Run's goroutine only
	batch    []timer.Event   // events being delivered (deliverBatch); Run's goroutine only
	progs    map[string]*ebpf.Program
	names    *kernelNames
	events   atomic.Uint64
	multi    bool           // attach with uprobe_multi links (Linux 6.6+)
	closing  sync.WaitGroup // links detaching in the background

	// onLoader, when set before Run, is called with t.mu held for each
	// loader record (ld.so's r_brk) of a followed process, with its BPF
	// time (CLOCK_MONOTONIC ns): for benchmarks of the attach latency.
	onLoader func(pid int, ktime uint64)

	mu      sync.Mutex
	procs   map[int]*process
	libs    map[libKey]*library
	scanned map[libKey]map[string]uint64 // exported probe symbols (file offsets) by file
	dirty   map[int]time.Time            // processes whose maps to read again, and when
	pending []Notice
	comms   map[int]*commIDs
	closed  bool

	look      lookupState // the kernel lookups' probes (lookups.go); t.mu
	lookNext  time.Time   // when checkLookups looks next; t.mu
	learnSeen uint64      // the BPF map learned when last read; t.mu
	lookMu    sync.Mutex  // one applyLookups at a time

	beatMu   sync.Mutex // the holds (hold_linux.go)
	lastBeat time.Time
	stopped  bool          // Close began: hold no more
	holds    uint64        // Stats.Holds; t.mu
	held     time.Duration // Stats.Held; t.mu
	ready    chan struct{} // closed at Run's first beat (Ready)
	readyOne sync.Once
}

// process is a followed process and the libraries it holds.
type process struct {
	pid      int
	libs     map[libKey]bool
	complete bool // a driver and a collective library probed: no more holds
}

// NewTracer loads the BPF programs and starts the process hooks. It
// attaches nothing to libraries until Follow.
func NewTracer(opts Options) (*Tracer, error) {
	_ = rlimit.RemoveMemlock() // kernels before 5.11 account BPF memory to RLIMIT_MEMLOCK
	spec, err := loadProbes()
	if err != nil {
		return nil, err
	}
	rings, slots, err := sizeRings(spec, opts.RingBufferBytes, opts.slotsPerRing)
	if err != nil {
		return nil, err
	}
	t := &Tracer{
		opts:    opts,
		procs:   map[int]*process{},
		libs:    map[libKey]*library{},
		scanned: map[libKey]map[string]uint64{},
		dirty:   map[int]time.Time{},
		comms:   map[int]*commIDs{},
		ready:   make(chan struct{}),
		batch:   make([]timer.Event, deliverBatch),
	}
	// uprobe_multi attaches a library's probes in one call per program,
	// with the cookies: the programs must be loaded for that attach type,
	// and are then not attachable as single uprobes.
	if !opts.SingleProbes && features.HaveBPFLinkUprobeMulti() == nil {
		t.multi = true
		for _, ps := range spec.Programs {
			if ps.Type == ebpf.Kprobe && (strings.HasPrefix(ps.SectionName, "uprobe") || strings.HasPrefix(ps.SectionName, "uretprobe")) {
				ps.AttachType = ebpf.AttachTraceUprobeMulti
			}
		}
	}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		return nil, loadError(err)
	}
	if t.followed, err = mapFollowed(t.objs.Followed); err != nil {
		t.objs.Close()
		return nil, err
	}
	t.progs = programs(&t.objs.probesPrograms)
	t.names = newKernelNames(t.objs.FuncNames)
	if err := t.startHooks(); err != nil {
		t.Close()
		return nil, err
	}
	if t.rd, err = ringbuf.NewReader(t.objs.Procs); err != nil {
		t.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	t.procWait = newReadyWait(t.objs.Procs) // nil: Run blocks in the reader
	if t.rings, err = mapCallRings(t.objs.Calls, rings, slots); err != nil {
		t.Close()
		return nil, err
	}
	t.wakes = newWakeWait(t.objs.Wakes) // nil: the collector polls alone
	for _, lib := range opts.Libraries {
		if filepath.IsAbs(lib) {
			t.preload(lib)
		}
	}
	return t, nil
}

func loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("load probes: %+v", ve)
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("load probes: %w (%s): %w", ErrNotPermitted, missingCaps(), err)
	}
	return fmt.Errorf("load probes: %w", err)
}

// startHooks attaches the process lifecycle hooks fork, exec and exit:
// BTF tracepoints, which need no tracefs. Libraries loaded later are seen
// through the loader probe (loaderProbe in table.go).
func (t *Tracer) startHooks() error {
	for _, h := range []struct {
		name string
		prog *ebpf.Program
	}{
		{"sched_process_fork", t.objs.OnFork},
		{"sched_process_exec", t.objs.OnExec},
		{"sched_process_exit", t.objs.OnExit},
	} {
		l, err := link.AttachTracing(link.TracingOptions{Program: h.prog})
		if err != nil {
			return fmt.Errorf("attach %s: %w", h.name, err)
		}
		t.hooks = append(t.hooks, l)
	}
	return nil
}

// Follow traces pid and all its descendants, present and future. The
// libraries it has mapped are probed before Follow returns.
func (t *Tracer) Follow(pid int) error {
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return fmt.Errorf("follow %d: %w", pid, err)
	}
	// Into the BPF map first: a fork from now on is followed by the kernel,
	// and the walk of /proc below finds the children forked before.
	if interactiveChild(pid) {
		t.exempt(pid, probesUnheldWhyUNHELD_INTERACTIVE)
	}
	if err := t.followPID(pid); err != nil {
		return err
	}
	pids := append([]int{pid}, descendants(pid)...)
	for _, p := range pids[1:] {
		if interactiveChild(p) {
			t.exempt(p, probesUnheldWhyUNHELD_INTERACTIVE)
		}
		if err := t.followPID(p); err != nil {
			return err
		}
	}
	for _, p := range pids {
		t.prescan(p)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range pids {
		t.addProcess(p)
		t.scan(p)
	}
	return nil
}

// prescan reads, without t.mu, the probe symbols of the libraries pid
// maps that no scan has read, for the scan under t.mu to find: reading a
// large library's symbol tables (libtorch_cuda's) takes up to a second or
// more, during which Run waits on t.mu while the call rings of processes
// already probed fill. A process followed while it launches (watch --pid)
// lost 400-7,700 records at each attach on an H100 before. What fails here
// the scan reads again, and reports.
func (t *Tracer) prescan(pid int) {
	libs, err := execMappings(pid)
	if err != nil {
		return
	}
	for _, m := range libs {
		t.mu.Lock()
		_, done := t.scanned[m.Key]
		t.mu.Unlock()
		if done || !t.opts.wanted(m.Path) {
			continue
		}
		syms, err := exportedProbeSymbols(procPath(pid, m.Path))
		if err != nil {
			continue
		}
		t.mu.Lock()
		if _, done := t.scanned[m.Key]; !done {
			t.scanned[m.Key] = syms
		}
		t.mu.Unlock()
	}
}

func (t *Tracer) followPID(pid int) error {
	if err := t.followed.add(pid); err != nil {
		return fmt.Errorf("follow %d: %w", pid, err)
	}
	return nil
}

// addProcess registers a followed process; t.mu held.
func (t *Tracer) addProcess(pid int) *process {
	p := t.procs[pid]
	if p == nil {
		p = &process{pid: pid, libs: map[libKey]bool{}}
		t.procs[pid] = p
	}
	return p
}

// removeProcess releases everything a process held; t.mu held.
func (t *Tracer) removeProcess(pid int) {
	p := t.procs[pid]
	if p == nil {
		return
	}
	for k := range p.libs {
		t.release(k)
	}
	delete(t.procs, pid)
	delete(t.dirty, pid)
	delete(t.comms, pid)
	t.names.forget(pid)
	t.followed.remove(pid)
	t.unexempt(pid)
}

// maxScanPasses bounds the reads of one scan (see scan).
const maxScanPasses = 3

// scan reads the maps of a followed process and probes the libraries it
// has not been probed for; t.mu held.
//
// The loader probe reports a process's library changes from the moment
// it is attached, not before: a library the process loads between the
// read of its maps and the attach of the loader probe that read found
// (a C program that dlopens the driver at its start, or is linked to it
// and is followed while ld.so maps it) would be seen by neither. So a
// scan that attaches a loader probe reads the maps again once it is in
// place: what was loaded before is in that read, what is loaded after
// fires the probe.
func (t *Tracer) scan(pid int) {
	for range maxScanPasses {
		if !t.scanOnce(pid) {
			break
		}
	}
	if p := t.procs[pid]; p != nil && !p.complete && t.probedAll(p) {
		p.complete = true
		t.exempt(pid, probesUnheldWhyUNHELD_COMPLETE)
	}
}

// scanOnce is one read of pid's maps and the probes it takes; it says
// whether it attached a loader probe, so that the maps are to be read
// again; t.mu held.
func (t *Tracer) scanOnce(pid int) (again bool) {
	p := t.procs[pid]
	if p == nil {
		return false
	}
	libs, err := execMappings(pid)
	if err != nil {
		return false // exited: its exit event releases it
	}
	// Known vendor libraries first: a symbol scan of a large unknown
	// library (libtorch) must not delay the probes of the CUDA runtime
	// loaded beside it.
	sort.SliceStable(libs, func(i, j int) bool { return knownName(libs[i].Path) && !knownName(libs[j].Path) })
	for _, m := range libs {
		if p.libs[m.Key] {
			continue
		}
		syms, ok := t.scanned[m.Key]
		if !ok {
			syms = map[string]uint64{}
			if t.opts.wanted(m.Path) {
				s, err := exportedProbeSymbols(procPath(pid, m.Path))
				if gone(err) {
					return false // it exited (or exec'd) meanwhile: nothing to say, and nothing learnt of the file
				}
				if err != nil {
					t.notice(Notice{Kind: NoticeError, PID: pid, Library: m.Path, Err: err})
				} else {
					syms = s
				}
			}
			t.scanned[m.Key] = syms
		}
		if len(syms) == 0 {
			continue
		}
		attached, err := t.acquire(pid, m, syms)
		if err != nil {
			if !gone(err) {
				t.notice(Notice{Kind: NoticeError, PID: pid, Library: m.Path, Err: err})
			}
			continue
		}
		p.libs[m.Key] = true
		if _, ld := syms[loaderProbe.Symbol]; ld && attached {
			again = true
		}
	}
	return again
}

// gone says whether err comes from a process that exited or exec'd while
// its files were read through /proc/PID/root: a race with the job's own
// life, not a problem to report.
func gone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

// procPath is a file of a process as seen from here (it may live in
// another mount namespace).
func procPath(pid int, path string) string {
	return fmt.Sprintf("/proc/%d/root%s", pid, path)
}

func (t *Tracer) notice(n Notice) {
	n.Time = time.Now()
	if len(t.pending) < 4096 {
		t.pending = append(t.pending, n)
	}
}

// Run reads events until ctx is done or the tracer is closed, calling
// onEvents with the decoded calls and process records, in time order,
// a batch at a time (the slice is Run's again once onEvents returns; the
// callee may change the events meanwhile), and onNotice for what the
// tracer did. Both are called from this goroutine only.
//
// Process records come on the ring buffer procs, which wakes Run; call
// records wait in the call rings, drained on each wakeup, every
// pollInterval (ring.IdleInterval while they are idle) and by the collector
// (ring.Rings.Poll), which at rest the programs wake each quarter ring.
// The engine must see each thread's calls in order, and a process's calls
// before its exit. Records of one thread are
// published one after another, but possibly on different CPUs, so their
// order is their time (bpf_ktime_get_ns, CLOCK_MONOTONIC). A drain first
// takes now, then collects every published record, and delivers, sorted
// by time, only those before now; the rest wait for the next drain. That
// is enough: if a thread's record r2 was collected but its earlier r1 was
// not, r1 was not yet published when its ring was read; then r2,
// which the thread began only after publishing r1, began after the drain
// did, and its time is after now: it waits, and the next drain, which
// sees r1, sorts the two. A process record of time T is delivered after
// a drain whose cut is T: the calls made before it first.
func (t *Tracer) Run(ctx context.Context, onEvents func([]timer.Event), onNotice func(Notice)) error {
	stop, polled := make(chan struct{}), make(chan struct{})
	defer func() {
		close(stop)
		if t.wakes != nil {
			t.wakes.interrupt()
		}
		<-polled // the collector is done with the maps before Run returns
	}()
	go func() {
		defer close(polled)
		var w ring.Waker
		if t.wakes != nil {
			w = t.wakes
		}
		t.rings.Poll(stop, w, t.nudge)
	}()
	t.beat()
	t.readyOne.Do(func() { close(t.ready) })
	defer t.stopReading()
	var rec ringbuf.Record
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t.beat()
		t.housekeep(onNotice)
		if w := t.procWait; w != nil {
			// Parked in Go's netpoller until a record, a nudge or the
			// wait's end; then the reader only takes what is there.
			w.wait(t.wait(), func() bool { return t.rd.AvailableBytes() > 0 || t.nudged.Swap(false) })
			t.rd.SetDeadline(time.Now())
		} else {
			t.rd.SetDeadline(time.Now().Add(t.wait()))
		}
		err := t.rd.ReadInto(&rec)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			now := monotonicNow()
			// A process record reserved before now (still being written,
			// or just committed) must go first, with the calls before it:
			// the next read takes it.
			if t.rd.AvailableBytes() == 0 {
				t.rings.Collect()
				t.deliverCalls(now, onEvents)
			}
			continue
		case errors.Is(err, ringbuf.ErrClosed):
			return nil
		case err != nil:
			return fmt.Errorf("read ring buffer: %w", err)
		}
		raw, ok := rawCall(rec.RawSample)
		if !ok {
			continue
		}
		deadline := time.Now().Add(inFlightWait)
		t.rings.Collect()
		for t.rings.InFlight() && time.Now().Before(deadline) {
			runtime.Gosched()
			t.rings.Collect()
		}
		t.deliverCalls(raw.Time, onEvents)
		t.processEvent(raw, onEvents)
	}
}

// monotonicNow is the clock of bpf_ktime_get_ns.
func monotonicNow() uint64 { return uint64(monoclock.Now()) }

// deliverBatch is how many events Run hands over at once: the receiver
// takes its locks once for so many, and they stay in the cache (13 KiB)
// between the decode and the handling.
const deliverBatch = 64

// deliverCalls delivers, in time order, the collected call records from
// before cut (CLOCK_MONOTONIC ns, taken before the last collection); the
// later ones wait for the next.
func (t *Tracer) deliverCalls(cut uint64, onEvents func([]timer.Event)) {
	for {
		recs := t.rings.Take(cut, t.calls[:0], deliverBatch)
		t.calls = recs
		if len(recs) == 0 {
			return
		}
		calls := callsOf(recs)
		evs := t.batch[:len(calls)]
		for i := range evs {
			decode(&evs[i], &calls[i])
			t.complete(&evs[i], &calls[i])
		}
		t.events.Add(uint64(len(evs)))
		if onEvents != nil {
			onEvents(evs)
		}
	}
}

// wait is how long Run may block for the next event.
func (t *Tracer) wait() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) > 0 {
		return 0
	}
	if len(t.dirty) > 0 {
		return maxScanLag
	}
	if t.rings.Idle() {
		return ring.IdleInterval // the collector wakes Run (nudge) when records come
	}
	return pollInterval
}

// nudge ends Run's wait now: the collector found records after the rings
// were idle, while Run may be in its long wait. The mark makes a wait
// that begins after the deadline was moved (and moves it back) end too.
func (t *Tracer) nudge() {
	if t.procWait != nil {
		t.nudged.Store(true)
		t.procWait.interrupt()
	}
}

// housekeep rescans processes that mapped code and hands out notices.
func (t *Tracer) housekeep(onNotice func(Notice)) {
	t.mu.Lock()
	now := time.Now()
	t.expire(now)
	drained := t.rd.AvailableBytes() == 0
	for pid, due := range t.dirty {
		if lag := now.Sub(due); lag >= 0 && (drained || lag >= maxScanLag) {
			delete(t.dirty, pid)
			t.scan(pid)
		}
	}
	t.checkLookups(now)
	pending := t.pending
	t.pending = nil
	t.mu.Unlock()
	if onNotice != nil {
		for _, n := range pending {
			onNotice(n)
		}
	}
}

// processEvent handles fork, exec, exit and mmap of followed processes.
func (t *Tracer) processEvent(raw *probesCall, onEvents func([]timer.Event)) {
	pid := int(raw.Pid)
	ev := timer.Event{Time: int64(raw.Time), PID: pid, TID: pid}
	held := raw.Phase == uint8(probesProcPhasePROC_HELD)
	t.mu.Lock()
	switch raw.Kind {
	case evFork:
		t.addProcess(pid)
		t.scan(pid)
		t.dirty[pid] = time.Now().Add(rescanDelay)
		t.notice(Notice{Kind: NoticeExec, PID: pid})
		ev.Kind = timer.KindProcessExec
		ev.Parent = int(raw.Handle)
	case evExec:
		// A new image: what the old one mapped is gone. The new image's
		// libraries are taken before the old ones are released, so a
		// library both map (ld.so, or all of them when this record is read
		// after the process has loaded more) keeps its probes.
		p := t.addProcess(pid)
		old := p.libs
		p.libs = map[libKey]bool{}
		p.complete = false // the exec program took it out of unheld
		delete(t.comms, pid)
		t.names.forget(pid)
		t.scan(pid)
		for k := range old {
			t.release(k)
		}
		t.dirty[pid] = time.Now().Add(rescanDelay)
		t.notice(Notice{Kind: NoticeExec, PID: pid})
		ev.Kind = timer.KindProcessExec
	case evExit:
		t.removeProcess(pid)
		t.notice(Notice{Kind: NoticeExit, PID: pid})
		ev.Kind = timer.KindProcessExit
	case evMmap:
		// ld.so changed the process's libraries (a dlopen): probe what it
		// mapped before the process calls it: now if it is held, else as
		// soon as the records before this one are handled.
		if held && t.procs[pid] != nil {
			delete(t.dirty, pid)
			t.scan(pid)
		} else if due, ok := t.dirty[pid]; t.procs[pid] != nil && (!ok || due.After(time.Now())) {
			t.dirty[pid] = time.Now()
		}
		t.names.mapped(pid)
		if t.onLoader != nil {
			t.onLoader(pid, raw.Time)
		}
	}
	if held {
		// Its new code is probed (exec and loader records, above): it goes
		// on.
		t.resume(pid)
		t.holds++
		t.held += time.Duration(monotonicNow() - raw.Time)
	}
	t.mu.Unlock()
	if ev.Kind != timer.KindUnknown {
		t.events.Add(1)
		if onEvents != nil {
			t.batch[0] = ev
			onEvents(t.batch[:1])
		}
	}
}

// Stats reports counters and what is attached now.
func (t *Tracer) Stats() Stats {
	s := Stats{Events: t.events.Load(), Lost: t.rings.Lost()}
	if t.wakes != nil {
		s.Wakeups = t.wakes.count.Load()
	}
	var perCPU []uint64
	if err := t.objs.Lost.Lookup(uint32(0), &perCPU); err == nil {
		for _, n := range perCPU {
			s.Lost += n
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s.Processes = len(t.procs)
	s.Holds, s.Held = t.holds, t.held
	for _, l := range t.libs {
		if l.refs > 0 {
			s.Probes += l.probes + l.lookupProbes
		} else {
			s.Idle += l.probes + l.lookupProbes
		}
		s.LookupProbes += l.lookupProbes
	}
	return s
}

// Probed reports whether pid maps a library whose GPU calls are probed
// (CUDA, NCCL, MACA or MCCL): false for a process only the loader probe
// watches, whose hangs the probes cannot see.
func (t *Tracer) Probed(pid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		for k := range p.libs {
			if l := t.libs[k]; l != nil && l.gpu {
				return true
			}
		}
	}
	return false
}

// Close detaches everything and unloads the programs. Run returns.
func (t *Tracer) Close() error {
	// No process stays held by a tracer that closes, even with its reader
	// stuck on t.mu.
	t.stopHolding()
	t.resumeHeld(0)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	var links []link.Link
	for k, l := range t.libs {
		links = append(links, l.allLinks()...)
		l.links, l.lookups = nil, nil
		delete(t.libs, k)
	}
	t.procs = map[int]*process{}
	t.mu.Unlock()
	t.detach(links)
	done := make(chan struct{})
	go func() {
		t.closing.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
	}
	t.resumeHeld(0) // held by a program that ran while Close began
	var errs []error
	if t.rd != nil {
		errs = append(errs, t.rd.Close())
	}
	if t.procWait != nil {
		errs = append(errs, t.procWait.close())
	}
	if t.wakes != nil {
		errs = append(errs, t.wakes.close())
	}
	if t.rings != nil {
		errs = append(errs, t.rings.Close())
	}
	for _, h := range t.hooks {
		errs = append(errs, h.Close())
	}
	errs = append(errs, t.followed.close(), t.objs.Close())
	return errors.Join(errs...)
}

// ReturnAddress is the return address that one of our return probes
// replaced with the kernel's trampoline ([uprobes]) at stack address slot
// of thread tid, while the probed call is in flight: what an unwinder must
// use instead of the trampoline to go on to the caller.
// It lies in the stash of the call's arguments (probes.bpf.c, save_return),
// keyed by kind << 32 | thread: the thread's stashes are looked up under
// every key there can be, a kind, 64 plus one (STASH_*) or 256 plus a
// call's id (STASH_CALL: a call made now and then), a bounded cost however
// many stashes threads that died in a call left behind.
func (t *Tracer) ReturnAddress(tid int, slot uint64) (uint64, bool) {
	if slot == 0 {
		return 0, false
	}
	var s probesStash
	lookup := func(k uint64) bool {
		return t.objs.Stashes.Lookup(k<<32|uint64(uint32(tid)), &s) == nil && s.RetSlot == slot
	}
	for _, base := range []uint64{0, stashBeyondKinds} {
		for k := base; k <= base+uint64(probesKindK_GROUP_END); k++ {
			if lookup(k) {
				return s.RetAddr, true
			}
		}
	}
	for id := range len(callNames) {
		if lookup(stashCall + uint64(id)) {
			return s.RetAddr, true
		}
	}
	return 0, false
}

// stashBeyondKinds is where the stash keys of calls that are no kind
// start (probes.bpf.c, STASH_GET_FUNCTION), stashCall those of the calls
// made now and then (STASH_CALL + id).
const (
	stashBeyondKinds = 64
	stashCall        = 256
)

//go:build linux && (386 || amd64)

package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/timer"
)

// closeWait bounds how long Close waits for links to detach: the kernel
// may take long under load, and nothing is lost by returning first (the
// links go with this process at the latest).
const closeWait = 2 * time.Second

// Tracer follows processes and reports their GPU API calls: the facade
// over a reader (reader_linux.go), which reads and decodes what the
// programs write, and a follower (follower_linux.go), which follows
// processes and probes their libraries, joined by a mailbox
// (mailbox.go); doc.go states who owns what.
type Tracer struct {
	opts     Options
	objs     probesObjects
	hooks    []link.Link  // scheduler hooks
	followed *followedSet // the map followed, mapped
	multi    bool         // attach with uprobe_multi links (Linux 6.6+)
	holds    *holds
	guard    *guard // resumes the held if the tracer dies unclosed (nil: holds off)
	box      *mailbox
	r        *reader
	f        *follower

	ready    chan struct{} // closed at Run's first beat (Ready)
	readyOne sync.Once
	running  sync.WaitGroup // Runs under way: Close waits for them before it closes what they read
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
	t := &Tracer{opts: opts, ready: make(chan struct{}), box: newMailbox()}
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
	t.holds = &holds{alive: t.objs.HoldAlive, held: t.objs.Held, unheld: t.objs.Unheld, off: opts.noHold}
	if !opts.noHold {
		// Without a guard the tracer still works, and says what is lost.
		var gerr error
		if t.guard, gerr = startGuard(t.objs.Held); gerr != nil {
			t.box.notice(Notice{Kind: NoticeError, Time: time.Now(),
				Err: fmt.Errorf("no guard of the holds (killed without closing, the tracer would leave a held process stopped): %w", gerr)})
		}
	}
	names := newKernelNames(t.objs.FuncNames)
	t.r = &reader{
		holds: t.holds, box: t.box, names: names, comms: map[int]*commIDs{},
		batch: make([]timer.Event, deliverBatch), learned: t.objs.Learned, noNames: opts.NoKernelNames,
	}
	t.f = newFollower(&t.opts, programs(&t.objs.probesPrograms), t.multi, t.followed, t.holds, t.box, names.since)
	t.box.notify = t.r.nudge
	if err := t.startHooks(); err != nil {
		t.Close()
		return nil, err
	}
	if t.r.rd, err = ringbuf.NewReader(t.objs.Procs); err != nil {
		t.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	t.r.procWait = newReadyWait(t.objs.Procs) // nil: the reader blocks in the ring buffer's reader
	if t.r.rings, err = mapCallRings(t.objs.Calls, rings, slots); err != nil {
		t.Close()
		return nil, err
	}
	t.r.wakes = newWakeWait(t.objs.Wakes) // nil: the collector polls alone
	for _, lib := range opts.Libraries {
		if filepath.IsAbs(lib) {
			t.f.preload(lib)
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
func (t *Tracer) Follow(pid int) error { return t.f.follow(pid) }

// Run reads events until ctx is done or the tracer is closed, calling
// onEvents with the decoded calls and process records, in time order,
// a batch at a time (the slice is Run's again once onEvents returns; the
// callee may change the events meanwhile), and onNotice for what the
// tracer did. Both are called from this goroutine only. The follower
// works on a goroutine of its own meanwhile; both end before Run returns.
//
// Process records come on the ring buffer procs, which wakes Run; call
// records wait in the call rings, drained on each wakeup, every
// pollInterval (ring.IdleInterval while they are idle) and by the
// collector (ring.Rings.Poll), which at rest the programs wake each
// quarter ring. The engine must see each thread's calls in order, and a
// process's calls before its exit. Records of one thread are published
// one after another, but possibly on different CPUs, so their order is
// their time (bpf_ktime_get_ns, CLOCK_MONOTONIC). A drain first takes
// now, then collects every published record, and delivers, sorted by
// time, only those before now; the rest wait for the next drain. That is
// enough: if a thread's record r2 was collected but its earlier r1 was
// not, r1 was not yet published when its ring was read; then r2, which
// the thread began only after publishing r1, began after the drain did,
// and its time is after now: it waits, and the next drain, which sees r1,
// sorts the two. A process record of time T is delivered after a drain
// whose cut is T: the calls made before it first.
func (t *Tracer) Run(ctx context.Context, onEvents func([]timer.Event), onNotice func(Notice)) error {
	t.running.Add(1)
	defer t.running.Done()
	stop, followed := make(chan struct{}), make(chan struct{})
	t.holds.turned()
	go func() {
		defer close(followed)
		t.f.run(stop)
	}()
	defer func() {
		close(stop)
		<-followed
		t.holds.stopReading() // after the follower: nothing it resumes is held again
	}()
	t.holds.beat()
	t.readyOne.Do(func() { close(t.ready) })
	return t.r.run(ctx, onEvents, onNotice)
}

// Ready is closed once Run reads, and processes are held at their loads:
// a launcher that starts its job after it misses no first call.
func (t *Tracer) Ready() <-chan struct{} { return t.ready }

// Stats reports counters and what is attached now.
func (t *Tracer) Stats() Stats {
	s := Stats{Events: t.r.events.Load(), Lost: t.r.lost(t.objs.Lost), Coalesced: t.box.coalesced.Load()}
	if t.r.wakes != nil {
		s.Wakeups = t.r.wakes.count.Load()
	}
	t.f.stats(&s)
	return s
}

// Probed reports whether pid maps a library whose GPU calls are probed
// (CUDA, NCCL, MACA or MCCL): false for a process only the loader probe
// watches, whose hangs the probes cannot see.
func (t *Tracer) Probed(pid int) bool { return t.f.probed(pid) }

// Close detaches everything and unloads the programs. Run returns.
func (t *Tracer) Close() error {
	// No process stays held by a tracer that closes, even with its
	// follower stuck.
	t.holds.stop()
	t.holds.resumeHeld(0)
	if !t.f.close() {
		return nil
	}
	// Run returns before what it reads is closed (bounded: a callback of
	// Run's that does not return leaves it to the race it was before).
	t.r.quit.Store(true)
	t.r.nudge()
	wait(&t.running, closeWait)
	wait(&t.f.closing, closeWait)
	t.holds.resumeHeld(0) // held by a program that ran while Close began
	errs := []error{t.r.close()}
	for _, h := range t.hooks {
		errs = append(errs, h.Close())
	}
	t.guard.close() // the hooks are gone: nothing holds any more
	errs = append(errs, t.followed.close(), t.objs.Close())
	return errors.Join(errs...)
}

// wait waits for wg, at most d.
func wait(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
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

//go:build linux && amd64

package native

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/monoclock"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
)

// releaseWait bounds how long a dump keeps waiting, after it returned, for
// threads it could not detach at once (not yet stopped, or dying) to stop or
// be reaped. Past it the tracer thread exits and the kernel lets go of them.
const releaseWait = 10 * time.Second

// snapshot is one thread as copied while it was stopped.
type snapshot struct {
	tid     int
	state   byte
	name    string // its comm, read with the state
	regs    unix.PtraceRegs
	stackLo uint64
	stack   []byte
	err     error
}

// stopped is what the ptrace phase hands back.
type stopped struct {
	threads    []*snapshot
	stoppedFor time.Duration
	partial    bool
	whileErr   error
}

// Dump captures every thread of pid. A process in state D is not ptraced:
// only its state is returned. Threads that cannot be stopped or read carry
// an Error; the dump fails only when the process is gone or not traceable.
func (u *Unwinder) Dump(pid int, o Options) (Result, error) {
	if o.MaxStop <= 0 {
		o.MaxStop = DefaultMaxStop
	}
	if o.MaxStack <= 0 {
		o.MaxStack = DefaultMaxStack
	}
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return Result{}, fmt.Errorf("dump %d: %w", pid, ErrNoProcess)
	}
	res := Result{State: procfs.StateName(st.State)}
	switch st.State {
	case 'D':
		return res, nil
	case 'X':
		return res, fmt.Errorf("dump %d: %w", pid, ErrExited)
	case 'Z':
		// The main thread may have ended alone (pthread_exit): the
		// process lives while another thread does.
		if !anyLive(pid) {
			return res, fmt.Errorf("dump %d: %w", pid, ErrExited)
		}
	}
	proc := o.Process
	if proc == nil {
		if proc, err = u.cache.OpenProcess(pid, o.Lines); err != nil {
			return res, fmt.Errorf("dump %d: read maps: %w", pid, ErrNoProcess)
		}
	}
	maps := proc.Mappings()

	var s stopped
	if st.PPID == os.Getpid() {
		// Our own child: see helperEnv.
		if s, err = stopByHelper(pid, o, maps); err != nil {
			return res, fmt.Errorf("dump %d: %w", pid, err)
		}
	} else {
		// Every ptrace request comes from one OS thread, the tracer,
		// which is never unlocked: it exits with its goroutine after
		// letting go of every thread, and should anything be left
		// attached, the kernel detaches it (resuming it) then.
		//
		// A thread an earlier stop of pid still holds (seized, not yet
		// stopped: settle waits for it) cannot be seized again: wait for
		// that stop to let go first, at most half of MaxStop.
		awaitHolds(pid, time.Now().Add(o.MaxStop/2))
		ch := make(chan stopped, 1)
		go func() {
			runtime.LockOSThread()
			ts, s := stopAll(pid, o, maps)
			h := hold(pid, ts)
			ch <- s
			settle(pid, ts, time.Now().Add(releaseWait))
			h.release()
		}()
		s = <-ch
	}
	res.Released = monoclock.Now()
	res.StoppedFor = s.stoppedFor
	res.Partial = s.partial
	res.WhileStoppedErr = s.whileErr

	if !anyCopied(s.threads) && !anyLive(pid) {
		return res, fmt.Errorf("dump %d: %w", pid, ErrExited)
	}
	allPerm := len(s.threads) > 0
	for _, t := range s.threads {
		if !errors.Is(t.err, unix.EPERM) {
			allPerm = false
		}
	}
	if allPerm {
		return res, fmt.Errorf("dump %d: %w", pid, ErrNotPermitted)
	}

	for _, t := range s.threads {
		if t.err == nil && !proc.Mapped(t.regs.Rip) {
			proc.Refresh() // a library loaded since the maps were read, or JIT code
			break
		}
	}
	res.Threads = name(proc, s.threads, o.ReturnAddress, o.Lines)
	var pcs []uint64
	for _, th := range res.Threads {
		for _, f := range th.Native {
			pcs = append(pcs, f.Addr)
		}
	}
	res.Damage = proc.Damage(pcs)
	return res, nil
}

// name unwinds and names the stacks of the copied threads: it walks them,
// reads the symbol tables (with lines, the debug information) of the
// modules on them meanwhile, and names the frames, each step on every CPU.
func name(proc *symbols.Process, snaps []*snapshot, ra ReturnAddressFunc, lines bool) []stack.Thread {
	var first []uint64
	for _, t := range snaps {
		if t.err == nil {
			first = append(first, t.regs.Rip)
		}
	}
	prefetched := make(chan struct{})
	go func() {
		proc.Prefetch(first, lines) // mostly libc: the largest, started at once
		close(prefetched)
	}()
	steps := make([][]step, len(snaps))
	errs := make([]error, len(snaps))
	parallel(len(snaps), func(i int) {
		t := snaps[i]
		if t.err != nil {
			return
		}
		// Through the thread's own id: a zombie main thread has no memory.
		live := func(b []byte, addr uint64) (int, error) { return readMem(t.tid, b, addr) }
		steps[i], errs[i] = walk(proc, t, live, ra)
	})
	var all []uint64
	for _, ss := range steps {
		for _, s := range ss {
			all = append(all, s.lookup)
		}
	}
	// The rest of the modules while the first prefetch may still be
	// reading libc: a module's reads wait on one another, not on others'.
	proc.Prefetch(all, lines)
	<-prefetched
	out := make([]stack.Thread, len(snaps))
	parallel(len(snaps), func(i int) {
		t := snaps[i]
		out[i] = stack.Thread{TID: t.tid, Name: t.name}
		if t.state != 0 {
			out[i].State = string(t.state) // as the thread was before the stop
		}
		switch {
		case t.err != nil:
			out[i].Error = t.err.Error()
		default:
			steps[i], errs[i] = atMain(proc, steps[i], errs[i])
			out[i].Native = frames(proc, steps[i], lines)
			if errs[i] != nil {
				out[i].Error = errs[i].Error()
			}
		}
	})
	return out
}

// parallel runs f(0) to f(n-1) on as many goroutines as CPUs.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.NumCPU(), n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// anyLive reports whether pid has a thread that is neither a zombie nor dead.
func anyLive(pid int) bool {
	tids, err := procfs.Tasks(pid)
	if err != nil {
		return false
	}
	for _, tid := range tids {
		if st, err := procfs.ReadTaskStat(pid, tid); err == nil && st.State != 'Z' && st.State != 'X' {
			return true
		}
	}
	return false
}

func anyCopied(ts []*snapshot) bool {
	for _, t := range ts {
		if t.err == nil {
			return true
		}
	}
	return false
}

// holding is the threads of one process that a stop has not let go of
// when it returns (not yet stopped, or dying): its settle still holds
// them, and until it does, no other stop can seize them.
type holding struct {
	pid  int
	tids map[int]bool
	done chan struct{} // closed once settle returns
}

// holds lists the holdings of stops whose settle runs, by process.
var holds struct {
	sync.Mutex
	by map[int][]*holding
}

// hold records the threads of ts still seized when stopAll returns; nil
// when there are none.
func hold(pid int, ts []*tracee) *holding {
	h := &holding{pid: pid, tids: map[int]bool{}, done: make(chan struct{})}
	for _, t := range ts {
		if t.seized {
			h.tids[t.tid] = true
		}
	}
	if len(h.tids) == 0 {
		return nil
	}
	holds.Lock()
	defer holds.Unlock()
	if holds.by == nil {
		holds.by = map[int][]*holding{}
	}
	holds.by[pid] = append(holds.by[pid], h)
	return h
}

// release forgets h once its settle returned.
func (h *holding) release() {
	if h == nil {
		return
	}
	holds.Lock()
	defer holds.Unlock()
	hs := slices.DeleteFunc(holds.by[h.pid], func(x *holding) bool { return x == h })
	if len(hs) == 0 {
		delete(holds.by, h.pid)
	} else {
		holds.by[h.pid] = hs
	}
	close(h.done)
}

// awaitHolds waits until no earlier stop holds a thread of pid, or until
// deadline.
func awaitHolds(pid int, deadline time.Time) {
	for {
		holds.Lock()
		hs := slices.Clone(holds.by[pid])
		holds.Unlock()
		if len(hs) == 0 {
			return
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-hs[0].done:
			timer.Stop()
		case <-timer.C:
			return
		}
	}
}

// held says whether an earlier stop still holds thread tid of pid.
func held(pid, tid int) bool {
	holds.Lock()
	defer holds.Unlock()
	for _, h := range holds.by[pid] {
		if h.tids[tid] {
			return true
		}
	}
	return false
}

// tracee is one thread under ptrace during a dump.
type tracee struct {
	*snapshot
	seized  bool // attached by us and not yet let go
	stopped bool // in a ptrace-stop: registers readable, detachable
	sig     int  // signal the thread stopped for, delivered on detach
	dying   bool // detach failed: the thread is exiting
}

// stopAll stops, copies and resumes every thread it can. The threads it
// could not let go of at once come back for settle.
//
// It runs on a locked OS thread that exits when its goroutine ends, and
// raises that thread's priority: on a loaded machine, every time slice
// the tracer waits for is time every stopped thread waits too.
func stopAll(pid int, o Options, maps []procfs.Mapping) (ts []*tracee, s stopped) {
	urgent()
	start := time.Now()
	deadline := start.Add(o.MaxStop)
	// Half the bound for the threads to stop, so that when one does not,
	// the others still get copied.
	stopBy := start.Add(o.MaxStop / 2)
	whileStopped := startWhileStopped(o.WhileStopped)
	defer whileStopped.cancel()
	var first time.Time // the first interrupt: no thread stops before it
	released := false
	release := func() {
		if !released {
			for _, t := range ts {
				t.detach()
			}
			if !first.IsZero() {
				s.stoppedFor = time.Since(first)
			}
			released = true
		}
	}
	defer func() {
		// Let go of every stopped thread on every path, a panic included.
		if r := recover(); r != nil {
			s.whileErr = fmt.Errorf("panic while stopped: %v", r)
		}
		release()
		// Copies: settle goes on polling the threads not let go yet,
		// and records what becomes of them in its own.
		s.threads = s.threads[:0]
		for _, t := range ts {
			c := *t.snapshot
			s.threads = append(s.threads, &c)
		}
		sort.Slice(s.threads, func(i, j int) bool { return s.threads[i].tid < s.threads[j].tid })
	}()
	seen := map[int]bool{}
	// Two rounds: threads created while the first round stopped the
	// others are caught by the second.
	for round := 0; round < 2; round++ {
		tids, err := procfs.Tasks(pid)
		if err != nil {
			break
		}
		var fresh []*tracee
		for _, tid := range tids {
			if !seen[tid] {
				seen[tid] = true
				fresh = append(fresh, seize(pid, tid))
			}
		}
		ts = append(ts, fresh...)
		if len(fresh) == 0 {
			break
		}
		if first.IsZero() {
			first = time.Now()
		}
		for _, t := range fresh {
			if t.seized {
				if err := rawInterrupt(t.tid); err != nil {
					t.err = fmt.Errorf("ptrace interrupt: %w", err)
				}
			}
		}
		if !waitStops(fresh, stopBy) {
			s.partial = true
			for _, t := range fresh {
				if t.seized && !t.stopped && t.err == nil {
					t.err = fmt.Errorf("thread did not stop within %v", o.MaxStop/2)
				}
			}
			break
		}
	}
	copyCut := false // a stopped thread left uncopied at the bound
	for _, t := range ts {
		if !t.stopped {
			continue
		}
		if err := rawGetRegs(t.tid, &t.regs); err != nil {
			t.err = fmt.Errorf("read registers: %w", err)
			continue
		}
		if time.Now().After(deadline) {
			t.err = fmt.Errorf("stack not copied within %v", o.MaxStop)
			s.partial, copyCut = true, true
			continue
		}
		var err error
		t.stackLo, t.stack, err = copyStack(t.tid, t.regs.Rsp, o.MaxStack, maps)
		if err != nil {
			t.err = err
		}
	}
	if whileStopped != nil && time.Now().Before(deadline) {
		// At the bound the threads go on, while the callback finishes.
		whileStopped.run()
		if !whileStopped.wait(deadline) {
			release()
			whileStopped.wait(time.Time{})
		}
		s.whileErr = whileStopped.err
	}
	if o.Stragglers > 0 && s.partial {
		release()
		s.partial = stragglers(ts, time.Now().Add(o.Stragglers), o.MaxStack, maps) > 0 || copyCut
	}
	return ts, s
}

// stragglers waits, until deadline, for the threads of ts that did not
// stop in time, the others let go already: each is copied as it stops and
// let go at once (Options.Stragglers). It returns how many it could not
// copy; settle lets go of those that stop later.
func stragglers(ts []*tracee, deadline time.Time, maxStack int, maps []procfs.Mapping) int {
	var late []*tracee
	for _, t := range ts {
		if t.seized && !t.stopped && !t.dying {
			late = append(late, t)
		}
	}
	nap := 10 * time.Microsecond
	for len(late) > 0 && time.Now().Before(deadline) {
		progress := false
		for _, t := range late {
			if t.poll() {
				progress = true
			}
			if !t.seized || !t.stopped {
				continue
			}
			t.err = nil
			if err := rawGetRegs(t.tid, &t.regs); err != nil {
				t.err = fmt.Errorf("read registers: %w", err)
			} else if t.stackLo, t.stack, err = copyStack(t.tid, t.regs.Rsp, maxStack, maps); err != nil {
				t.err = err
			}
			t.detach()
		}
		late = slices.DeleteFunc(late, func(t *tracee) bool { return !t.seized || t.dying })
		if !progress {
			rawNap(nap) // as waitStops: the CPU left to the threads yet to stop
			nap = min(2*nap, 500*time.Microsecond)
		}
	}
	return len(late)
}

// stopCallback runs Options.WhileStopped on a thread of its own, ready
// before any thread stops: a goroutine started only then would wait for
// an OS thread to wake, at a normal priority, every stopped thread
// waiting with it.
//
// The tracer and the callback hand over through a futex word, with raw
// system calls that keep each its P, not through a channel. Over a
// channel, a goroutine that blocks gives its P back, and the one it wakes
// gets running through the scheduler: another thread of the runtime, of
// ordinary priority, woken first to hand it a P: on busy CPUs, the
// tracer waited milliseconds to run again after the callback's answer,
// every thread still stopped (docs/measurements.md, "Figures from code
// comments"). With a single P (GOMAXPROCS=1, a one-CPU container) the two
// cannot both hold one, and each wait gives it up instead.
type stopCallback struct {
	state  uint32 // cbStarting, cbWaiting, cbRun, cbCancel, cbDone
	oneP   bool   // GOMAXPROCS is 1: waits give the P up
	err    error  // the callback's, once state is cbDone
	asleep chan struct{}
}

const (
	cbStarting = iota
	cbWaiting
	cbRun
	cbCancel
	cbDone
)

// cbPoll bounds each wait, so that a goroutine waiting keeps reaching Go
// code: the scheduler may want its P (a collection).
const cbPoll = time.Millisecond

// startWhileStopped starts f's thread and returns once it waits, holding
// a P of its own; nil when f is nil.
func startWhileStopped(f func() error) *stopCallback {
	if f == nil {
		return nil
	}
	c := &stopCallback{oneP: runtime.GOMAXPROCS(0) < 2, asleep: make(chan struct{})}
	go func() {
		// The thread exits with the goroutine, its priority with it.
		runtime.LockOSThread()
		urgent()
		atomic.StoreUint32(&c.state, cbWaiting)
		close(c.asleep)
		for {
			st := atomic.LoadUint32(&c.state)
			if st == cbCancel {
				return
			}
			if st == cbRun {
				break
			}
			c.pause(st, cbPoll)
		}
		defer func() {
			if r := recover(); r != nil {
				c.err = fmt.Errorf("panic while stopped: %v", r)
			}
			atomic.StoreUint32(&c.state, cbDone)
			rawFutexWake(&c.state)
		}()
		c.err = f()
	}()
	<-c.asleep
	return c
}

// pause waits while the state is st, at most d.
func (c *stopCallback) pause(st uint32, d time.Duration) {
	if c.oneP {
		time.Sleep(min(d, 50*time.Microsecond))
		return
	}
	rawFutexWait(&c.state, st, d)
}

// run starts the callback.
func (c *stopCallback) run() {
	atomic.StoreUint32(&c.state, cbRun)
	rawFutexWake(&c.state)
}

// wait waits until the callback is done, or until deadline (none when
// zero), and reports whether it is done.
func (c *stopCallback) wait(deadline time.Time) bool {
	for {
		st := atomic.LoadUint32(&c.state)
		if st == cbDone {
			return true
		}
		d := cbPoll
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return false
			}
			d = min(d, left)
		}
		c.pause(st, d)
	}
}

// cancel ends the callback's goroutine when the callback was not run.
func (c *stopCallback) cancel() {
	if c != nil && atomic.CompareAndSwapUint32(&c.state, cbWaiting, cbCancel) {
		rawFutexWake(&c.state)
	}
}

// urgentNice is the nice value of the threads that work while others are
// stopped: the most urgent, as only a privileged process may set.
const urgentNice = -20

// urgent raises the priority of the calling OS thread, which must be
// locked to its goroutine and end with it. Without the privilege to
// (CAP_SYS_NICE), it stays as it is.
func urgent() {
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), urgentNice)
}

// seize attaches to one thread without stopping it. Zombies and threads in
// uninterruptible sleep are left alone.
func seize(pid, tid int) *tracee {
	t := &tracee{snapshot: &snapshot{tid: tid}}
	st, err := procfs.ReadTaskStat(pid, tid)
	if err != nil {
		t.err = errors.New("thread exited")
		return t
	}
	t.state, t.name = st.State, st.Comm
	switch st.State {
	case 'Z', 'X':
		t.err = errors.New("zombie thread")
		return t
	case 'D':
		t.err = errors.New("thread in state D (uninterruptible): not stopped")
		return t
	}
	if err := unix.PtraceSeize(tid); err != nil {
		switch {
		case errors.Is(err, unix.ESRCH):
			t.err = errors.New("thread exited")
		case errors.Is(err, unix.EPERM) && held(pid, tid):
			// Not this monitor's want of privilege: see awaitHolds.
			t.err = errors.New("not stopped: an earlier stop of this process still waits for this thread to stop (it did not get a CPU)")
		default:
			t.err = fmt.Errorf("ptrace seize: %w", err)
		}
		return t
	}
	t.seized = true
	return t
}

// waitStops waits until every seized thread of ts stopped or exited. It
// returns false when the deadline passed first.
func waitStops(ts []*tracee, deadline time.Time) bool {
	nap := 10 * time.Microsecond
	for {
		pending := false
		progress := false
		for _, t := range ts {
			if !t.seized || t.stopped || t.err != nil {
				continue
			}
			if t.poll() {
				progress = true
			}
			if t.seized && !t.stopped {
				pending = true
			}
		}
		if !pending {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		if !progress {
			// On this thread, keeping its P (see rawNap), longer each
			// time: the CPU is left to the threads that have yet to
			// run to their stop.
			rawNap(nap)
			nap = min(2*nap, 500*time.Microsecond)
		}
	}
}

// poll takes one wait status of t without blocking; it reports whether
// there was one.
func (t *tracee) poll() bool {
	var ws unix.WaitStatus
	wpid, err := rawWait4(t.tid, &ws, unix.WALL|unix.WNOHANG)
	switch {
	case err != nil:
		if errors.Is(err, unix.EINTR) {
			return false
		}
		// ECHILD: no longer ours to wait for.
		t.seized, t.stopped = false, false
		if t.err == nil {
			t.err = fmt.Errorf("wait: %w", err)
		}
	case wpid == 0:
		return false
	case ws.Exited() || ws.Signaled():
		t.seized, t.stopped = false, false
		if t.err == nil {
			t.err = errors.New("thread exited")
		}
	case ws.Stopped():
		t.stopped = true
		// PTRACE_EVENT_STOP is our interrupt (or a group-stop); any other
		// stop holds a signal on its way to the thread, delivered on detach.
		if uint32(ws)>>16 != unix.PTRACE_EVENT_STOP {
			t.sig = int(ws.StopSignal())
		}
	}
	return true
}

// detach lets a stopped thread run again, with the signal it stopped for.
// A thread that cannot be detached is exiting (SIGKILL woke it): it is
// marked dying, for settle to reap.
func (t *tracee) detach() {
	if !t.seized || !t.stopped {
		return
	}
	err := rawDetach(t.tid, t.sig)
	t.stopped = false
	if err == nil {
		t.seized = false
		return
	}
	t.dying = true
}

// settle lets go of the threads stopAll could not: it detaches those that
// stop late and reaps the ptrace side of those exiting (which hands a dead
// main thread back to its parent once the others are reaped), until none
// is left or the deadline. The target is never our child (see helperEnv).
func settle(pid int, ts []*tracee, deadline time.Time) {
	for {
		left := false
		for _, t := range ts {
			if !t.seized {
				continue
			}
			if t.poll() && t.stopped {
				t.detach()
			}
			left = left || t.seized
		}
		if !left || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// copyStack copies the stack of a thread from its stack pointer (less the
// red zone) up to maxStack bytes or the end of the mapping holding it.
func copyStack(tid int, sp uint64, maxStack int, maps []procfs.Mapping) (uint64, []byte, error) {
	i := sort.Search(len(maps), func(i int) bool { return maps[i].End > sp })
	if i == len(maps) || !maps[i].Contains(sp) {
		return 0, nil, fmt.Errorf("stack pointer %#x is not in mapped memory", sp)
	}
	m := maps[i]
	lo := sp - 128
	if lo < m.Start {
		lo = m.Start
	}
	hi := m.End
	if hi-lo > uint64(maxStack) {
		hi = lo + uint64(maxStack)
	}
	buf := make([]byte, hi-lo)
	n, err := readMem(tid, buf, lo)
	if n <= 0 {
		return 0, nil, fmt.Errorf("read stack at %#x: %w", lo, err)
	}
	return lo, buf[:n], nil
}

package agent

import (
	"strings"
	"sync"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/collector/python"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Looker takes the looks at ranks' main threads that the engine's rule
// for silent ranks needs (timer.Look): a rank stuck where no probe fires
// (a gloo collective, a rendezvous store, a Python lock, before its first
// GPU call, or already hung when tracing began).
type Looker interface {
	// Look looks at pid's main thread at monotonic time now.
	Look(pid int, now int64) (timer.Look, bool)
	// Forget drops what is known of pid (it exited or exec'd).
	Forget(pid int)
}

// ProcLooker is the Looker of a live system. A look reads a few /proc files
// of the main thread and, while it runs, its Python frames with
// process_vm_readv: nothing is stopped or woken.
type ProcLooker struct {
	Monotonic func() int64 // the clock of Look's now; default CLOCK_MONOTONIC

	mu    sync.Mutex
	ranks map[int]*lookState
}

// lookState is what the looker keeps per rank.
type lookState struct {
	py     *python.Reader
	noPy   bool   // not Python, or its interpreter cannot be read: not tried again
	frames string // Python frames of the main thread as last read
}

// Look implements Looker.
func (lk *ProcLooker) Look(pid int, now int64) (timer.Look, bool) {
	mono := lk.Monotonic
	if mono == nil {
		mono = Monotonic
	}
	clock := schedClockOffset(mono)
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.ranks == nil {
		lk.ranks = map[int]*lookState{}
	}
	st := lk.ranks[pid]
	if st == nil {
		st = &lookState{}
		lk.ranks[pid] = st
	}
	return st.look(pid, now, clock)
}

// Forget implements Looker.
func (lk *ProcLooker) Forget(pid int) {
	lk.mu.Lock()
	delete(lk.ranks, pid)
	lk.mu.Unlock()
}

// blindGrace is how long a rank may map no probed library before the log
// says so: frameworks load the CUDA libraries seconds after start.
const blindGrace = 10 * time.Second

// watchState is which detectors watch one rank (metrics.Rank.Detectors).
type watchState struct {
	since       int64 // first look, monotonic ns
	gpu, stacks bool
	told        bool // the log said the GPU probes do not watch it
}

// lookAll looks at every live rank, hands the looks to the engine, and
// keeps which detectors watch each rank: the log says once of a rank that
// no GPU probe watches.
func (a *Agent) lookAll(now int64) {
	for _, pid := range a.book.live() {
		stacks := false
		if a.o.Looker != nil {
			var l timer.Look
			if l, stacks = a.o.Looker.Look(pid, now); stacks {
				a.engine.Observe(l)
			}
		}
		gpu := a.o.Tracer.Probed(pid)
		a.mu.Lock()
		w := a.watched[pid]
		if w == nil {
			w = &watchState{since: now}
			a.watched[pid] = w
		}
		w.gpu, w.stacks = gpu, stacks
		blind := !gpu && !w.told && now-w.since >= int64(min(blindGrace, a.o.HangTimeout))
		seen := gpu && w.told
		if blind {
			w.told = true
		}
		if seen {
			w.told = false
		}
		a.mu.Unlock()
		switch {
		case blind:
			id, _ := a.identity(pid)
			a.log.Warn("no GPU probe watches this rank: it maps no CUDA/NCCL (MACA/MCCL) library, or one linked statically; only a stall of its main thread is seen",
				"pid", pid, "rank", id.Rank, "stack_watch", stacks)
		case seen:
			id, _ := a.identity(pid)
			a.log.Info("GPU probes now watch this rank", "pid", pid, "rank", id.Rank)
		}
	}
}

// detectors lists what watches pid now (metrics.Rank.Detectors).
func (a *Agent) detectors(pid int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.watched[pid]
	if w == nil {
		return nil
	}
	var out []string
	if w.gpu {
		out = append(out, metrics.DetectorGPU)
	}
	if w.stacks {
		out = append(out, metrics.DetectorStacks)
	}
	return out
}

// forgetLooks drops what the looks knew of pid (it exited or exec'd).
func (a *Agent) forgetLooks(pid int) {
	if a.o.Looker != nil {
		a.o.Looker.Forget(pid)
	}
	a.forgetSamples(pid)
	a.mu.Lock()
	delete(a.watched, pid)
	a.mu.Unlock()
}

// look reads the main thread of pid. clock converts the scheduler's clock
// to the monotonic one (0: unknown).
func (st *lookState) look(pid int, now, clock int64) (timer.Look, bool) {
	stat, err := procfs.ReadTaskStat(pid, pid)
	if err != nil || stat.State == 'Z' || stat.State == 'X' {
		return timer.Look{}, false
	}
	sched, err := procfs.ReadSched(pid, pid)
	if err != nil {
		return timer.Look{}, false
	}
	l := timer.Look{PID: pid, Time: now, State: stat.State, Runs: sched.Runs, CPU: int64(sched.RunNs)}
	if stat.State == 'S' || stat.State == 'D' || stat.State == 'T' {
		if site, err := procfs.ReadSyscall(pid, pid); err == nil && site != "running" {
			l.Site = site
		}
		if clock != 0 {
			if ran, err := procfs.ReadLastRan(pid, pid); err == nil {
				l.LastRan = ran + clock
			}
		}
	} else {
		st.readFrames(pid)
	}
	l.Python = st.frames
	return l, true
}

// readFrames reads the Python frames of pid's main thread, by function and
// file (lines move within a loop).
func (st *lookState) readFrames(pid int) {
	if st.noPy {
		return
	}
	if st.py == nil {
		r, err := python.Open(pid)
		if err != nil {
			st.noPy = true
			return
		}
		st.py = r
	}
	threads, err := st.py.Threads()
	if err != nil {
		st.frames = ""
		return
	}
	for _, th := range threads {
		if th.TID != pid {
			continue
		}
		var b strings.Builder
		for i, f := range th.Frames {
			if i > 0 {
				b.WriteByte(';')
			}
			b.WriteString(f.Func)
			b.WriteByte('@')
			b.WriteString(f.File)
		}
		st.frames = b.String()
		return
	}
	st.frames = ""
}

// schedClockOffset measures the monotonic clock minus the scheduler clock
// of /proc/PID/sched: this thread runs now, so the time it last went on a
// CPU is about now in the scheduler's clock. 0 when the kernel does not
// show it (no CONFIG_SCHED_DEBUG).
func schedClockOffset(monotonic func() int64) int64 {
	ran, err := procfs.ReadOwnLastRan()
	if err != nil {
		return 0
	}
	if off := monotonic() - ran; off != 0 {
		return off
	}
	return 1
}

// Package look reads where a rank's main thread is without stopping it:
// its scheduler state and counters, how often it went to sleep, its system
// call and when it last ran (/proc/PID/task/TID/{stat,schedstat,status,
// syscall,sched}), and its Python frames (process_vm_readv) while it
// runs and once at each new wait. The node loop's stall watch takes one
// look at each rank per check and hands it to the engine (timer.Look).
package look

import (
	"strings"
	"sync"

	"github.com/xpu-timer/xpu-timer/collector/capture/python"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Proc takes looks on a live system. A look reads a few /proc files
// of the main thread and, while it runs, its Python frames with
// process_vm_readv: nothing is stopped or woken.
type Proc struct {
	Monotonic func() int64 // the clock of Look's now (CLOCK_MONOTONIC ns); must be set

	mu    sync.Mutex
	ranks map[int]*lookState
}

// lookState is what the looker keeps per rank.
type lookState struct {
	py     python.Lazy
	frames string // Python frames of the main thread as last read
	site   string // where it waited when they were read asleep ("" running)
}

// Look looks at pid's main thread at monotonic time now; false when it
// is gone.
func (lk *Proc) Look(pid int, now int64) (timer.Look, bool) {
	clock := schedClockOffset(lk.Monotonic)
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

// Forget drops what is known of pid (it exited or exec'd).
func (lk *Proc) Forget(pid int) {
	lk.mu.Lock()
	delete(lk.ranks, pid)
	lk.mu.Unlock()
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
	l := timer.Look{PID: pid, Time: now, State: stat.State, CPU: int64(sched.RunNs)}
	if stat.State == 'S' || stat.State == 'D' || stat.State == 'T' {
		if l.Sleeps, err = procfs.ReadSleeps(pid, pid); err != nil {
			return timer.Look{}, false
		}
		if site, err := procfs.ReadSyscall(pid, pid); err == nil && site != "running" {
			l.Site, l.Timed = site, procfs.TimedSleep(site)
		}
		if l.Site != "" && l.Site != st.site {
			// A new wait: where it is in Python now (the frames of
			// its last run may be minutes old, a hang's report shows
			// them).
			st.readFrames(pid)
			st.site = l.Site
		}
		if clock != 0 {
			if ran, err := procfs.ReadLastRan(pid, pid); err == nil {
				l.LastRan = ran + clock
			}
		}
	} else {
		st.readFrames(pid)
		st.site = ""
	}
	l.Python = st.frames
	return l, true
}

// readFrames reads the Python frames of pid's main thread, by function and
// file (lines move within a loop).
func (st *lookState) readFrames(pid int) {
	r := st.py.Reader(pid)
	if r == nil {
		return
	}
	threads, err := r.Threads()
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

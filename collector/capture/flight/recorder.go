// Package flight is the flight recorder: it keeps the last events of every
// traced process in a bounded ring and writes them, when a hang is dumped,
// as a Chrome trace (collector/format/trace: JSON that Perfetto and
// chrome://tracing open), so the dump shows what each rank did just before
// it stopped.
package flight

import (
	"maps"
	"slices"
	"sync"

	"github.com/xpu-timer/xpu-timer/timer"
)

// Bounds of a Recorder.
const (
	DefaultCapacity = 4096 // events kept per process
	DefaultMaxProcs = 256  // processes kept; events of further processes are dropped
	maxComms        = 1024 // communicators counted per process
)

// Record is one recorded event; Seq is the collective's 1-based sequence
// number on its communicator handle (0 for other kinds).
type Record struct {
	timer.Event
	Seq uint64
}

// Recorder keeps the last Capacity events of each process. It is safe for
// concurrent use: the capture goroutine adds while a dump reads.
type Recorder struct {
	mu       sync.Mutex
	capacity int
	maxProcs int
	procs    map[int]*ring
	dropped  uint64 // events of processes beyond maxProcs
}

type ring struct {
	buf   []Record
	next  int    // slot of the next write
	total uint64 // events ever added
	seq   map[uint64]uint64
}

// New returns a recorder keeping capacity events per process (DefaultCapacity
// when capacity <= 0) for at most DefaultMaxProcs processes.
func New(capacity int) *Recorder {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Recorder{capacity: capacity, maxProcs: DefaultMaxProcs, procs: make(map[int]*ring)}
}

// Add records ev. A process exit forgets the process.
func (r *Recorder) Add(ev timer.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.add(&ev, r.procs[ev.PID])
}

// AddAll records evs in order, as Add one by one would, under one lock.
func (r *Recorder) AddAll(evs []timer.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The rings of the latest processes, by pid: the ranks of a node
	// launch at once, their records interleaved.
	var recent [16]struct {
		pid int
		g   *ring
	}
	for i := range evs {
		ev := &evs[i]
		c := &recent[uint(ev.PID)%uint(len(recent))]
		if c.g == nil || c.pid != ev.PID {
			c.pid, c.g = ev.PID, r.procs[ev.PID]
		}
		c.g = r.add(ev, c.g)
	}
}

// add records ev in g, the ring of ev's process (nil: none yet), and
// returns the ring it went to (nil: none); r.mu held.
func (r *Recorder) add(ev *timer.Event, g *ring) *ring {
	if ev.Kind == timer.KindProcessExit {
		delete(r.procs, ev.PID)
		return nil
	}
	if g == nil {
		if len(r.procs) >= r.maxProcs {
			r.dropped++
			return nil
		}
		g = &ring{buf: make([]Record, 0, min(r.capacity, 256)), seq: make(map[uint64]uint64)}
		r.procs[ev.PID] = g
	}
	slot := g.next
	if len(g.buf) < r.capacity {
		g.buf = append(g.buf, Record{})
	}
	rec := &g.buf[slot]
	rec.Event, rec.Seq = *ev, 0
	switch ev.Kind {
	case timer.KindCollective:
		if _, ok := g.seq[ev.Comm]; ok || len(g.seq) < maxComms {
			g.seq[ev.Comm]++
			rec.Seq = g.seq[ev.Comm]
		}
	case timer.KindProcessExec:
		clear(g.seq)
	}
	if g.next++; g.next == r.capacity {
		g.next = 0
	}
	g.total++
	return g
}

// Forget drops the events of pid.
func (r *Recorder) Forget(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.procs, pid)
}

// Events returns the recorded events of pid, oldest first, and how many
// older ones the ring has overwritten.
func (r *Recorder) Events(pid int) (recs []Record, overwritten uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.procs[pid]
	if g == nil {
		return nil, 0
	}
	if len(g.buf) < r.capacity {
		recs = slices.Clone(g.buf)
	} else {
		recs = make([]Record, 0, len(g.buf))
		recs = append(recs, g.buf[g.next:]...)
		recs = append(recs, g.buf[:g.next]...)
	}
	return recs, g.total - uint64(len(recs))
}

// Processes lists the pids with recorded events, ascending.
func (r *Recorder) Processes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.procs))
}

// Dropped is the number of events dropped because too many processes were
// recorded at once.
func (r *Recorder) Dropped() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

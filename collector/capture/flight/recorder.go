// Package flight is the flight recorder: it keeps the last events of every
// traced process in a bounded ring and writes them, when a hang is dumped,
// as a Chrome trace (collector/format/trace: JSON that Perfetto and
// chrome://tracing open), so the dump shows what each rank did just before
// it stopped.
package flight

import (
	"maps"
	"math"
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

// ring is one process's last events, oldest at next once full. A launch,
// nearly every event of a launch-bound rank, is packed in its slot (80
// bytes, without pointers beyond the kernel's name); any other event is
// kept whole in wide, its slot marking its place. A launch-bound rank
// writes a slot an event; a Record copied whole (224 bytes, four cache
// lines) was a fifth of the launcher's CPU following 8 launch-bound
// processes (BenchmarkLaunchRate).
type ring struct {
	pid   int
	slots []slot
	next  int    // slot of the next write
	total uint64 // events ever added
	seq   map[uint64]uint64
	wide  wideQueue // the Records of the slots that are not launches, oldest first
}

// slot is one event of a ring: a launch packed (kind KindLaunch), or the
// place of a Record in the ring's wide queue (kind 0, pos its position).
type slot struct {
	time   int64
	stream uint64
	pos    uint64 // a launch's Func; else the Record's position in wide
	shmem  uint64
	kernel string
	grid   [3]uint32
	block  [3]uint32
	tid    int32
	kind   timer.Kind
	phase  timer.Phase
	vendor timer.Vendor
	peer   int8 // 0 or -1, as the event had it
}

// pack packs ev into s when ev is a launch that ring.record gives back
// exactly (every field a launch does not carry at its zero, Peer 0 or
// -1 as the tracer's are), and says whether it did.
func (s *slot) pack(ev *timer.Event) bool {
	// What a launch does not carry, or'ed: one test, not a branch a field.
	rest := ev.Handle | ev.Handle2 | ev.Bytes | ev.Count | ev.Comm | uint64(ev.Parent) | uint64(len(ev.CallName)) |
		uint64(uint32(ev.Ret)|uint32(ev.CopyKind)|uint32(ev.Dtype)|uint32(ev.RedOp)|uint32(ev.NRanks)|uint32(ev.Rank)|
			math.Float32bits(ev.ElapsedMs)|uint32(ev.Op))
	if ev.Kind != timer.KindLaunch || rest != 0 || ev.CommID != [16]byte{} || uint32(ev.Peer+1) > 1 || int(int32(ev.TID)) != ev.TID {
		return false
	}
	// Field by field: a slot literal is built on the stack and copied in
	// 16-byte moves that wait for the narrower stores that built it.
	s.time, s.stream, s.pos, s.shmem, s.kernel = ev.Time, ev.Stream, ev.Func, ev.Shmem, ev.Kernel
	s.grid, s.block, s.tid = ev.Grid, ev.Block, int32(ev.TID)
	s.kind, s.phase, s.vendor, s.peer = timer.KindLaunch, ev.Phase, ev.Vendor, int8(ev.Peer)
	return true
}

// record is the event s, a slot of g, holds, as a Record.
func (g *ring) record(s *slot) Record {
	if s.kind != timer.KindLaunch {
		return *g.wide.at(s.pos)
	}
	return Record{Event: timer.Event{Time: s.time, PID: g.pid, TID: int(s.tid), Kind: timer.KindLaunch, Phase: s.phase,
		Vendor: s.vendor, Stream: s.stream, Func: s.pos, Kernel: s.kernel, Grid: s.grid, Block: s.block, Shmem: s.shmem,
		Peer: int32(s.peer)}}
}

// wideQueue is a ring's Records that are not packed launches, oldest
// first, in a circular buffer that doubles when full: it holds those of
// the ring's slots, no more.
type wideQueue struct {
	buf  []wideRec
	head int    // index of the oldest in buf
	n    int    // Records held
	base uint64 // position of the oldest: positions count the pushes
}

// wideRec is a Record of a wide queue, and the event's place among all
// its ring had (ring.total when it came).
type wideRec struct {
	Record
	at uint64
}

// push adds rec, the at-th event of its ring, as the newest and returns
// its position.
func (q *wideQueue) push(rec Record, at uint64) uint64 {
	if q.n == len(q.buf) {
		grown := make([]wideRec, max(2*len(q.buf), 16))
		k := copy(grown, q.buf[q.head:])
		copy(grown[k:], q.buf[:q.head])
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = wideRec{rec, at}
	q.n++
	return q.base + uint64(q.n) - 1
}

// pop forgets the oldest; q.n > 0.
func (q *wideQueue) pop() {
	q.buf[q.head] = wideRec{} // what it points to may go
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	q.base++
}

// at is the Record at position pos, still held.
func (q *wideQueue) at(pos uint64) *Record {
	return &q.buf[(q.head+int(pos-q.base))%len(q.buf)].Record
}

// oldestAt is the place of the oldest Record among its ring's events; q.n > 0.
func (q *wideQueue) oldestAt() uint64 { return q.buf[q.head].at }

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
		g = &ring{pid: ev.PID, slots: make([]slot, 0, min(r.capacity, 256)), seq: make(map[uint64]uint64)}
		r.procs[ev.PID] = g
	}
	if len(g.slots) < r.capacity {
		g.slots = append(g.slots, slot{})
	} else if g.wide.n > 0 && g.wide.oldestAt() == g.total-uint64(r.capacity) {
		g.wide.pop() // its slot is the one overwritten: known without reading it, most likely out of the cache
	}
	s := &g.slots[g.next]
	if !s.pack(ev) {
		rec := Record{Event: *ev}
		switch ev.Kind {
		case timer.KindCollective:
			if _, ok := g.seq[ev.Comm]; ok || len(g.seq) < maxComms {
				g.seq[ev.Comm]++
				rec.Seq = g.seq[ev.Comm]
			}
		case timer.KindProcessExec:
			clear(g.seq)
		}
		*s = slot{pos: g.wide.push(rec, g.total)}
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
	recs = make([]Record, 0, len(g.slots))
	for _, s := range [2][]slot{g.slots[g.next:], g.slots[:g.next]} {
		for i := range s {
			recs = append(recs, g.record(&s[i]))
		}
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

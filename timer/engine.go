package timer

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultHangTimeout     = 300 * time.Second
	DefaultPollRepeat      = 3
	DefaultMaxOpsPerStream = 65536
)

// RetNotReady is cudaErrorNotReady (and mcErrorNotReady): the result of a
// query whose work is still running.
const RetNotReady = 600

// Bounds on per-process bookkeeping other than the op queues.
const (
	maxEvents      = 65536 // recorded event handles remembered per process
	maxThreads     = 4096  // threads with wait state per process
	maxPollStreaks = 32    // not-ready events tracked per thread
	maxStatKeys    = 1024  // distinct kernel names or collective keys per process
	maxDeps        = 1024  // pending cudaStreamWaitEvent dependencies per stream
	maxStreams     = 4096  // streams per process before idle ones are forgotten
)

// Config tunes the engine. Zero fields take their defaults.
type Config struct {
	HangTimeout     time.Duration // how long a waiter may wait on outstanding work; default 300 s
	PollRepeat      int           // polls of the same not-ready event that make a polling waiter; default 3
	MaxOpsPerStream int           // outstanding ops kept per stream, oldest dropped beyond; default 65536
	// Samples says that the caller takes a native sample of a process
	// whose thread may be blocked in a call whose return is not probed,
	// when EnteredSince says (see "Waiters and the hang rule"): such a
	// call is then a wait once a sample confirms it, and holds off the
	// host rule until one tells. Without samples it is neither.
	Samples bool
}

// Engine turns the events of many processes into hang decisions and timing
// statistics. It is safe for concurrent use; events of one process must be
// handled in time order.
type Engine struct {
	mu        sync.Mutex
	cfg       Config
	timeout   int64
	procs     map[int]*proc
	recent    [recentProcs]*proc // the latest processes, by pid % recentProcs
	recovered []int              // pids whose decision cleared, not yet returned by Recovered
	ids       map[int]identity
}

type identity struct{ rank, world int }

// NewEngine returns an engine with cfg, defaults filled in.
func NewEngine(cfg Config) *Engine {
	if cfg.HangTimeout <= 0 {
		cfg.HangTimeout = DefaultHangTimeout
	}
	if cfg.PollRepeat <= 0 {
		cfg.PollRepeat = DefaultPollRepeat
	}
	if cfg.MaxOpsPerStream <= 0 {
		cfg.MaxOpsPerStream = DefaultMaxOpsPerStream
	}
	return &Engine{
		cfg:     cfg,
		timeout: int64(cfg.HangTimeout),
		procs:   make(map[int]*proc),
		ids:     make(map[int]identity),
	}
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// SetIdentity names the rank and world size of a process.
func (e *Engine) SetIdentity(pid, rank, worldSize int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ids[pid] = identity{rank, worldSize}
	if p := e.procs[pid]; p != nil {
		p.rank, p.world = rank, worldSize
	}
}

// proc returns the state of pid, creating it at time t.
func (e *Engine) proc(pid int, t int64) *proc {
	slot := &e.recent[uint(pid)%recentProcs]
	if p := *slot; p != nil && p.pid == pid {
		return p
	}
	p := e.procs[pid]
	if p == nil {
		p = newProc(pid, t, e.cfg.MaxOpsPerStream)
		if id, ok := e.ids[pid]; ok {
			p.rank, p.world = id.rank, id.world
		}
		e.procs[pid] = p
	}
	*slot = p
	return p
}

// recentProcs is how many processes Engine.proc finds without a map
// lookup: the ranks of a node launch at once, their records interleaved.
const recentProcs = 16

// outOfWait says whether ev shows its thread outside any wait: every call
// of a thread but a query answered "not ready" (a poll, which a waiting
// thread makes in a loop) and the records of processes.
func outOfWait(ev *Event) bool {
	switch ev.Kind {
	case KindProcessExec, KindProcessExit, KindUnknown:
		return false
	case KindEventQuery, KindStreamQuery:
		return ev.Ret == 0
	}
	return ev.TID != 0
}

// Handle consumes one event.
func (e *Engine) Handle(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handle(&ev)
}

// HandleAll consumes events in order, as Handle one by one would, under
// one lock: the tracer hands over what it read at once. It may change
// them (cudaStreamLegacy becomes stream 0).
func (e *Engine) HandleAll(evs []Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range evs {
		e.handle(&evs[i])
	}
}

// handle consumes ev, which it may change; e.mu held.
func (e *Engine) handle(ev *Event) {
	if ev.Kind == KindProcessExit {
		e.drop(ev.PID)
		return
	}
	if ev.Stream == 1 {
		ev.Stream = 0 // cudaStreamLegacy is the legacy default stream
	}
	p := e.proc(ev.PID, ev.Time)
	if p.lastWork == 0 {
		p.lastWork = ev.Time // first event of a process known from looks only
	}
	if ev.Time > p.lastActivity {
		p.lastActivity = ev.Time
	}
	if outOfWait(ev) {
		// The thread made a call: any wait a sample saw it in before had
		// ended (a launch, a collective, a communicator's creation, a
		// return; a query answered "not ready" is a poll inside a wait).
		if th := p.thread(ev.TID); ev.Time > th.returned {
			th.returned = ev.Time
		}
	}
	switch ev.Kind {
	case KindLaunch, KindGraphLaunch, KindMemcpyAsync, KindCollective:
		p.entered(ev, p.issue(ev))
	case KindMemcpy:
		p.memcpy(ev)
	case KindEventRecord:
		p.entered(ev, p.record(ev))
	case KindEventQuery:
		p.eventQuery(ev)
		p.thread(ev.TID).in.leave()
	case KindEventSynchronize, KindStreamSynchronize, KindDeviceSynchronize:
		p.blocking(ev)
	case KindStreamQuery:
		th := p.thread(ev.TID)
		th.in.leave()
		if ev.Ret == 0 {
			s := p.stream(ev.Stream)
			p.retire(s, s.next, ev.Time)
			th.returned = ev.Time
		}
	case KindStreamWaitEvent:
		p.entered(ev, p.waitEvent(ev))
	case KindEventElapsed:
		p.elapsed(ev)
		p.thread(ev.TID).in.leave()
	case KindCommInit: // at its return
		p.thread(ev.TID).in.leave()
		p.commInit(ev)
	case KindCommDestroy: // at its entry
		p.commDestroy(ev)
		p.entered(ev, nil)
	case KindCall:
		p.call(ev)
	case KindGroupStart:
		p.groupDepth++
		p.thread(ev.TID).in.leave()
	case KindGroupEnd:
		if p.groupDepth > 0 {
			p.groupDepth--
		}
		p.entered(ev, nil)
	case KindProcessExec:
		// A new program image: its GPU state starts afresh.
		rank, world := p.rank, p.world
		q := newProc(ev.PID, ev.Time, e.cfg.MaxOpsPerStream)
		q.rank, q.world = rank, world
		q.execAt = ev.Time
		if p.hang != nil {
			e.recovered = append(e.recovered, p.pid)
		}
		e.procs[ev.PID] = q
		e.recent[uint(ev.PID)%recentProcs] = q
	}
}

// drop forgets an exited process.
func (e *Engine) drop(pid int) {
	p := e.procs[pid]
	if p == nil {
		return
	}
	if p.hang != nil {
		e.recovered = append(e.recovered, pid)
	}
	delete(e.procs, pid)
	delete(e.ids, pid)
	if slot := &e.recent[uint(pid)%recentProcs]; *slot == p {
		*slot = nil
	}
}

// Forget drops what the engine holds of pid, as its exit does (a process
// found out of the agent's scope after its first calls).
func (e *Engine) Forget(pid int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.drop(pid)
}

// Processes lists the pids the engine holds state for, ascending.
func (e *Engine) Processes() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.procs))
}

// ProcState is what the metrics need of one process.
type ProcState struct {
	PID          int      `json:"pid"`
	Rank         int      `json:"rank"`  // -1 if unknown
	World        int      `json:"world"` // 0 if unknown
	Pending      int      `json:"pending"`
	OldestAgeNs  int64    `json:"oldest_age_ns"` // age of the oldest outstanding op, 0 when none
	LastActivity int64    `json:"last_activity_ns"`
	LastWork     int64    `json:"last_work_ns"` // last launch, copy or collective (or first sight)
	Dropped      uint64   `json:"dropped"`      // ops forgotten because a stream's queue was full
	Waiters      int      `json:"waiters"`
	Hung         bool     `json:"hung"`
	HangKind     HangKind `json:"hang_kind,omitempty"`
}

// State reports the state of pid at time now.
func (e *Engine) State(pid int, now int64) (ProcState, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.procs[pid]
	if p == nil {
		return ProcState{}, false
	}
	st := ProcState{
		PID: p.pid, Rank: p.rank, World: p.world, Pending: p.pending,
		LastActivity: p.lastActivity, LastWork: p.lastWork, Dropped: p.dropped,
		Waiters: len(p.waiters(now, e.cfg.PollRepeat, e.timeout)),
	}
	if o := p.oldest(); o != nil {
		st.OldestAgeNs = max(0, now-o.issued)
	}
	if p.hang != nil {
		st.Hung, st.HangKind = true, p.hang.Kind
	}
	return st, true
}

// Comms reports what pid knows of its communicators, in order of creation.
func (e *Engine) Comms(pid int) []CommState {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.procs[pid]
	if p == nil {
		return nil
	}
	return p.commStates()
}

// Hung returns the current decision of pid, if it is hung.
func (e *Engine) Hung(pid int) (Hang, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.procs[pid]
	if p == nil || p.hang == nil {
		return Hang{}, false
	}
	return *p.hang, true
}

package timer

import "strings"

// Look is what a look from outside at a process's main thread (the thread
// whose id is the pid, the one that drives training in PyTorch and most
// jobs) saw at one instant, without stopping it: its scheduler counters
// and, while it sleeps, where it waits. The caller takes looks about once
// a check interval at processes it knows are ranks and passes them in
// time order per process.
type Look struct {
	PID     int
	Time    int64  // monotonic ns of the look
	State   byte   // scheduler state letter: 'R' running, 'S' sleeping, 'D' disk sleep, ...
	Sleeps  uint64 // times the thread went to sleep so far (its voluntary context switches: a preemption is none)
	CPU     int64  // ns the thread has run so far
	LastRan int64  // monotonic ns the thread last went on a CPU; 0 when unknown
	Site    string // where it waits while it sleeps (system call and its arguments, stack and instruction pointers); "" when unknown
	Timed   bool   // it sleeps for time alone (nanosleep, or select or poll given no descriptor: Python's time.sleep)
	Python  string // its Python frames, innermost first (function and file, no lines), as last read; "" when not read or not Python
}

// Stall describes a "stalled" decision, or a "host" decision made on looks
// (a rank spinning in the same Python frames while its peers are stuck).
type Stall struct {
	Since    int64  `json:"since_ns"`         // monotonic ns the main thread was last seen to progress
	State    string `json:"state"`            // scheduler state letter of the main thread
	Site     string `json:"site,omitempty"`   // where it waits (Look.Site)
	Python   string `json:"python,omitempty"` // its Python frames (Look.Python)
	Spinning bool   `json:"spinning"`         // it runs, in the same Python frames
}

// still is what the engine knows of a process's main thread from looks.
type still struct {
	last     Look
	since    int64 // start of the current period without progress; 0 while it progresses
	spinning bool
	stops    int // stops of the process by the last look (proc.stops)
}

// blocked says whether a scheduler state is a sleep: the thread waits.
func blocked(state byte) bool { return state == 'S' || state == 'D' || state == 'T' }

// sameCall says whether two sites (Look.Site: "NR arg1 ... arg6 sp pc")
// are the same system call made from the same instruction: a loop of
// sleeps passes other stack addresses from one turn to the next.
func sameCall(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	return len(fa) > 1 && len(fb) > 1 && fa[0] == fb[0] && fa[len(fa)-1] == fb[len(fb)-1]
}

// sleepLoop says whether a thread asleep for time alone at two looks, at
// the same call, went to sleep between them no more often than a loop of
// that sleep alone can, the stops since allowed for: a loop of sleeps of
// one length d goes to sleep at most (l.Time-prev.Time)/d + 1 times in
// between, and d is at least how long each look saw its sleep last so far
// (Look.LastRan). A thread that went to sleep more often waited elsewhere
// too: it works between its sleeps (a rank resting after each step, woken
// a dozen times a step by its data loader and collectives). Without both
// LastRan, any count is taken for the loop.
func sleepLoop(prev, l Look, stopped int) bool {
	if l.Sleeps < prev.Sleeps {
		return false
	}
	if prev.LastRan <= 0 || l.LastRan <= 0 || prev.LastRan > prev.Time || l.LastRan > l.Time {
		return true
	}
	d := max(prev.Time-prev.LastRan, l.Time-l.LastRan)
	if d <= 0 {
		return true
	}
	most := uint64((l.Time-prev.Time)/d) + 1 + uint64(stopSleeps*stopped)
	return l.Sleeps-prev.Sleeps <= most
}

// stopSleeps is how many times a stop of every thread (a native sample,
// a capture) puts a sleeping thread to sleep: in its stop, and back in its
// wait once let go, however often it is preempted on the way
// (docs/measurements.md, "Figures from code comments").
const stopSleeps = 2

// Stopped tells the engine that the caller stopped every thread of pid
// once other than for a native sample (ObserveSample counts those): a
// capture, for a dump or for the early warning's activity. The looks
// after it allow its sleeps (Look.Sleeps), which are no progress of the
// thread's own. A process the engine does not know is left alone.
func (e *Engine) Stopped(pid int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.procs[pid]; p != nil {
		p.stops++
	}
}

// spinShare is the least share of the time between two looks a thread
// must have run to count as spinning.
const spinShare = 0.5

// Observe takes one look at a process (see Look and the package comment's
// "Silent ranks").
func (e *Engine) Observe(l Look) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.observed(l.PID, l.Time)
	s := p.still
	if s == nil {
		s = &still{}
		p.still = s
	} else if l.Time <= s.last.Time {
		return // out of order
	}
	prev, first := s.last, s.last.Time == 0
	s.last = l
	// Gone to sleep no more often than the stops since the previous
	// look made it: any more is the thread's own.
	stopped := p.stops - s.stops
	s.stops = p.stops
	switch {
	case blocked(l.State) && !first && blocked(prev.State) && l.Sleeps >= prev.Sleeps && l.Sleeps-prev.Sleeps <= uint64(stopSleeps*stopped) && l.Site == prev.Site,
		blocked(l.State) && !first && blocked(prev.State) && l.Timed && prev.Timed && sameCall(l.Site, prev.Site) &&
			sleepLoop(prev, l, stopped):
		// Not gone to sleep again since the previous look, waiting at
		// the same place (or only as the native samples and captures
		// taken meanwhile made it, each of which stops and resumes every
		// thread: the wait goes on; a thread that slept more often than
		// they account for woke on its own, and back at the same place
		// has made progress: a rank taking a batch from its DataLoader
		// every step), or in a loop of sleeps for time alone at one
		// place (a straggler's `while True: time.sleep(1)`): waking only
		// to sleep again there is no progress; one that went to sleep
		// more often than that loop can works between its sleeps.
		if s.since == 0 || s.spinning {
			s.since, s.spinning = prev.Time, false
		}
	case blocked(l.State):
		// It sleeps now; it last ran when it went to sleep.
		s.since, s.spinning = l.Time, false
		if l.LastRan > 0 && l.LastRan <= l.Time && (first || l.LastRan >= prev.Time) {
			s.since = l.LastRan
		}
	case !first && l.Python != "" && l.Python == prev.Python && float64(l.CPU-prev.CPU) >= spinShare*float64(l.Time-prev.Time):
		// It runs, and its Python frames have not changed.
		if s.since == 0 || !s.spinning {
			s.since, s.spinning = prev.Time, true
		}
	default:
		s.since, s.spinning = 0, false
	}
}

// observed returns pid's process for a look or a sample taken at t. One
// known from looks and samples only is created with no GPU silence: that
// counts from its first event (Handle), not from this look.
func (e *Engine) observed(pid int, t int64) *proc {
	p := e.procs[pid]
	if p == nil {
		p = e.proc(pid, t)
		p.lastWork, p.lastActivity = 0, 0
	}
	return p
}

// stillSince is when p last progressed, as far as looks and GPU work tell,
// or 0 when it is progressing.
func (p *proc) stillSince() int64 {
	if p.still == nil || p.still.since == 0 {
		return 0
	}
	if p.gseq > 0 {
		return max(p.still.since, p.lastWork)
	}
	return p.still.since
}

// stalled applies the rules for silent ranks to v's process: its main
// thread has not progressed for longer than the timeout, it issued no GPU
// work meanwhile, no thread of it or of an undecided peer waits on the GPU
// (the "gpu" and "host" rules judge those, with sequence numbers), and
// every other looked-at process is decided already or has not progressed
// for longer than the timeout either: a rank that finished while its peers
// train, or one whose peers wait a moment in a collective, is not stalled.
// A lone process (no other looked-at rank) is never stalled: nothing
// waits for it, so its long sleep or computation is no evidence of a hang
// (the gpu rule still sees it waiting on the GPU). A spinning process also
// needs a peer that is stuck, not spinning: a job whose every rank computes
// in one Python function for long is busy.
func (e *Engine) stalled(views []view, v *view, now int64) (*Stall, bool) {
	p := v.p
	since := p.stillSince()
	if since == 0 || now-since <= e.timeout || len(v.waiters) > 0 || p.stackWaiting() {
		return nil, false
	}
	stuckPeer, peers := false, 0
	for i := range views {
		q := views[i].p
		if q != p && (q.still != nil || len(views[i].waiters) > 0) {
			peers++
		}
		switch {
		case q == p || q.still == nil && len(views[i].waiters) == 0:
			// itself, or never looked at: not a rank
		case q.hang != nil:
			stuckPeer = true
		case len(views[i].waiters) > 0 || q.stackWaiting():
			return nil, false // a peer waits on the GPU: the "gpu" and "host" rules judge, with sequence numbers
		case q.stillSince() == 0 || now-q.stillSince() <= e.timeout:
			return nil, false // a peer progresses, or did within the timeout
		case !q.still.spinning:
			stuckPeer = true
		}
	}
	s := p.still
	if peers == 0 || s.spinning && !stuckPeer {
		return nil, false // nobody waits for it (a lone process sleeping or computing), or all are busy
	}
	return &Stall{
		Since: since, State: string(s.last.State), Site: s.last.Site, Python: s.last.Python, Spinning: s.spinning,
	}, true
}

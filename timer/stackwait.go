package timer

import "slices"

// Sample is one native sample of every thread of a process: the threads
// its stacks show waiting on the GPU (collector/capture/gpuwait reads them). The
// caller takes samples at processes it knows are ranks, at most one per
// sample period, and passes them in time order per process.
type Sample struct {
	PID   int
	Time  int64        // monotonic ns of the sample
	Waits []ThreadWait // the threads seen inside a GPU wait; the others are not, except
	// Unseen lists the threads whose stacks the sample could not read (not
	// stopped in time on a loaded machine): what an earlier sample saw of
	// them stands, neither confirmed nor cleared.
	Unseen []int
}

// ThreadWait is one thread a sample saw inside a GPU wait.
type ThreadWait struct {
	TID     int
	Call    string // the call it waits in, e.g. "cuStreamSynchronize"; "" when no frame names it
	Library string // the GPU library it is in, when no frame names the call, e.g. "libcuda.so.1"
	From    string // what the wait is for, e.g. "c10d::AsyncAllreduceCUDAHostWork::run"; "" when unknown
	Kernel  string // the kernel a launch it is in is for, named by the launch's stub frame; "" when unknown
	Python  string // its Python frames, innermost first (function, file and line); "" when none
	State   byte   // scheduler state letter: 'R' spinning, 'S' sleeping, ...
}

// key says which wait a thread is in: the same caller and Python frames
// (the innermost call may differ between samples of one c10d wait loop).
func (w *ThreadWait) key() string {
	site := w.From
	if site == "" {
		site = w.call()
	}
	return site + "\x00" + w.Python
}

// call is the call it waits in: its name, else the library it is in.
func (w *ThreadWait) call() string {
	if w.Call == "" && w.Library != "" {
		return "a call into " + w.Library
	}
	return w.Call
}

// Name is the wait as a waiter's call: "cuStreamSynchronize from X",
// "cudaLaunchKernel of K from X" (collector/capture/gpuwait's Wait says
// itself so too).
func (w *ThreadWait) Name() string {
	n := w.call()
	if w.Kernel != "" {
		n += " of " + w.Kernel
	}
	if w.From != "" {
		n += " from " + w.From
	}
	return n
}

// StackWait describes a "gpu" decision made on native stacks: the thread
// seen in the same GPU wait by samples longer than the timeout apart.
type StackWait struct {
	TID     int    `json:"tid"`
	Call    string `json:"call"`              // "" when no frame names it
	Library string `json:"library,omitempty"` // the GPU library it is in, when no frame names the call
	From    string `json:"from,omitempty"`
	Kernel  string `json:"kernel,omitempty"` // the kernel the launch it waits in is for (its stub frame), when it is a launch
	Python  string `json:"python,omitempty"`
	State   string `json:"state"`    // scheduler state letter at the latest sample: "R" spinning, "S" sleeping
	Since   int64  `json:"since_ns"` // monotonic ns of the first sample that saw the wait
	Seen    int64  `json:"seen_ns"`  // monotonic ns of the latest sample that saw it
}

// sampleWaits is what the engine knows of a process from samples.
type sampleWaits struct {
	last  int64 // time of the latest sample
	waits map[int]*stackWait
}

// stackWait is one thread's wait as the samples saw it.
type stackWait struct {
	ThreadWait
	key         string
	since, seen int64
}

// ObserveSample takes one native sample of a process (see Sample and the
// package comment's "Waits known by their stack").
func (e *Engine) ObserveSample(s Sample) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.observed(s.PID, s.Time)
	sw := p.sample
	if sw == nil {
		sw = &sampleWaits{}
		p.sample = sw
	} else if s.Time <= sw.last {
		return // out of order
	}
	sw.last = s.Time
	p.stops++
	p.sampledCalls(&s)
	prev := sw.waits
	sw.waits = make(map[int]*stackWait, len(s.Waits))
	for _, w := range s.Waits {
		if p.probesJudge(w.TID) {
			continue // the probes know the call it is in: their rule judges it
		}
		cur := &stackWait{ThreadWait: w, key: w.key(), since: s.Time, seen: s.Time}
		if old := prev[w.TID]; old != nil && old.key == cur.key && p.returned(w.TID) <= old.since {
			cur.since = old.since // the same wait, and the probes saw no return from it
		}
		sw.waits[w.TID] = cur
	}
	for _, tid := range s.Unseen {
		if old := prev[tid]; old != nil && sw.waits[tid] == nil {
			sw.waits[tid] = old
		}
	}
}

// sampledCalls tells the threads in a call whose return is not probed
// (entered) what s saw of them: a thread inside a GPU call after the
// entry has been in that call since (the probes saw it make no other);
// one outside every GPU call has returned from it. A thread whose stack s
// could not read is neither.
func (p *proc) sampledCalls(s *Sample) {
	for tid, th := range p.threads {
		c := &th.in
		if c.state != entered || c.since >= s.Time || slices.Contains(s.Unseen, tid) {
			continue
		}
		if i := slices.IndexFunc(s.Waits, func(w ThreadWait) bool { return w.TID == tid }); i >= 0 {
			c.seen, c.stackCall = s.Time, s.Waits[i].Call
		} else {
			c.leave()
		}
	}
}

// probesJudge says whether the probes know the call a thread of p is in
// well enough for their rule alone to judge it, not its stack: they saw
// the process from its start (so every GPU work it issued), and the
// thread enter a call made now and then (KindCall) it has not returned
// from, which may keep it busy on the CPU (a module compiled from PTX):
// with nothing outstanding it is no wait however long. A synchronize or
// a copy waits on GPU work by what it is: one that lasts waits on work
// the probes did not see (events lost), which its stack still shows. A
// process followed while it ran may wait on work issued before the probes
// came, which only its stack shows.
func (p *proc) probesJudge(tid int) bool {
	th := p.threads[tid]
	return p.execAt > 0 && th != nil && th.in.state == inside && th.in.kind == KindCall
}

// EnteredSince is the entry of the oldest call a thread of pid is in
// whose return the probes do not see, that awaits GPU work not known
// complete and that no native sample has confirmed (a sample more than
// the timeout after the entry that saw the thread inside a GPU call) nor
// ended (one that saw it outside every GPU call); 0 when none. A caller
// with Config.Samples takes a sample of pid just past this plus the
// timeout: it confirms the wait, which is then decided at once, or ends
// it.
func (e *Engine) EnteredSince(pid int) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.procs[pid]
	if p == nil {
		return 0
	}
	var since int64
	for _, th := range p.threads {
		c := &th.in
		if c.state != entered || c.confirmed(e.timeout) || since != 0 && c.since >= since || p.awaited(c.waitsFor()) == nil {
			continue
		}
		since = c.since
	}
	return since
}

// mayWaitOnGPU says whether a thread of p is in a call whose return is
// not probed, awaiting GPU work not known complete, that no native sample
// has told about yet (see EnteredSince): with samples, it may be waiting
// on the GPU until one tells.
func (p *proc) mayWaitOnGPU(timeout int64) bool {
	for _, th := range p.threads {
		if c := &th.in; c.state == entered && !c.confirmed(timeout) && p.awaited(c.waitsFor()) != nil {
			return true
		}
	}
	return false
}

// StackWaitSince is the time of the first sample that saw the oldest wait
// a thread of pid is in now, by the latest sample; 0 when none. A caller
// that samples on a period takes the sample that can confirm it (one
// later than this plus the timeout) as early as its period allows.
func (e *Engine) StackWaitSince(pid int) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.procs[pid]
	if p == nil || p.sample == nil {
		return 0
	}
	var since int64
	for _, w := range p.sample.waits {
		if p.waitEnded(w) {
			continue
		}
		if since == 0 || w.since < since {
			since = w.since
		}
	}
	return since
}

// stackWaiting says whether the latest sample saw a thread of p in a GPU
// wait, for however long, that the probes have not seen end since. A rank
// is sampled only after a period without GPU work, so its latest sample
// may be much older than its last call (taken at start-up, before it
// trained): a wait it saw is over once its thread made a call.
func (p *proc) stackWaiting() bool { return p.stackWaitingAfter(0) }

// stackWaitingAfter is stackWaiting for the waits first seen after t: the
// host rule asks after the rank's last GPU work, since a wait seen before
// it says nothing of the silence that followed (a thread still in it
// waits on work the probes know, which the "gpu" rule judges).
func (p *proc) stackWaitingAfter(t int64) bool {
	if p.sample == nil {
		return false
	}
	for _, w := range p.sample.waits {
		if !p.waitEnded(w) && w.since > t {
			return true
		}
	}
	return false
}

// waitEnded says whether the probes saw w's thread enter or return from a
// blocking call, or get a ready answer to a query, after the first sample
// that saw w: it is in that wait no longer.
func (p *proc) waitEnded(w *stackWait) bool { return p.returned(w.TID) > w.since }

// LastWork is when pid last issued GPU work (a launch, copy or
// collective) as the probes saw it; 0 when never or unknown.
func (e *Engine) LastWork(pid int) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.procs[pid]; p != nil && p.gseq > 0 {
		return p.lastWork
	}
	return 0
}

// returned is when the probes last saw thread tid enter or come back from
// a blocking call, or get a ready answer to a query: any wait it was in
// before had ended by then (an entry counts: the return of a call entered
// before the probes were attached is not seen); 0 when never.
func (p *proc) returned(tid int) int64 {
	if th := p.threads[tid]; th != nil {
		return th.returned
	}
	return 0
}

// stackWaitPast returns p's thread that samples saw in one GPU wait for
// longer than the timeout (the oldest such wait; the lowest tid among
// equals), or nil.
func (p *proc) stackWaitPast(timeout int64) *stackWait {
	if p.sample == nil {
		return nil
	}
	var best *stackWait
	for _, w := range p.sample.waits {
		if w.seen-w.since <= timeout || p.waitEnded(w) {
			continue
		}
		if best == nil || w.since < best.since || w.since == best.since && w.TID < best.TID {
			best = w
		}
	}
	return best
}

// stackHung applies the rule for waits known by their stack to v's
// process: a thread seen in the same GPU wait by samples more than the
// timeout apart, with no return from it seen by the probes in between,
// while no other rank progresses (each is decided, waits on the GPU, or
// its main thread has not progressed for longer than the timeout). A
// lone rank is decided alone.
func (e *Engine) stackHung(views []view, v *view, now int64) (*stackWait, bool) {
	w := v.p.stackWaitPast(e.timeout)
	if w == nil {
		return nil, false
	}
	for i := range views {
		q := views[i].p
		switch {
		case q == v.p || q.hang != nil || len(views[i].waiters) > 0:
			// itself, decided, or waiting on the GPU as the probes see it
		case q.stackWaiting():
			// waiting on the GPU as its stacks show
		case q.still == nil:
			// never looked at: not a rank
		case q.stillSince() == 0 || now-q.stillSince() <= e.timeout:
			return nil, false // a peer progresses: this rank may be waiting for it
		}
	}
	return w, true
}

// stackDecision fills a "gpu" decision made on stacks.
func (p *proc) stackDecision(h *Hang, w *stackWait, now int64) {
	h.AgeNs = now - w.since
	h.StackWait = &StackWait{
		TID: w.TID, Call: w.Call, Library: w.Library, From: w.From, Kernel: w.Kernel, Python: w.Python, State: string(w.State), Since: w.since, Seen: w.seen,
	}
	h.Waiters = []Waiter{{TID: w.TID, Call: w.Name() + " (seen on its stack)", Since: w.since}}
	if o := p.oldest(); o != nil {
		op := o.op()
		h.Oldest = &op
	}
	for _, s := range p.streams {
		for i := 0; i < s.q.n; i++ {
			o := s.q.at(i)
			if o.kind == opCollective && (h.Collective == nil || o.issued < h.Collective.Issued) {
				op := o.op()
				h.Collective = &op
			}
		}
	}
}

// stackStill says whether a decision made on stacks still holds: the
// thread is in the same wait by the latest sample.
func (p *proc) stackStill(sw *StackWait) bool {
	if p.sample == nil {
		return false
	}
	w := p.sample.waits[sw.TID]
	return w != nil && w.since == sw.Since && p.returned(sw.TID) <= sw.Since
}

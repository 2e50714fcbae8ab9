package timer

import (
	"slices"
	"strconv"
)

// target is a point of a stream a waiter waits for: every item below pos.
type target struct {
	stream, pos uint64
}

// thread is the wait state of one thread.
type thread struct {
	returned int64  // latest entry to or return from a blocking call, or ready answer to a query: a wait it was in before ended by then
	in       inCall // the call it is in, as the probes saw it enter (beside returned: a launch writes both)
	polls    []pollStreak
}

// callState is what the probes know of the call a thread is in.
type callState uint8

const (
	// outside: no call seen, or the latest one returned, or a native
	// sample saw the thread outside every GPU call after it entered one
	// whose return is not probed.
	outside callState = iota
	// inside: the thread entered a call whose return is probed (a
	// synchronize, a synchronous copy, an allocation, a free, a module
	// load, ...) and has not returned: it is inside it.
	inside
	// entered: the thread entered a call whose return is not probed (a
	// launch, an asynchronous copy, an event record, a collective, a
	// group end: the calls of every step, probed at entry only), and has
	// made no call since: it is inside it, or returned unseen. A native
	// sample that finds it inside a GPU call after the entry tells
	// (inCall.seen).
	entered
)

// inCall is the latest call of a thread as the probes saw it enter: one
// value, overwritten at every call (no allocation for the calls of every
// step).
type inCall struct {
	// What a launch writes first (proc.entered's loop of launches: one
	// cache line with thread.returned).
	state  callState
	kind   Kind
	vendor Vendor
	op     CollOp // a collective's operation
	since  int64  // the entry
	stream uint64 // the stream it waits on, 0 for device-wide
	// What it waits for: every item of stream below pos (a call of one
	// stream), or targets when set (device-wide calls, event
	// synchronizes).
	pos  uint64
	seen int64 // entered: the latest native sample after the entry that saw the thread inside a GPU call; 0 when none
	// stackCall is the call that sample's stack names, "" when none: the
	// very entry point (cuLaunchKernelEx, the runtime's cudaLaunchKernel),
	// where the probes' record names only the kind.
	stackCall string
	name      string // KindCall: the function (Event.CallName)
	targets   []target
	copyPos   uint64    // KindMemcpy: the copy's own end position on stream 0
	event     *eventRec // KindEventSynchronize
	gen       uint64
}

// leave marks the thread outside any call (it returned): what the last
// call left is cleared only where it set something, so that the path of
// every query writes one byte.
func (c *inCall) leave() {
	if c.name != "" || c.targets != nil || c.event != nil || c.stackCall != "" {
		*c = inCall{}
		return
	}
	c.state = outside
}

// waitsFor is what the call waits for.
func (c *inCall) waitsFor() []target {
	if c.targets != nil || c.pos == 0 {
		return c.targets
	}
	return []target{{stream: c.stream, pos: c.pos}}
}

// confirmed says whether c is a wait by the probes and the samples: a
// call whose return is probed that has not returned, or one whose return
// is not probed that a native sample, more than timeout after the entry,
// saw the thread inside (it has been in it since: the probes saw it make
// no call).
func (c *inCall) confirmed(timeout int64) bool {
	return c.state == inside || c.state == entered && c.seen-c.since > timeout
}

func (p *proc) thread(tid int) *thread {
	if th := p.lastThread; th != nil && p.lastTID == tid {
		return th // a stream's calls come mostly from one thread
	}
	th := p.threads[tid]
	if th == nil {
		if len(p.threads) >= maxThreads {
			p.lastThread = nil
			for id, t := range p.threads {
				if t.in.state == outside && len(t.polls) == 0 {
					delete(p.threads, id)
				}
			}
			for id := range p.threads {
				if len(p.threads) < maxThreads*3/4 {
					break
				}
				delete(p.threads, id)
			}
		}
		th = &thread{}
		p.threads[tid] = th
	}
	p.lastThread, p.lastTID = th, tid
	return th
}

// pollStreak counts consecutive not-ready queries of one event by a thread.
type pollStreak struct {
	handle uint64
	gen    uint64
	n      int
	since  int64
	vendor Vendor
}

func (th *thread) poll(handle, gen uint64, t int64, v Vendor) {
	for i := range th.polls {
		ps := &th.polls[i]
		if ps.handle == handle {
			if ps.gen != gen {
				*ps = pollStreak{handle: handle, gen: gen, since: t}
			}
			ps.n++
			return
		}
	}
	if len(th.polls) >= maxPollStreaks {
		th.polls = slices.Delete(th.polls, 0, 1)
	}
	th.polls = append(th.polls, pollStreak{handle: handle, gen: gen, n: 1, since: t, vendor: v})
}

func (th *thread) clearPoll(handle uint64) {
	th.polls = slices.DeleteFunc(th.polls, func(ps pollStreak) bool { return ps.handle == handle })
}

// waitsOnGPU says whether any of ws, for however long, waits on GPU work
// of p not known complete.
func (p *proc) waitsOnGPU(ws []waiting) bool {
	for _, w := range ws {
		if p.awaited(w.targets) != nil {
			return true
		}
	}
	return false
}

// waiting is a waiter with what it waits for.
type waiting struct {
	Waiter
	targets []target
}

// waiters lists the threads of p now blocked in a call (see
// inCall.confirmed), or polling GPU work.
func (p *proc) waiters(now int64, repeat int, timeout int64) []waiting {
	var ws []waiting
	for tid, th := range p.threads {
		if c := &th.in; c.confirmed(timeout) {
			ws = append(ws, waiting{
				Waiter:  Waiter{TID: tid, Call: c.callName(), Stream: c.stream, Since: c.since},
				targets: c.waitsFor(),
			})
		}
		for _, ps := range th.polls {
			r := p.events[ps.handle]
			if ps.n < repeat || r == nil || r.ready || r.gen != ps.gen {
				continue
			}
			ws = append(ws, waiting{
				Waiter:  Waiter{TID: tid, Call: callName(KindEventQuery, ps.vendor, true), Stream: r.stream, Since: ps.since},
				targets: []target{{stream: r.stream, pos: r.pos}},
			})
		}
	}
	slices.SortFunc(ws, func(a, b waiting) int {
		if a.TID != b.TID {
			return a.TID - b.TID
		}
		if a.Since != b.Since {
			if a.Since < b.Since {
				return -1
			}
			return 1
		}
		return 0
	})
	return ws
}

// awaited returns the oldest op not known complete among the work the
// targets depend on: the items before each target on its stream, and,
// through cudaStreamWaitEvent, the items of other streams they wait for.
func (p *proc) awaited(targets []target) *qop {
	var best *qop
	reached := make(map[uint64]uint64, 4) // stream -> highest position explored
	var walk func(t target)
	walk = func(t target) {
		if got, ok := reached[t.stream]; ok && got >= t.pos {
			return
		}
		reached[t.stream] = t.pos
		s := p.streams[t.stream]
		if s == nil || t.pos <= s.done {
			return
		}
		if s.q.n > 0 && s.q.front().pos < t.pos && (best == nil || s.q.front().gseq < best.gseq) {
			best = s.q.front()
		}
		for _, d := range s.deps {
			if d.at < t.pos {
				walk(target{stream: d.on, pos: d.onPos})
			}
		}
	}
	for _, t := range targets {
		walk(t)
	}
	return best
}

// span is the work a set of waiters depends on that is not known
// complete: the stuck op is one of its ops, the oldest unless that one
// completed unobserved (the probes see no completion of work that nobody
// waited for).
type span struct {
	oldest, newest *qop // first and last issued (gseq)
	n              int  // how many ops
	coll           *qop // the oldest collective, nil if none
	// colls holds, per communicator, the highest sequence number of the
	// span's collectives; low the collective of lowest sequence number.
	colls map[string]uint64
	low   map[string]*qop
}

// awaitedSpan walks the work the targets depend on, as awaited does, and
// describes the ops not known complete in it. Each op counts once, however
// many targets reach it.
func (p *proc) awaitedSpan(targets []target) span {
	var sp span
	reached := make(map[uint64]uint64, 4)
	var walk func(t target)
	walk = func(t target) {
		from, seen := reached[t.stream]
		if seen && from >= t.pos {
			return
		}
		reached[t.stream] = t.pos
		s := p.streams[t.stream]
		if s == nil || t.pos <= s.done {
			return
		}
		for i := 0; i < s.q.n; i++ {
			o := s.q.at(i)
			if o.pos >= t.pos {
				break
			}
			if seen && o.pos < from {
				continue // counted by the walk that reached from
			}
			sp.n++
			if sp.oldest == nil || o.gseq < sp.oldest.gseq {
				sp.oldest = o
			}
			if sp.newest == nil || o.gseq > sp.newest.gseq {
				sp.newest = o
			}
			if o.kind != opCollective {
				continue
			}
			if sp.colls == nil {
				sp.colls, sp.low = make(map[string]uint64), make(map[string]*qop)
			}
			if o.seq > sp.colls[o.comm.id] {
				sp.colls[o.comm.id] = o.seq
			}
			if l := sp.low[o.comm.id]; l == nil || o.seq < l.seq {
				sp.low[o.comm.id] = o
			}
			if sp.coll == nil || o.gseq < sp.coll.gseq {
				sp.coll = o
			}
		}
		for _, d := range s.deps {
			if d.at < t.pos {
				walk(target{stream: d.on, pos: d.onPos})
			}
		}
	}
	for _, t := range targets {
		walk(t)
	}
	return sp
}

// callName is the API name of a wait, in the vendor's spelling.
func callName(k Kind, v Vendor, polling bool) string {
	if polling {
		return k.Call(v) + " (polling)"
	}
	return k.Call(v)
}

// callName is the API name of the call a thread is in, in the vendor's
// spelling: the one its confirming sample's stack names, else the function
// itself for a KindCall, the driver's name of a launch, copy or event call
// (CUDA's are probed in the driver), NCCL's of a collective or
// communicator call.
func (c *inCall) callName() string {
	if c.stackCall != "" {
		return c.stackCall
	}
	ev := Event{Kind: c.kind, Vendor: c.vendor, Op: c.op, CallName: c.name}
	return ev.Call()
}

// kernelAcc is the accumulator of a kernel completed with name (empty:
// unnamed) and handle fn, found in p.stats.recent when it was lately.
func (p *proc) kernelAcc(name string, fn uint64) *kernelAcc {
	sl := p.stats.slot(fn)
	if sl.holds(name, fn) {
		return sl.acc
	}
	key := p.kernelName(name, fn)
	*sl = kernelSlot{fn: fn, name: name, key: key, acc: p.stats.kernel(key)}
	return sl.acc
}

// kernelName is the statistics key of a kernel: its name, or its stub
// address when the name is unknown.
func (p *proc) kernelName(name string, fn uint64) string {
	if name != "" {
		return name
	}
	if sl := p.stats.slot(fn); sl.holds("", fn) {
		return sl.key
	}
	if p.stats.funcNames == nil {
		p.stats.funcNames = make(map[uint64]string)
	}
	if n, ok := p.stats.funcNames[fn]; ok {
		return n
	}
	n := "0x" + strconv.FormatUint(fn, 16)
	if len(p.stats.funcNames) < maxStatKeys {
		p.stats.funcNames[fn] = n
	}
	return n
}

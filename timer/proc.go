package timer

import (
	"cmp"
	"slices"
)

// proc is the engine's state of one process.
type proc struct {
	pid, rank, world int
	maxOps           int

	streams    map[uint64]*stream
	lastStream *stream // cache for launch bursts on one stream
	events     map[uint64]*eventRec
	threads    map[int]*thread
	lastThread *thread // the latest thread(lastTID), nil when evicted
	lastTID    int
	comms      map[uint64]*comm
	commOrder  int
	groupDepth int

	gseq         uint64 // process-wide issue counter
	pending      int
	dropped      uint64
	lastActivity int64
	lastWork     int64

	// execAt is when the probes saw the process start (its fork or
	// exec), 0 when tracing began while it ran: from its start they see
	// every call it makes, and so all its GPU work.
	execAt int64

	hang   *Hang
	still  *still       // from looks at the main thread (Observe); nil before the first
	sample *sampleWaits // from native samples of every thread (ObserveSample); nil before the first
	stops  int          // times every thread was stopped so far: native samples, and captures (Stopped)
	stats  procStats
}

func newProc(pid int, t int64, maxOps int) *proc {
	return &proc{
		pid: pid, rank: -1, maxOps: maxOps,
		streams:      make(map[uint64]*stream),
		events:       make(map[uint64]*eventRec),
		threads:      make(map[int]*thread),
		comms:        make(map[uint64]*comm),
		lastActivity: t,
		lastWork:     t,
	}
}

// stream is one GPU stream: a queue of outstanding ops in issue order.
// Positions count ops and wait markers; every item with a position below
// done is known complete.
type stream struct {
	id       uint64
	q        opQueue
	next     uint64 // position of the next item
	nops     uint64 // ops issued (positions minus wait markers)
	done     uint64
	lastDone int64 // observed completion time of the latest retirement
	last     opRef // the latest op issued, for cudaEventElapsedTime
	deps     []dep
}

// qop is an outstanding op with its place in the stream and the process.
//
// A stream of a launch-bound loop that nothing retires holds
// MaxOpsPerStream of them, so a qop keeps what an Op says in 128 bytes,
// not 216: the names (kind, vendor, collective, type, communicator) are
// made when an Op is asked for (op).
type qop struct {
	kind   opKind
	vendor Vendor
	coll   CollOp
	peer   int32
	dtype  int32
	tid    int32
	stream uint64
	issued int64
	fn     uint64
	kernel string
	grid   [3]uint32
	block  [3]uint32
	bytes  uint64
	count  uint64
	seq    uint64 // a collective's on its communicator
	comm   *comm  // a collective's

	pos, gseq uint64
}

// opKind is an Op's kind in a qop.
type opKind uint8

const (
	opKernel opKind = iota
	opMemcpy
	opGraph
	opCollective
)

var opKinds = [...]OpKind{opKernel: OpKernel, opMemcpy: OpMemcpy, opGraph: OpGraph, opCollective: OpCollective}

// op is the Op q is.
func (q *qop) op() Op {
	o := Op{Kind: opKinds[q.kind], Vendor: q.vendor.String(), Stream: q.stream, TID: int(q.tid), Issued: q.issued,
		Kernel: q.kernel, Func: q.fn, Grid: q.grid, Block: q.block, Bytes: q.bytes}
	if q.kind == opCollective {
		o.Op, o.Dtype, o.Count, o.Peer = q.coll.String(), DtypeName(q.dtype), q.count, q.peer
		o.Comm, o.Seq, o.NRanks = q.comm.id, q.seq, q.comm.nranks
	}
	return o
}

// dep says that items of a stream from position at on wait for stream on
// to reach position onPos (cudaStreamWaitEvent).
type dep struct {
	at, onPos uint64
	on        uint64
}

// eventRec is the last cudaEventRecord of an event handle.
type eventRec struct {
	stream uint64
	pos    uint64
	nops   uint64
	last   opRef
	gen    uint64 // bumped at every record
	ready  bool   // a query or synchronize reported it complete
}

// opRef is what timing statistics need of an op.
type opRef struct {
	valid bool
	coll  bool
	name  string  // kernel name
	key   CollKey // collective key
	bytes uint64
}

func (p *proc) stream(id uint64) *stream {
	if s := p.lastStream; s != nil && s.id == id {
		return s
	}
	s := p.streams[id]
	if s == nil {
		if len(p.streams) >= maxStreams {
			p.pruneStreams()
		}
		s = &stream{id: id}
		p.streams[id] = s
	}
	p.lastStream = s
	return s
}

// pruneStreams forgets idle streams (no outstanding op, no dependency)
// and the events recorded on them.
func (p *proc) pruneStreams() {
	for id, s := range p.streams {
		if s.q.n == 0 && len(s.deps) == 0 {
			delete(p.streams, id)
		}
	}
	for h, r := range p.events {
		if p.streams[r.stream] == nil {
			delete(p.events, h)
		}
	}
	p.lastStream = nil
}

// add queues a new op, zero, for the caller to fill in, dropping the
// oldest op when limit are queued.
func (s *stream) add(limit int) (o *qop, dropped bool) {
	if s.q.n >= limit {
		s.q.drop()
		dropped = true
	}
	return s.q.grow(), dropped
}

// issue enqueues a launch, graph launch, async copy or collective, and
// returns its stream.
func (p *proc) issue(ev *Event) *stream {
	s := p.stream(ev.Stream)
	q := p.enqueue(s, ev.Time)
	q.vendor, q.stream, q.tid, q.issued = ev.Vendor, ev.Stream, int32(ev.TID), ev.Time
	// s.last is filled in place: an opRef built apart and copied in was
	// read in 16-byte moves that waited for the narrower stores that built
	// it, a sixth of the launcher's CPU following launch-bound processes.
	ref := &s.last
	*ref = opRef{}
	switch ev.Kind {
	case KindLaunch:
		q.kind, q.kernel, q.fn, q.grid, q.block = opKernel, ev.Kernel, ev.Func, ev.Grid, ev.Block
		ref.valid, ref.name = true, p.kernelName(ev.Kernel, ev.Func)
	case KindGraphLaunch:
		q.kind, q.fn = opGraph, ev.Handle
	case KindMemcpyAsync:
		q.kind, q.bytes = opMemcpy, ev.Bytes
	case KindCollective:
		c := p.comm(ev.Comm)
		c.issued++
		c.lastOp = ev.Op.String()
		c.last = ev.Time
		q.kind, q.coll, q.dtype, q.count, q.peer = opCollective, ev.Op, ev.Dtype, ev.Count, ev.Peer
		q.bytes = ev.Count * DtypeSize(ev.Dtype)
		q.seq, q.comm = c.issued, c
		ref.valid, ref.coll, ref.bytes = true, true, q.bytes
		ref.key = collKey(c.lastOp, DtypeName(q.dtype), q.bytes, c.nranks)
	}
	return s
}

// entered records that ev's thread entered a call whose return is not
// probed (see callState): it waits for s up to the call's place in it,
// or, when s is nil (ncclGroupEnd), for the whole device.
func (p *proc) entered(ev *Event, s *stream) {
	c := &p.thread(ev.TID).in
	if s != nil && c.state == entered && c.kind == ev.Kind && c.stream == s.id && c.seen == 0 {
		// The same call again, on the same stream (a loop of launches):
		// nothing else of it set (a call of one stream has no targets, a
		// sample's name comes with seen).
		c.since, c.pos, c.op, c.vendor = ev.Time, s.next, ev.Op, ev.Vendor
		return
	}
	if c.name != "" || c.targets != nil || c.event != nil || c.stackCall != "" {
		*c = inCall{} // what another kind of call left (a launch leaves none: the path of every launch)
	}
	c.state, c.kind, c.vendor, c.op, c.since, c.seen, c.copyPos, c.gen = entered, ev.Kind, ev.Vendor, ev.Op, ev.Time, 0, 0, 0
	if s == nil {
		c.stream, c.pos, c.targets = 0, 0, p.snapshot()
		return
	}
	c.stream, c.pos = s.id, s.next
}

// call handles the entry and the return of a call made now and then
// (KindCall): inside it, the thread waits for its stream up to the entry,
// or for the whole device when it names none.
func (p *proc) call(ev *Event) {
	th := p.thread(ev.TID)
	if ev.Phase == PhaseExit {
		th.in.leave()
		th.returned = ev.Time
		return
	}
	th.in = inCall{state: inside, kind: ev.Kind, vendor: ev.Vendor, name: ev.CallName, since: ev.Time, stream: ev.Stream}
	th.returned = ev.Time
	if ev.Stream != 0 {
		th.in.pos = p.stream(ev.Stream).next
		return
	}
	th.in.targets = p.snapshot()
}

// enqueue queues a new op on s at time t and returns it, its place set,
// for the caller to fill in.
func (p *proc) enqueue(s *stream, t int64) *qop {
	o, dropped := s.add(p.maxOps)
	o.pos, o.gseq = s.next, p.gseq
	s.next++
	s.nops++
	p.gseq++
	if dropped {
		p.dropped++
	} else {
		p.pending++
	}
	if t > p.lastWork {
		p.lastWork = t
	}
	return o
}

// retire marks every item of s below pos complete, observed at time t, and
// follows the cudaStreamWaitEvent dependencies that completion implies.
func (p *proc) retire(s *stream, pos uint64, t int64) {
	pos = min(pos, s.next) // a stream forgotten and met again starts afresh
	if pos <= s.done {
		return
	}
	s.done = pos
	base := s.lastDone
	popped := false
	for s.q.n > 0 && s.q.front().pos < pos {
		o := s.q.front() // accounted in place, then dropped: not copied out
		p.pending--
		popped = true
		p.completed(o, t-max(o.issued, base))
		s.q.drop()
	}
	if popped && t > s.lastDone {
		s.lastDone = t
	}
	if len(s.deps) == 0 {
		return
	}
	keep := s.deps[:0]
	var implied []dep
	for _, d := range s.deps {
		if d.at < pos {
			implied = append(implied, d)
		} else {
			keep = append(keep, d)
		}
	}
	s.deps = keep
	for _, d := range implied {
		p.retire(p.stream(d.on), d.onPos, t)
	}
}

// completed accounts for an op known complete after dur nanoseconds
// (observed, an upper bound).
func (p *proc) completed(q *qop, dur int64) {
	switch q.kind {
	case opKernel:
		p.kernelAcc(q.kernel, q.fn).observed.add(dur)
	case opCollective:
		c := q.comm
		if q.seq > c.completed {
			c.completed = q.seq
		}
		cs := p.stats.coll(collKey(q.coll.String(), DtypeName(q.dtype), q.bytes, c.nranks))
		cs.observed.add(dur)
		cs.observedBytes += q.bytes
	}
}

// memcpy handles a synchronous cudaMemcpy: the copy is an op on the legacy
// default stream, and the calling thread waits device-wide until it returns.
func (p *proc) memcpy(ev *Event) {
	th := p.thread(ev.TID)
	if ev.Phase == PhaseEnter {
		s := p.stream(0)
		o := p.enqueue(s, ev.Time)
		o.kind, o.vendor, o.tid, o.issued, o.bytes = opMemcpy, ev.Vendor, int32(ev.TID), ev.Time, ev.Bytes
		s.last = opRef{}
		th.in = inCall{state: inside, kind: KindMemcpy, vendor: ev.Vendor, since: ev.Time, targets: p.snapshot(), copyPos: s.next}
		th.returned = ev.Time
		return
	}
	w := th.in
	th.in.leave()
	th.returned = ev.Time
	if w.state != inside || w.kind != KindMemcpy || ev.Ret != 0 {
		return
	}
	p.retire(p.stream(0), w.copyPos, ev.Time)
}

// snapshot returns every stream's current position, by stream (the
// engine's state does not depend on the order of a map).
func (p *proc) snapshot() []target {
	ts := make([]target, 0, len(p.streams))
	for id, s := range p.streams {
		if s.next > s.done {
			ts = append(ts, target{stream: id, pos: s.next})
		}
	}
	slices.SortFunc(ts, func(a, b target) int { return cmp.Compare(a.stream, b.stream) })
	return ts
}

// record handles cudaEventRecord, and returns the event's stream.
func (p *proc) record(ev *Event) *stream {
	s := p.stream(ev.Stream)
	r := p.events[ev.Handle]
	if r == nil {
		if len(p.events) >= maxEvents {
			p.evictEvents()
		}
		r = &eventRec{}
		p.events[ev.Handle] = r
	}
	*r = eventRec{stream: ev.Stream, pos: s.next, nops: s.nops, last: s.last, gen: r.gen + 1}
	return s
}

// evictEvents forgets recorded events, those already complete first.
func (p *proc) evictEvents() {
	for h, r := range p.events {
		if s := p.streams[r.stream]; s == nil || r.pos <= s.done {
			delete(p.events, h)
		}
	}
	for h := range p.events {
		if len(p.events) < maxEvents*3/4 {
			break
		}
		delete(p.events, h)
	}
}

func (p *proc) eventQuery(ev *Event) {
	r := p.events[ev.Handle]
	switch {
	case ev.Ret == 0:
		if r != nil {
			r.ready = true
			p.retire(p.stream(r.stream), r.pos, ev.Time)
		}
		th := p.thread(ev.TID)
		th.clearPoll(ev.Handle)
		th.returned = ev.Time
	case ev.Ret == RetNotReady && r != nil && !r.ready:
		p.thread(ev.TID).poll(ev.Handle, r.gen, ev.Time, ev.Vendor)
	}
}

func (p *proc) blocking(ev *Event) {
	th := p.thread(ev.TID)
	if ev.Phase == PhaseEnter {
		w := inCall{state: inside, kind: ev.Kind, vendor: ev.Vendor, since: ev.Time, stream: ev.Stream}
		switch ev.Kind {
		case KindStreamSynchronize:
			w.pos = p.stream(ev.Stream).next
		case KindEventSynchronize:
			if r := p.events[ev.Handle]; r != nil {
				w.stream = r.stream
				w.targets = []target{{stream: r.stream, pos: r.pos}}
				w.event, w.gen = r, r.gen
			}
		case KindDeviceSynchronize:
			w.stream = 0
			w.targets = p.snapshot()
		}
		th.in, th.returned = w, ev.Time
		return
	}
	w := th.in
	th.in.leave()
	th.returned = ev.Time
	if w.state != inside && ev.Kind == KindEventSynchronize && ev.Ret == 0 {
		// Entry not seen (tracing began inside the call): the event's
		// latest record is what it waited for.
		if r := p.events[ev.Handle]; r != nil {
			r.ready = true
			p.retire(p.stream(r.stream), r.pos, ev.Time)
		}
		return
	}
	if w.state != inside || w.kind != ev.Kind || ev.Ret != 0 {
		return
	}
	if w.event != nil && w.event.gen == w.gen {
		w.event.ready = true
	}
	for _, t := range w.waitsFor() {
		p.retire(p.stream(t.stream), t.pos, ev.Time)
	}
}

// waitEvent handles cudaStreamWaitEvent, and returns the waiting stream.
func (p *proc) waitEvent(ev *Event) *stream {
	r := p.events[ev.Handle]
	if r == nil || r.stream == ev.Stream {
		return p.stream(ev.Stream)
	}
	src := p.stream(r.stream)
	s := p.stream(ev.Stream)
	if r.pos <= src.done {
		return s
	}
	if len(s.deps) >= maxDeps {
		// The oldest quarter goes at once: dropping one a wait moved the
		// other 1023 at every wait of a stream nothing retires (the
		// testbed's training step, a wait a step).
		s.deps = s.deps[:copy(s.deps, s.deps[maxDeps/4:])]
	}
	s.deps = append(s.deps, dep{at: s.next, on: r.stream, onPos: r.pos})
	s.next++ // the wait is an item of the stream
	return s
}

// elapsed attributes the GPU time the application measured between two
// events to the single op between them, or to the measured-span statistic.
func (p *proc) elapsed(ev *Event) {
	if ev.Ret != 0 || ev.ElapsedMs < 0 {
		return
	}
	ns := int64(float64(ev.ElapsedMs) * 1e6)
	a, b := p.events[ev.Handle], p.events[ev.Handle2]
	if a != nil && b != nil && a.stream == b.stream && b.nops == a.nops+1 && b.last.valid {
		if b.last.coll {
			cs := p.stats.coll(b.last.key)
			cs.exact.add(ns)
			cs.exactBytes += b.last.bytes
		} else {
			p.stats.kernel(b.last.name).exact.add(ns)
		}
		return
	}
	p.stats.spans.add(ns)
}

// oldest is the oldest outstanding op of the process.
func (p *proc) oldest() *qop {
	var best *qop
	for _, s := range p.streams {
		if s.q.n > 0 && (best == nil || s.q.front().gseq < best.gseq) {
			best = s.q.front()
		}
	}
	return best
}

package timer

import "slices"

// view is one process's situation at one instant.
type view struct {
	p       *proc
	waiters []waiting
	// stuck is the oldest op awaited by a waiter past the timeout (nil if
	// none), span all that those waiters await not known complete.
	stuck *qop
	span  span
}

// Check decides at time now which processes newly hang. A process fires
// once; it fires again only after it recovered (see Recovered). Calling
// Check twice at the same time returns nothing the second time.
func (e *Engine) Check(now int64) []Hang {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evaluate(now, true)
}

// Recovered returns the pids whose hang decision cleared (their awaited
// work completed, the host issued work again, or the process exited)
// since the last call.
func (e *Engine) Recovered(now int64) []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evaluate(now, false)
	out := e.recovered
	e.recovered = nil
	return out
}

func (e *Engine) evaluate(now int64, fire bool) []Hang {
	views := make([]view, 0, len(e.procs))
	for _, p := range e.procs {
		v := view{p: p, waiters: p.waiters(now, e.cfg.PollRepeat, e.timeout)}
		var targets []target
		for _, w := range v.waiters {
			if now-w.Since <= e.timeout {
				continue
			}
			if o := p.awaited(w.targets); o != nil && now-o.issued > e.timeout {
				targets = append(targets, w.targets...)
			}
		}
		if targets != nil {
			v.span = p.awaitedSpan(targets)
			v.stuck = v.span.oldest
		}
		views = append(views, v)
	}
	slices.SortFunc(views, func(a, b view) int { return a.p.pid - b.p.pid })

	var out []Hang
	for i := range views {
		v := &views[i]
		p := v.p
		if h := p.hang; h != nil {
			var still bool
			switch {
			case h.StackWait != nil:
				still = v.stuck != nil || p.stackStill(h.StackWait)
			case h.Kind == HangGPU:
				still = v.stuck != nil
			case h.Stall != nil:
				still = p.stillSince() != 0
			default:
				_, still = e.hostStalled(views, v, now)
				still = still && p.lastWork <= h.DetectedAt-h.AgeNs
			}
			if still {
				continue
			}
			p.hang = nil
			e.recovered = append(e.recovered, p.pid)
		}
		if !fire {
			continue
		}
		if v.stuck != nil {
			h := e.decision(p, HangGPU, now)
			op := v.stuck.op()
			h.Oldest = &op
			h.AgeNs = now - op.Issued
			if v.span.coll != nil {
				c := v.span.coll.op()
				h.Collective = &c
			}
			if v.span.n > 1 {
				n := v.span.newest.op()
				h.Newest = &n
			}
			h.Awaited = v.span.n
			for _, w := range v.waiters {
				h.Waiters = append(h.Waiters, w.Waiter)
			}
			p.hang = &h
			out = append(out, h)
			continue
		}
		if w, ok := e.stackHung(views, v, now); ok {
			h := e.decision(p, "gpu", now)
			p.stackDecision(&h, w, now)
			p.hang = &h
			out = append(out, h)
			continue
		}
		if lag, ok := e.hostStalled(views, v, now); ok {
			h := e.decision(p, HangHost, now)
			h.AgeNs = now - p.lastWork
			h.Lagging = lag
			if s := p.still; lag == nil && p.spinning(now, e.timeout) {
				// Part of the evidence: it spins (see hostStalled).
				h.Stall = &Stall{Since: s.since, State: string(s.last.State), Site: s.last.Site, Python: s.last.Python, Spinning: true}
			}
			if o := p.oldest(); o != nil {
				op := o.op()
				h.Oldest = &op
			}
			p.hang = &h
			out = append(out, h)
			continue
		}
		if st, ok := e.stalled(views, v, now); ok {
			kind := HangStalled
			if st.Spinning {
				kind = HangHost
			}
			h := e.decision(p, kind, now)
			h.AgeNs = now - st.Since
			h.Stall = st
			p.hang = &h
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil
	}
	peers := make(map[int][]CommState, len(views))
	for _, v := range views {
		peers[v.p.pid] = v.p.commStates()
	}
	for i := range out {
		e.owed(out[i].Lagging)
		out[i].Peers = peers
	}
	return out
}

// owed sets l.Op, the collective the waiting peer is stuck in, when it
// is the one l awaits (see Lag.Op); e.mu held.
func (e *Engine) owed(l *Lag) {
	if l == nil {
		return
	}
	q := e.procs[l.PeerPID]
	if q == nil || q.hang == nil {
		return
	}
	o := q.hang.Collective
	if o == nil {
		o = q.hang.Oldest
	}
	if o != nil && o.Kind == OpCollective && o.Comm == l.Comm && o.Seq == l.Awaited {
		op := *o
		l.Op = &op
	}
}

func (e *Engine) decision(p *proc, kind HangKind, now int64) Hang {
	return Hang{
		Kind: kind, PID: p.pid, Rank: p.rank, DetectedAt: now, Timeout: e.timeout,
		Comms: p.commStates(), Pending: p.pending,
	}
}

// hostStalled says whether v's process has issued no GPU work for longer
// than the timeout while a peer waits, past the timeout, on a collective
// this process has not issued, or, when no communicator links them, while
// a peer is stuck in a collective and this process has none in flight, or
// is stuck on anything and this process's main thread spins. The Lag
// names the communicator when one links them.
//
// A process with a thread that waits on GPU work not known complete is
// waiting on the GPU, even when that wait began less than the timeout ago
// (a watchdog's first poll of an event comes up to its poll period after
// the record): it is decided gpu once the wait passes the timeout, never
// host before that.
func (e *Engine) hostStalled(views []view, v *view, now int64) (*Lag, bool) {
	p := v.p
	if v.stuck != nil || now-p.lastWork <= e.timeout || (p.gseq == 0 && len(p.comms) == 0) {
		return nil, false // busy on the GPU, recently active, or never a GPU user (a launcher, a data loader)
	}
	if p.waitsOnGPU(v.waiters) || p.stackWaitingAfter(p.lastWork) || e.cfg.Samples && p.mayWaitOnGPU(e.timeout) {
		return nil, false // waiting on it, not yet for the timeout, or maybe (a sample will tell)
	}
	for i := range views {
		q := &views[i]
		if q.p == p || q.stuck == nil {
			continue
		}
		linked := false
		var lag *Lag
		for id, seq := range q.span.colls {
			if isLocal(id) {
				continue
			}
			c := p.commByID(id)
			if c == nil {
				continue
			}
			linked = true
			if c.issued < seq && (lag == nil || id < lag.Comm) {
				lag = &Lag{Comm: id, Issued: c.issued, Awaited: seq, PeerPID: q.p.pid, PeerRank: q.p.rank}
			}
		}
		if lag != nil {
			return lag, true
		}
		if linked {
			continue // linked, and this process is not behind
		}
		if !p.hasGlobalComm() || !q.p.hasGlobalComm() {
			// No sequence numbers to compare. The peer stuck in a
			// collective while this process has none in flight is
			// evidence (it never joined it), and so is a main thread seen
			// spinning. Silence alone is not: a rank whose peer is stuck
			// on a kernel may wait on it where the probes do not see
			// (gloo, a store, a lock).
			if q.span.coll != nil && !p.inCollective() || p.spinning(now, e.timeout) {
				return nil, true
			}
		}
	}
	return nil, false
}

// inCollective says whether p has a collective outstanding: issued and
// not known complete.
func (p *proc) inCollective() bool {
	for _, s := range p.streams {
		for i := 0; i < s.q.n; i++ {
			if s.q.at(i).kind == opCollective {
				return true
			}
		}
	}
	return false
}

// spinning says whether looks saw p's main thread running in the same
// Python frames for longer than timeout.
func (p *proc) spinning(now, timeout int64) bool {
	return p.still != nil && p.still.spinning && p.still.since != 0 && now-p.still.since > timeout
}

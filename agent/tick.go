package agent

import (
	"context"

	"github.com/xpu-timer/xpu-timer/timer"
)

// Tick runs one check: new hangs (reported, dumped with every other rank of
// the job on the node, marker written, optionally killed), recoveries, lost
// events, identities still unsettled, and other nodes' markers. The loop
// calls it every Interval; tests call it with an injected clock.
func (a *Agent) Tick(ctx context.Context) {
	now := a.o.Monotonic()
	a.mu.Lock()
	a.lastTick = now
	a.mu.Unlock()
	a.settle()
	a.lookAll(now)
	a.sampleAll(now)
	a.watchLags(now)

	hangs := a.engine.Check(now)
	a.mu.Lock()
	for _, h := range hangs {
		a.decided[h.PID] = h
	}
	a.mu.Unlock()
	for _, pid := range a.engine.Recovered(now) {
		a.recovered(pid)
	}
	a.checkLost()

	if len(hangs) > 0 {
		for _, h := range hangs {
			id, known := a.identity(h.PID)
			r := hangReport(h, id, known)
			if h.Kind == timer.HangHost && h.Lagging != nil && h.Lagging.Op != nil {
				// The collective the waiting peer is stuck in: the op this
				// rank owes.
				o := h.Lagging.Op
				r.Op, r.Dtype, r.Bytes = o.Op, o.Dtype, o.Bytes
			}
			attrs := []any{"pid", h.PID, "rank", r.rank(), "kind", h.Kind, "op", r.Op, "comm", r.Comm, "seq", r.Seq,
				"age", float64(h.AgeNs) / 1e9, "waiters", len(h.Waiters)}
			if len(h.Waiters) > 0 && h.Kind == timer.HangGPU && h.StackWait == nil {
				// the call the waiting thread is in: a synchronize, a
				// launch behind a full queue, a free
				attrs = append(attrs, "call", h.Waiters[0].Call)
			}
			if r.OldestOp != "" && r.OldestOp != r.Op {
				// what holds the awaited op back: a kernel by its name
				// (a Triton kernel's included) where the probes know it
				attrs = append(attrs, "oldest", r.OldestOp)
			}
			if r.NewestOp != "" {
				// the stuck op is one of the awaited ones, from the
				// oldest to this one: earlier ones may have completed
				// unobserved
				attrs = append(attrs, "newest", r.NewestOp, "awaited", r.Awaited)
			}
			if s := h.Stall; s != nil {
				attrs = append(attrs, "state", s.State, "spinning", s.Spinning, "syscall", s.Site, "python", s.Python)
			}
			if w := h.StackWait; w != nil {
				attrs = append(attrs, "tid", w.TID, "wait", h.Waiters[0].Call, "state", w.State, "python", w.Python)
				if w.Kernel != "" {
					attrs = append(attrs, "kernel", w.Kernel)
				}
			}
			a.log.Warn("hang", attrs...)
			a.report(r)
		}
		a.kick()
		if a.o.Capturer != nil {
			a.dumpHangs(ctx, hangs)
		}
		return
	}
	if a.o.Capturer != nil {
		a.checkMarkers(ctx)
	}
}

// recovered clears pid's episode state once its decision cleared.
func (a *Agent) recovered(pid int) {
	id, known := a.identity(pid)
	a.mu.Lock()
	delete(a.episode, pid)
	delete(a.decided, pid)
	a.mu.Unlock()
	a.book.SetDumpStarted(false, pid)
	exited := a.book.Gone(pid)
	a.kick()
	if exited {
		return
	}
	r := Report{Event: EventRecovered, PID: pid}
	if known {
		r.setRank(id)
	}
	a.log.Info("recovered", "pid", pid, "rank", r.rank())
	a.report(r)
}

// checkLost reports probe events lost since the last tick.
func (a *Agent) checkLost() {
	st := a.o.Tracer.Stats()
	a.mu.Lock()
	d := st.Lost - a.lost
	if st.Lost < a.lost {
		d = 0
	}
	a.lost = st.Lost
	a.mu.Unlock()
	if d > 0 {
		a.log.Warn("probe events lost", "lost", d, "total", st.Lost)
		a.report(Report{Event: EventLost, Lost: d, LostTotal: st.Lost})
	}
}

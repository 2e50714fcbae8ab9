package agent

import (
	"context"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
)

// Snapshot is the node's state for the metrics exporter and the pusher.
func (a *Agent) Snapshot() metrics.Snapshot {
	now := a.o.Monotonic()
	st := a.o.Tracer.Stats()
	var s metrics.Snapshot
	for _, p := range a.book.Ranks() {
		r := metrics.Rank{Rank: p.ID.Rank, LocalRank: p.ID.LocalRank, PID: p.PID,
			DumpStarted: p.DumpStarted, DumpSeconds: p.DumpSeconds, Detectors: a.detectors(p.PID)}
		if r.LocalRank < 0 {
			r.LocalRank = p.ID.Rank
		}
		if ps, ok := a.engine.State(p.PID, now); ok {
			r.Hung, r.HangKind = ps.Hung, ps.HangKind
			r.OldestAgeSeconds = float64(ps.OldestAgeNs) / 1e9
			r.PendingOps = ps.Pending
		}
		stats := a.engine.ProcStats(p.PID)
		r.Kernels = metrics.KernelsOf(stats.Kernels)
		r.Collectives = metrics.CollectivesOf(stats.Collectives)
		a.lag.Series(&r, a.engine, p.PID, now)
		if a.o.GPU != nil {
			r.GPU = a.o.GPU.GPU(r.LocalRank)
		}
		s.Ranks = append(s.Ranks, r)
	}
	a.mu.Lock()
	s.Dumps, s.DumpFailures = a.dumps, a.failures+a.writeErrs
	a.mu.Unlock()
	s.ProbeEvents, s.LostEvents, s.Wakeups, s.Coalesced = st.Events, st.Lost, st.Wakeups, st.Coalesced
	s.AttachedProcesses, s.ProbesAttached = st.Processes, st.Probes
	s.Holds, s.HeldSeconds = st.Holds, st.Held.Seconds()
	if x, ok := a.o.GPU.(interface {
		Xids(time.Time) []dumpfile.Xid
	}); ok {
		s.Xids = x.Xids(a.o.Now())
	}
	return s
}

// kick asks the push loop to sync now.
func (a *Agent) kick() {
	select {
	case a.pushCh <- struct{}{}:
	default:
	}
}

// pushLoop syncs the Pushgateway on every kick and every push interval
// (never on the check loop's goroutine: a slow gateway must not delay
// detection). On exit it deletes the groups it pushed.
func (a *Agent) pushLoop(ctx context.Context) {
	if a.o.Pusher == nil {
		return
	}
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := a.o.Pusher.Close(cctx); err != nil {
				a.log.Warn("pushgateway cleanup", "err", err)
			}
			cancel()
			return
		case <-a.pushCh:
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := a.o.Pusher.Sync(cctx, a.o.Now(), a.Snapshot()); err != nil {
			a.log.Warn("pushgateway", "err", err)
		}
		cancel()
	}
}

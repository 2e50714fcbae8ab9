package dump

import (
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Decision is the engine's decision h as the dump file records it (nil for
// nil). The format owns its wire types so that its readers stand without
// the engine; every member is carried over (TestDecisionCarriesAll).
func Decision(h *timer.Hang) *dumpfile.Hang {
	if h == nil {
		return nil
	}
	d := &dumpfile.Hang{
		Kind: dumpfile.HangKind(h.Kind), PID: h.PID, Rank: h.Rank, DetectedAt: h.DetectedAt, Timeout: h.Timeout,
		Oldest: op(h.Oldest), AgeNs: h.AgeNs, Comms: Comms(h.Comms), Pending: h.Pending,
		Collective: op(h.Collective), Newest: op(h.Newest), Awaited: h.Awaited,
	}
	if h.Waiters != nil {
		d.Waiters = make([]dumpfile.Waiter, len(h.Waiters))
		for i, w := range h.Waiters {
			d.Waiters[i] = dumpfile.Waiter(w)
		}
	}
	if l := h.Lagging; l != nil {
		// (its Op, the collective the peer is stuck in, is the engine's
		// alone: not in dumps)
		d.Lagging = &dumpfile.Lag{Comm: l.Comm, Issued: l.Issued, Awaited: l.Awaited, PeerPID: l.PeerPID, PeerRank: l.PeerRank}
	}
	// Conversions, not copies: a member added to one side alone stops the
	// build.
	if s := h.Stall; s != nil {
		d.Stall = new(dumpfile.Stall(*s))
	}
	if w := h.StackWait; w != nil {
		d.StackWait = new(dumpfile.StackWait(*w))
	}
	return d
}

// Comms is the engine's view of a process's communicators as the dump file
// records it (nil for nil).
func Comms(cs []timer.CommState) []dumpfile.CommState {
	if cs == nil {
		return nil
	}
	out := make([]dumpfile.CommState, len(cs))
	for i, c := range cs {
		out[i] = dumpfile.CommState(c)
	}
	return out
}

func op(o *timer.Op) *dumpfile.Op {
	if o == nil {
		return nil
	}
	return &dumpfile.Op{Kind: dumpfile.OpKind(o.Kind), Vendor: o.Vendor, Stream: o.Stream, TID: o.TID, Issued: o.Issued,
		Kernel: o.Kernel, Func: o.Func, Grid: o.Grid, Block: o.Block, Bytes: o.Bytes,
		Op: o.Op, Dtype: o.Dtype, Count: o.Count, Peer: o.Peer, Comm: o.Comm, Seq: o.Seq, NRanks: o.NRanks}
}

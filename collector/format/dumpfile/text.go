package dumpfile

import (
	"fmt"
	"strings"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

// Text renders f for a person, in the spirit of gdb's `thread apply all bt`
// followed by py-spy's dump: a header, the hang decision, the communicators,
// then every thread's merged (or native) and Python frames, innermost first.
func Text(f *File) string {
	var b strings.Builder
	fmt.Fprintf(&b, "xpu-timer stack dump: rank %d of %d (local %d of %d), host %s, pid %d\n",
		f.Rank, f.WorldSize, f.LocalRank, f.LocalWorldSize, f.Host, f.PID)
	if len(f.Cmdline) > 0 {
		fmt.Fprintf(&b, "command: %s\n", strings.Join(f.Cmdline, " "))
	}
	fmt.Fprintf(&b, "state: %s  reason: %s  dumped at: %s  took: %s  stopped for: %s\n",
		f.State, f.Reason, f.DumpedAt.UTC().Format(time.RFC3339Nano), f.DumpDuration, f.StoppedFor)
	if h := f.Hang; h != nil {
		fmt.Fprintf(&b, "hang: %s, for %s (timeout %s), %d ops pending\n",
			h.Kind, time.Duration(h.AgeNs), time.Duration(h.Timeout), h.Pending)
		writeOp(&b, "oldest", h.Oldest)
		if h.Newest != nil {
			fmt.Fprintf(&b, "  %d awaited ops not known complete: the stuck one is among them, from the oldest to\n", h.Awaited)
			writeOp(&b, "newest", h.Newest)
		}
		for _, w := range h.Waiters {
			fmt.Fprintf(&b, "  waiter: thread %d in %s (stream %#x)\n", w.TID, w.Call, w.Stream)
		}
	}
	for _, c := range f.Comms {
		fmt.Fprintf(&b, "comm %s: rank %d of %d, issued %d, completed %d, last %s\n",
			c.ID, c.Rank, c.NRanks, c.Issued, c.Completed, c.LastOp)
	}
	if g := f.GPU; g != nil {
		fmt.Fprintf(&b, "gpu %d %s %s: %d%% busy, memory %d of %d bytes\n",
			g.Index, g.Name, g.UUID, g.Utilization, g.MemoryUsed, g.MemoryTotal)
		for _, x := range g.Xids {
			fmt.Fprintf(&b, "  xid %d at %s\n", x.Xid, x.Time.UTC().Format(time.RFC3339))
		}
	}
	for _, e := range f.Errors {
		fmt.Fprintf(&b, "error: %s\n", e)
	}
	for _, t := range f.Threads {
		fmt.Fprintf(&b, "\nThread %d (%s) state %s", t.TID, t.Name, t.State)
		if t.GIL {
			b.WriteString(" [holds GIL]")
		}
		b.WriteString(":\n")
		if t.Error != "" {
			fmt.Fprintf(&b, "  (%s)\n", t.Error)
		}
		frames := t.Merged
		if len(frames) == 0 {
			frames = t.Native
		}
		writeFrames(&b, frames)
		if len(t.Python) > 0 {
			b.WriteString("  Python:\n")
			writeFrames(&b, t.Python)
		}
	}
	return b.String()
}

// writeOp writes one op of a decision on a line of its own, labelled.
func writeOp(b *strings.Builder, label string, op *Op) {
	switch {
	case op == nil:
	case op.Kind == OpCollective:
		fmt.Fprintf(b, "  %s: %s #%d on comm %s (%d %s, %d ranks) on stream %#x, thread %d\n",
			label, op.Op, op.Seq, op.Comm, op.Count, op.Dtype, op.NRanks, op.Stream, op.TID)
	case op.Kernel != "":
		fmt.Fprintf(b, "  %s: %s %s on stream %#x, thread %d\n", label, op.Kind, op.Kernel, op.Stream, op.TID)
	case op.Func != 0: // a kernel whose name no lookup we saw gave: its handle
		fmt.Fprintf(b, "  %s: %s %#x on stream %#x, thread %d\n", label, op.Kind, op.Func, op.Stream, op.TID)
	default:
		fmt.Fprintf(b, "  %s: %s on stream %#x, thread %d\n", label, op.Kind, op.Stream, op.TID)
	}
}

func writeFrames(b *strings.Builder, frames []stack.Frame) {
	for i, fr := range frames {
		fmt.Fprintf(b, "  #%-3d ", i)
		if fr.Addr != 0 {
			fmt.Fprintf(b, "%#016x in ", fr.Addr)
		}
		name := fr.Func
		if name == "" {
			name = "??"
		}
		b.WriteString(name)
		if fr.File != "" {
			fmt.Fprintf(b, " at %s", fr.File)
			if fr.Line > 0 {
				fmt.Fprintf(b, ":%d", fr.Line)
			}
		}
		if fr.Module != "" && fr.Module != "python" {
			fmt.Fprintf(b, " from %s", fr.Module)
		}
		b.WriteByte('\n')
	}
}

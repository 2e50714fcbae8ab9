package agent

import (
	"time"

	"github.com/xpu-timer/xpu-timer/ranks/identity"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Event names what a Report tells (its "event" field).
type Event string

// Report events. The tracer's notices are reported under their own kinds.
const (
	EventRank       Event = "rank" // a rank was identified
	EventAttach           = Event(ebpf.NoticeAttach)
	EventMissing          = Event(ebpf.NoticeMissing) // symbols a library lacks
	EventExec             = Event(ebpf.NoticeExec)
	EventExit             = Event(ebpf.NoticeExit)
	EventError            = Event(ebpf.NoticeError)
	EventHang       Event = "hang"
	EventRecovered  Event = "recovered"
	EventLost       Event = "lost" // probe events dropped
	EventDump       Event = "dump" // a rank's stacks were written
	EventDumpFailed Event = "dump_failed"
	EventMarker     Event = "marker" // another node's hang marker was seen
	EventKill       Event = "kill"
	EventLagging    Event = "lagging"   // peers wait for the rank in a collective it has not issued (package lagwarn)
	EventCaughtUp   Event = "caught_up" // a lagging rank issued the collective
)

// Report is one notable event of the loop, as `xpu-timer watch` prints it.
type Report struct {
	Event     Event     `json:"event"`
	Time      time.Time `json:"time"`
	PID       int       `json:"pid,omitempty"`
	Rank      *int      `json:"rank,omitempty"`
	LocalRank *int      `json:"local_rank,omitempty"`
	WorldSize int       `json:"world_size,omitempty"`
	Identity  string    `json:"identity,omitempty"` // "rank": where the rank came from

	Library  string   `json:"library,omitempty"`
	Attached []string `json:"attached,omitempty"`
	Missing  []string `json:"missing,omitempty"`
	Error    string   `json:"error,omitempty"`

	// "hang": the decision's fields, flattened for grep and jq.
	Kind       timer.HangKind    `json:"kind,omitempty"`
	Op         string            `json:"op,omitempty"` // what the waiters are blocked behind: collective op, else kernel name, "memcpy", "graph"
	OpKind     timer.OpKind      `json:"op_kind,omitempty"`
	Kernel     string            `json:"kernel,omitempty"`
	Dtype      string            `json:"dtype,omitempty"`
	Bytes      uint64            `json:"bytes,omitempty"`
	Comm       string            `json:"comm,omitempty"`
	Seq        uint64            `json:"seq,omitempty"`
	Stream     uint64            `json:"stream,omitempty"`
	AgeSeconds float64           `json:"age_s,omitempty"`
	Timeout    float64           `json:"timeout_s,omitempty"`
	Waiters    []timer.Waiter    `json:"waiters,omitempty"`
	Comms      []timer.CommState `json:"comms,omitempty"`
	Lagging    *timer.Lag        `json:"lagging,omitempty"`
	Stall      *timer.Stall      `json:"stall,omitempty"`      // "stalled", or "host" decided on looks: where and since when the main thread stopped progressing
	StackWait  *timer.StackWait  `json:"stack_wait,omitempty"` // "gpu" decided on native stacks: the thread, its wait and since when
	Site       string            `json:"site,omitempty"`       // dump: where the main thread is (innermost Python frame, innermost native frame outside the C runtimes)
	Pending    int               `json:"pending,omitempty"`
	OldestOp   string            `json:"oldest_op,omitempty"` // the oldest op not known complete (a kernel for a collective hang, usually)
	Oldest     *timer.Op         `json:"oldest,omitempty"`
	Collective *timer.Op         `json:"collective,omitempty"` // the oldest awaited collective
	NewestOp   string            `json:"newest_op,omitempty"`  // the newest awaited op not known complete, when several are: the stuck op is one from OldestOp to it
	Newest     *timer.Op         `json:"newest,omitempty"`
	Awaited    int               `json:"awaited,omitempty"` // awaited ops not known complete

	// "lagging": who waits and what the rank does (op, comm, seq and
	// age_s above: the collective its peers wait in, and for how long).
	Laggard  *timer.Laggard `json:"laggard,omitempty"`
	Activity string         `json:"activity,omitempty"`
	Detail   string         `json:"detail,omitempty"`

	// "lost".
	Lost      uint64 `json:"lost,omitempty"`
	LostTotal uint64 `json:"lost_total,omitempty"`

	// "dump", "marker".
	Path    string          `json:"path,omitempty"`
	Reason  dumpfile.Reason `json:"reason,omitempty"`
	Seconds float64         `json:"seconds,omitempty"`
	From    string          `json:"from,omitempty"` // marker: host of the agent that wrote it

	ExitCode *int `json:"exit_code,omitempty"` // watch: the started command's status
}

func (r *Report) setRank(id identity.Identity) {
	if id.Rank >= 0 {
		rank := id.Rank
		r.Rank = &rank
	}
	if id.LocalRank >= 0 {
		lr := id.LocalRank
		r.LocalRank = &lr
	}
	if id.World > 0 {
		r.WorldSize = id.World
	}
}

// hangReport flattens a decision. Op, comm, seq and dtype name the op the
// waiters are blocked behind: the oldest awaited collective when there is
// one (kernels queued before it usually finished unobserved), else the
// oldest op not known complete, which OldestOp always names. For a host
// stall they name the collective the rank owes its waiting peers.
func hangReport(h timer.Hang, id identity.Identity, known bool) Report {
	r := Report{Event: EventHang, PID: h.PID, Kind: h.Kind, AgeSeconds: float64(h.AgeNs) / 1e9,
		Timeout: float64(h.Timeout) / 1e9, Waiters: h.Waiters, Comms: h.Comms, Lagging: h.Lagging,
		Pending: h.Pending, Oldest: h.Oldest, Collective: h.Collective, Stall: h.Stall, StackWait: h.StackWait,
		Newest: h.Newest, Awaited: h.Awaited}
	if known {
		r.setRank(id)
	} else if h.Rank >= 0 {
		rank := h.Rank
		r.Rank = &rank
	}
	if o := h.Oldest; o != nil {
		r.OldestOp = opName(o)
		if o.Kind == timer.OpKernel {
			r.Kernel = o.Kernel
		}
	}
	if w := h.StackWait; w != nil && r.Kernel == "" {
		r.Kernel = w.Kernel // no probe saw the op: the launch's stub frame names it
	}
	if o := h.Newest; o != nil {
		r.NewestOp = opName(o)
	}
	if h.Kind == timer.HangHost {
		// Nothing of this rank's is awaited: its peers await the
		// collective it has not issued, the one after its last on the
		// communicator they wait on (the caller may name it better, from
		// a peer's decision).
		if h.Lagging != nil {
			r.OpKind, r.Comm, r.Seq = timer.OpCollective, h.Lagging.Comm, h.Lagging.Awaited
			for _, c := range h.Comms {
				if c.ID == h.Lagging.Comm {
					r.Op = c.LastOp
				}
			}
		}
		return r
	}
	if o := awaited(h); o != nil {
		r.OpKind, r.Stream, r.Bytes = o.Kind, o.Stream, o.Bytes
		r.Op = opName(o)
		if o.Kind == timer.OpCollective {
			r.Dtype, r.Comm, r.Seq = o.Dtype, o.Comm, o.Seq
		}
	}
	return r
}

// awaited is the op a decision's waiters are blocked behind: the oldest
// awaited collective, else the oldest op not known complete.
func awaited(h timer.Hang) *timer.Op {
	if h.Collective != nil {
		return h.Collective
	}
	return h.Oldest
}

// opName names an op for people: the collective ("AllReduce"), the
// kernel's name, or the kind ("memcpy", "graph").
func opName(o *timer.Op) string {
	switch {
	case o.Kind == timer.OpCollective && o.Op != "":
		return o.Op
	case o.Kind == timer.OpKernel && o.Kernel != "":
		return o.Kernel
	}
	return string(o.Kind)
}

// rank is the rank for a log line: the number, or "unknown".
func (r Report) rank() any {
	if r.Rank == nil {
		return "unknown"
	}
	return *r.Rank
}

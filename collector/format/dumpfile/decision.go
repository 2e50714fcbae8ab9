package dumpfile

// The decision records a dump carries (File.Hang, File.Comms, Marker.Kinds).
// They are this format's own wire types, spelled member for member as the
// engine's (package timer) decision serialises, so that the format and its
// readers (the timeline, the viewer) stand without the engine; the capture
// layer converts a decision into them (collector/capture/dump.Decision).

// HangKind says what a hung process is stuck on (Hang.Kind).
type HangKind string

// Hang kinds, as the JSON, the metrics' kind label and the reports spell
// them.
const (
	HangGPU     HangKind = "gpu"     // a thread waits on GPU work outstanding past the timeout
	HangHost    HangKind = "host"    // no GPU call past the timeout while peers wait, or spinning in place while they are stuck
	HangStalled HangKind = "stalled" // the main thread waits in one place past the timeout while no peer progresses
)

// OpKind is the kind of a unit of GPU work (Op.Kind).
type OpKind string

// Op kinds.
const (
	OpKernel     OpKind = "kernel"
	OpMemcpy     OpKind = "memcpy"
	OpGraph      OpKind = "graph"
	OpCollective OpKind = "collective"
)

// Hang is a rank's own hang decision. Durations are nanoseconds, times
// monotonic nanoseconds of the node that decided.
type Hang struct {
	Kind       HangKind `json:"kind"`
	PID        int      `json:"pid"`
	Rank       int      `json:"rank"`           // -1 if unknown
	DetectedAt int64    `json:"detected_at_ns"` // monotonic ns
	Timeout    int64    `json:"timeout_ns"`

	Oldest  *Op         `json:"oldest,omitempty"`  // oldest outstanding op the waiters depend on ("gpu")
	AgeNs   int64       `json:"age_ns"`            // how long Oldest has been outstanding, or how long the host has been silent ("host")
	Waiters []Waiter    `json:"waiters,omitempty"` // threads blocked on or polling GPU work
	Comms   []CommState `json:"comms,omitempty"`
	Pending int         `json:"pending"` // outstanding ops across all streams

	Collective *Op `json:"collective,omitempty"` // "gpu": the oldest awaited collective not known complete
	Newest     *Op `json:"newest,omitempty"`     // "gpu": the last issued awaited op not known complete, when Awaited > 1
	Awaited    int `json:"awaited,omitempty"`    // "gpu": awaited ops not known complete

	Lagging   *Lag       `json:"lagging,omitempty"`    // "host": the communicator on which peers wait for this process
	Stall     *Stall     `json:"stall,omitempty"`      // decisions made on looks at the main thread
	StackWait *StackWait `json:"stack_wait,omitempty"` // "gpu" decisions made on native stacks
}

// Lag says how far a host-stalled process trails a waiting peer on one
// communicator.
type Lag struct {
	Comm     string `json:"comm"`
	Issued   uint64 `json:"issued"`    // last sequence number this process issued
	Awaited  uint64 `json:"awaited"`   // sequence number the peer waits on
	PeerPID  int    `json:"peer_pid"`  // the waiting peer (one of them)
	PeerRank int    `json:"peer_rank"` // -1 if unknown
}

// Op is one unit of GPU work: a kernel, a copy, a graph or a collective.
type Op struct {
	Kind   OpKind    `json:"kind"`
	Vendor string    `json:"vendor"`
	Stream uint64    `json:"stream"`
	TID    int       `json:"tid"`       // thread that enqueued it
	Issued int64     `json:"issued_ns"` // monotonic ns of the enqueue
	Kernel string    `json:"kernel,omitempty"`
	Func   uint64    `json:"func,omitempty"`
	Grid   [3]uint32 `json:"grid,omitempty"`
	Block  [3]uint32 `json:"block,omitempty"`
	Bytes  uint64    `json:"bytes,omitempty"` // copy bytes, or collective per-rank buffer bytes

	Op     string `json:"op,omitempty"` // AllReduce, ...
	Dtype  string `json:"dtype,omitempty"`
	Count  uint64 `json:"count,omitempty"`
	Peer   int32  `json:"peer,omitempty"`
	Comm   string `json:"comm,omitempty"` // communicator id
	Seq    uint64 `json:"seq,omitempty"`  // 1-based sequence number of this collective on its communicator
	NRanks int32  `json:"nranks,omitempty"`
}

// Waiter is a thread blocked in, or repeatedly polling, a GPU completion call.
type Waiter struct {
	TID    int    `json:"tid"`
	Call   string `json:"call"`   // e.g. "cuStreamSynchronize", "cuEventQuery (polling)"
	Stream uint64 `json:"stream"` // stream waited on (0 for device-wide)
	Since  int64  `json:"since_ns"`
}

// CommState is what one rank knows of one communicator.
type CommState struct {
	ID        string `json:"id"`
	Rank      int32  `json:"rank"`
	NRanks    int32  `json:"nranks"`
	Issued    uint64 `json:"issued"`    // sequence number of the last collective issued
	Completed uint64 `json:"completed"` // sequence number of the last collective known complete
	LastOp    string `json:"last_op,omitempty"`
}

// Stall is where and since when a main thread waits or spins in place.
type Stall struct {
	Since    int64  `json:"since_ns"`         // monotonic ns the main thread was last seen to progress
	State    string `json:"state"`            // scheduler state letter of the main thread
	Site     string `json:"site,omitempty"`   // where it waits
	Python   string `json:"python,omitempty"` // its Python frames
	Spinning bool   `json:"spinning"`         // it runs, in the same Python frames
}

// StackWait is a thread seen in the same GPU wait by stack samples longer
// than the timeout apart.
type StackWait struct {
	TID     int    `json:"tid"`
	Call    string `json:"call"`              // "" when no frame names it
	Library string `json:"library,omitempty"` // the GPU library it is in, when no frame names the call
	From    string `json:"from,omitempty"`
	Kernel  string `json:"kernel,omitempty"` // the kernel the launch it waits in is for (its stub frame), when it is a launch
	Python  string `json:"python,omitempty"`
	State   string `json:"state"`    // scheduler state letter at the latest sample
	Since   int64  `json:"since_ns"` // monotonic ns of the first sample that saw the wait
	Seen    int64  `json:"seen_ns"`  // monotonic ns of the latest sample that saw it
}

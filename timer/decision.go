package timer

// HangKind says what a hung process is stuck on (Hang.Kind); the rules
// that decide each are in doc.go.
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

// Hang is the engine's decision that a process is stuck, and on what.
// Durations are nanoseconds so the struct serialises without loss.
type Hang struct {
	Kind       HangKind `json:"kind"` // HangGPU "gpu": a thread waits on GPU work outstanding past the timeout (or, by its native stack, has waited in one GPU wait past the timeout); "host": no CUDA/NCCL call for longer than the timeout while peers wait, or spinning in the same Python frames while peers are stuck; "stalled": the main thread has waited at one place longer than the timeout while no peer progresses
	PID        int      `json:"pid"`
	Rank       int      `json:"rank"`           // -1 if unknown
	DetectedAt int64    `json:"detected_at_ns"` // monotonic ns
	Timeout    int64    `json:"timeout_ns"`

	Oldest  *Op         `json:"oldest,omitempty"`  // oldest outstanding op the waiters depend on ("gpu")
	AgeNs   int64       `json:"age_ns"`            // how long Oldest has been outstanding, or how long the host has been silent ("host")
	Waiters []Waiter    `json:"waiters,omitempty"` // threads blocked on or polling GPU work
	Comms   []CommState `json:"comms,omitempty"`
	// Peers are the communicators' states of every process the engine
	// held at the check that decided this (this one's included), shared
	// by the decisions of that check: the dumps of its peers. Not in
	// dumps.
	Peers   map[int][]CommState `json:"-"`
	Pending int                 `json:"pending"` // outstanding ops across all streams

	// Collective is, for "gpu", the oldest collective among the awaited
	// work not known complete. Kernels queued before a collective usually
	// completed without the application observing it, so when Oldest is
	// such a kernel this is the op most likely stuck, waiting for peers.
	Collective *Op `json:"collective,omitempty"`

	// Newest is, for "gpu", the last issued of the awaited ops not known
	// complete, when there are several (Awaited > 1). Without the GPU's
	// own account of which kernel runs, the stuck op is one of the
	// Awaited ops from Oldest to Newest: Oldest unless it completed
	// unobserved (a fill before a Triton kernel that spins, say, with no
	// synchronisation between them), and often Newest, where the waiter
	// synchronises right after the launch that never ends.
	Newest  *Op `json:"newest,omitempty"`
	Awaited int `json:"awaited,omitempty"` // awaited ops not known complete ("gpu")

	// Lagging is set for "host": the communicator on which peers wait for
	// a collective this process has not issued.
	Lagging *Lag `json:"lagging,omitempty"`

	// Stall is set for decisions made on looks at the main thread
	// ("stalled", and "host" when it spins, the only evidence of a "host"
	// decision without Lagging): where and since when.
	Stall *Stall `json:"stall,omitempty"`

	// StackWait is set for "gpu" decisions made on native stacks: the
	// thread, the wait and since when (Waiters then holds that thread).
	StackWait *StackWait `json:"stack_wait,omitempty"`
}

// Lag says how far a host-stalled process trails a waiting peer on one
// communicator.
type Lag struct {
	Comm     string `json:"comm"`
	Issued   uint64 `json:"issued"`    // last sequence number this process issued
	Awaited  uint64 `json:"awaited"`   // sequence number the peer waits on
	PeerPID  int    `json:"peer_pid"`  // the waiting peer (one of them)
	PeerRank int    `json:"peer_rank"` // -1 if unknown
	// Op is the collective the peer is stuck in, when that is the
	// awaited one (Comm, Awaited) and the peer was decided "gpu" in the
	// same check or before: the op this process owes. Not in dumps.
	Op *Op `json:"-"`
}

// Op is one unit of GPU work: a kernel, a copy, a graph or a collective.
type Op struct {
	Kind   OpKind    `json:"kind"` // OpKernel, OpMemcpy, OpGraph, OpCollective
	Vendor string    `json:"vendor"`
	Stream uint64    `json:"stream"`
	TID    int       `json:"tid"`       // thread that enqueued it
	Issued int64     `json:"issued_ns"` // monotonic ns of the enqueue
	Kernel string    `json:"kernel,omitempty"`
	Func   uint64    `json:"func,omitempty"`
	Grid   [3]uint32 `json:"grid,omitempty"`
	Block  [3]uint32 `json:"block,omitempty"`
	Bytes  uint64    `json:"bytes,omitempty"` // copy bytes, or collective per-rank buffer bytes (count × dtype size)

	Op     string `json:"op,omitempty"` // AllReduce, ...
	Dtype  string `json:"dtype,omitempty"`
	Count  uint64 `json:"count,omitempty"`
	Peer   int32  `json:"peer,omitempty"`
	Comm   string `json:"comm,omitempty"` // communicator id: hex of the unique id's first 16 bytes, or "local:<handle>" when its init was not seen
	Seq    uint64 `json:"seq,omitempty"`  // 1-based sequence number of this collective on its communicator
	NRanks int32  `json:"nranks,omitempty"`
}

// Waiter is a thread blocked in, or repeatedly polling, a GPU completion call.
type Waiter struct {
	TID    int    `json:"tid"`
	Call   string `json:"call"`   // e.g. "cuStreamSynchronize", "cuEventQuery (polling)" (Kind.Call)
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

package timer

// The package documentation is in doc.go.

// Kind says which API call an Event records.
type Kind uint8

// Event kinds. Blocking calls (synchronizes, synchronous copies) and the
// calls made now and then (KindCall) produce an Enter and an Exit event;
// the asynchronous calls of every step produce one event at entry, and
// calls whose result matters (queries, a communicator's creation) produce
// one event at return.
const (
	KindUnknown           Kind = iota
	KindLaunch                 // cuLaunchKernel, cuLaunchKernelEx, cooperative and host-function launches (MACA: mcLaunchKernel...)
	KindGraphLaunch            // cuGraphLaunch
	KindMemcpyAsync            // cuMemcpyAsync, cuMemcpy*Async_v2
	KindMemcpy                 // cuMemcpy, cuMemcpy*_v2: synchronous, Enter/Exit
	KindEventRecord            // cuEventRecord(event, stream)
	KindEventQuery             // cuEventQuery(event) at return, Ret holds the result
	KindEventSynchronize       // cuEventSynchronize(event), Enter/Exit
	KindStreamSynchronize      // cuStreamSynchronize(stream), Enter/Exit
	KindStreamQuery            // cuStreamQuery(stream) at return, Ret holds the result
	KindStreamWaitEvent        // cuStreamWaitEvent(stream, event)
	KindDeviceSynchronize      // cuCtxSynchronize (cudaDeviceSynchronize's), Enter/Exit
	KindEventElapsed           // cuEventElapsedTime(ms*, start, end) at return
	KindCommInit               // ncclCommInitRank / InitRankConfig / CommSplit at return
	KindCommDestroy            // ncclCommDestroy / ncclCommAbort
	KindCollective             // every NCCL collective and point-to-point call
	KindGroupStart             // ncclGroupStart
	KindGroupEnd               // ncclGroupEnd
	KindProcessExec            // a traced process started or exec'd
	KindProcessExit            // a traced process exited: release its state
	// KindCall is any other call a thread may block in, made now and then
	// (an allocation or free, a memset, host registration, a stream,
	// event, graph, module or context destroy or unload, a module load,
	// NCCL's finalize): Enter/Exit, Event.CallName names it. The engine knows
	// only that the thread is inside it, waiting on the whole device.
	KindCall
	kindCount
)

var kindNames = [...]string{
	KindUnknown:           "unknown",
	KindLaunch:            "launch",
	KindGraphLaunch:       "graph_launch",
	KindMemcpyAsync:       "memcpy_async",
	KindMemcpy:            "memcpy",
	KindEventRecord:       "event_record",
	KindEventQuery:        "event_query",
	KindEventSynchronize:  "event_synchronize",
	KindStreamSynchronize: "stream_synchronize",
	KindStreamQuery:       "stream_query",
	KindStreamWaitEvent:   "stream_wait_event",
	KindDeviceSynchronize: "device_synchronize",
	KindEventElapsed:      "event_elapsed",
	KindCommInit:          "comm_init",
	KindCommDestroy:       "comm_destroy",
	KindCollective:        "collective",
	KindGroupStart:        "group_start",
	KindGroupEnd:          "group_end",
	KindProcessExec:       "process_exec",
	KindProcessExit:       "process_exit",
	KindCall:              "call",
}

func (k Kind) String() string {
	if k < kindCount {
		return kindNames[k]
	}
	return "unknown"
}

// callNames are the API calls each kind records, as the probes see them:
// CUDA's in its driver (every runtime call is made through the driver's,
// where it is probed: cudaDeviceSynchronize is seen as cuCtxSynchronize),
// MACA's in its runtime (mc + the name), collectives in NCCL (MCCL for
// MACA: mccl + the name).
var callNames = [kindCount]struct{ cuda, maca string }{
	KindLaunch:            {"cuLaunchKernel", "LaunchKernel"},
	KindGraphLaunch:       {"cuGraphLaunch", "GraphLaunch"},
	KindMemcpyAsync:       {"cuMemcpyAsync", "MemcpyAsync"},
	KindMemcpy:            {"cuMemcpy", "Memcpy"},
	KindEventRecord:       {"cuEventRecord", "EventRecord"},
	KindEventQuery:        {"cuEventQuery", "EventQuery"},
	KindEventSynchronize:  {"cuEventSynchronize", "EventSynchronize"},
	KindStreamSynchronize: {"cuStreamSynchronize", "StreamSynchronize"},
	KindStreamQuery:       {"cuStreamQuery", "StreamQuery"},
	KindStreamWaitEvent:   {"cuStreamWaitEvent", "StreamWaitEvent"},
	KindDeviceSynchronize: {"cuCtxSynchronize", "DeviceSynchronize"},
	KindEventElapsed:      {"cuEventElapsedTime", "EventElapsedTime"},
	KindCommInit:          {"ncclCommInitRank", "CommInitRank"},
	KindCommDestroy:       {"ncclCommDestroy", "CommDestroy"},
	KindGroupStart:        {"ncclGroupStart", "GroupStart"},
	KindGroupEnd:          {"ncclGroupEnd", "GroupEnd"},
}

// Call is the API call an event of kind k records, in v's spelling
// (cuStreamSynchronize, mcStreamSynchronize); a collective's names its op
// (Event.Call), a kind of no call is its String.
func (k Kind) Call(v Vendor) string {
	if k >= kindCount || callNames[k].cuda == "" {
		return k.String()
	}
	if v != VendorMACA {
		return callNames[k].cuda
	}
	if k >= KindCommInit {
		return "mccl" + callNames[k].maca
	}
	return "mc" + callNames[k].maca
}

// Phase distinguishes the entry and the return of a blocking call.
type Phase uint8

const (
	PhaseEnter Phase = iota // at function entry (the only phase of asynchronous calls)
	PhaseExit               // at function return; Ret is valid
)

// Vendor names the API family an event came from.
type Vendor uint8

const (
	VendorCUDA Vendor = iota // cuda*/cu*/nccl*
	VendorMACA               // mc*/mccl*
)

func (v Vendor) String() string {
	if v == VendorMACA {
		return "maca"
	}
	return "cuda"
}

// CollOp is an NCCL collective or point-to-point operation.
type CollOp uint8

const (
	OpAllReduce CollOp = iota
	OpAllGather
	OpReduceScatter
	OpBroadcast
	OpReduce
	OpSend
	OpRecv
	collOpCount
)

var collOpNames = [...]string{"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "Send", "Recv"}

func (o CollOp) String() string {
	if o < collOpCount {
		return collOpNames[o]
	}
	return "Unknown"
}

// Event is one decoded API call of one thread. Fields not meaningful for
// the Kind are zero.
type Event struct {
	Time     int64 // CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns)
	PID      int   // thread group id
	TID      int   // thread id
	Kind     Kind
	Phase    Phase
	Vendor   Vendor
	Ret      int32  // return value (PhaseExit, and queries)
	Parent   int    // KindProcessExec of a new process: the process that forked it (0 for an exec)
	CallName string // KindCall: the function, e.g. "cuMemFree_v2" (Call)

	Stream  uint64 // stream handle (0 is the legacy default stream)
	Handle  uint64 // cudaEvent_t for event calls; graph exec for graph launches; start event for KindEventElapsed
	Handle2 uint64 // end event for KindEventElapsed

	// Kernel launches.
	Func   uint64    // host stub address of the kernel
	Kernel string    // demangled kernel name, resolved by the capture layer ("" if unknown)
	Grid   [3]uint32 // gridDim
	Block  [3]uint32 // blockDim
	Shmem  uint64    // dynamic shared memory bytes

	// Copies.
	Bytes    uint64
	CopyKind int32 // cudaMemcpyKind

	// Collectives.
	Op    CollOp
	Count uint64 // element count as passed (per-rank shard for AllGather/ReduceScatter)
	Dtype int32  // ncclDataType_t
	RedOp int32  // ncclRedOp_t
	Peer  int32  // root (Broadcast, Reduce) or peer (Send, Recv); -1 otherwise
	Comm  uint64 // ncclComm_t handle (process-local)

	// Communicator creation (KindCommInit).
	CommID [16]byte // 16-byte hash of the whole 128-byte ncclUniqueId (or of the parent and colour for a split): names the communicator across processes
	NRanks int32
	Rank   int32

	// KindEventElapsed: the milliseconds the application was handed.
	ElapsedMs float32
}

// DtypeSize is the size in bytes of an ncclDataType_t, 0 if unknown.
func DtypeSize(dtype int32) uint64 {
	switch dtype {
	case 0, 1, 10, 11: // int8, uint8, fp8 e4m3, fp8 e5m2
		return 1
	case 6, 9: // float16, bfloat16
		return 2
	case 2, 3, 7: // int32, uint32, float32
		return 4
	case 4, 5, 8: // int64, uint64, float64
		return 8
	}
	return 0
}

var dtypeNames = [...]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"}

// DtypeName is the name of an ncclDataType_t.
func DtypeName(dtype int32) string {
	if dtype >= 0 && int(dtype) < len(dtypeNames) {
		return dtypeNames[dtype]
	}
	return "unknown"
}

// Call is the API call e records, in its vendor's spelling (Kind.Call),
// a collective by its op (ncclAllReduce, mcclSend), a call made now and
// then by its name (CallName).
func (e *Event) Call() string {
	if e.Kind == KindCall {
		return e.CallName
	}
	if e.Kind != KindCollective {
		return e.Kind.Call(e.Vendor)
	}
	if e.Vendor == VendorMACA {
		return "mccl" + e.Op.String()
	}
	return "nccl" + e.Op.String()
}

package gpuwait

// Role is what a stack says of a thread that waits on the GPU.
type Role uint8

const (
	// Call: the thread is inside a call into the GPU libraries (see
	// Classify): a synchronize or a polled query, a copy, a launch
	// waiting for a slot of its stream or for its kernel, a free, NCCL's
	// calls. On a real GPU it spins inside (CUDA's default schedule) or
	// sleeps (cudaDeviceScheduleBlockingSync). A thread caught in one
	// sample after sample (the same caller, the same Python frames) with
	// no call between, as the probes see, waits there.
	Call Role = iota + 1
	// Work: a framework routine that waits for GPU work, through GPU
	// calls or its own poll-and-sleep loop: the thread waits whatever it
	// is seen doing inside.
	Work
	// Site: a framework routine that waits for GPU work through GPU calls
	// among other things (a gloo collective on CUDA tensors: wait for the
	// stream, then the network): it names the wait when a GPU call lies
	// inside it, and is no wait alone.
	Site
)

func (r Role) String() string {
	switch r {
	case Call:
		return "call"
	case Work:
		return "work"
	case Site:
		return "site"
	}
	return "unknown"
}

// entry is one row of the table: the CUDA name and its MACA twin, ""
// where one vendor has none.
type entry struct {
	cuda, maca string
	role       Role
}

// table is every framework routine by which a stack is known to wait on
// the GPU (the GPU libraries' own calls need no row: Classify knows them
// by their files and names). The names are the symbols as the unwinder
// names them: C++ functions demangled without their parameters.
var table = []entry{
	// PyTorch c10d: work waits.
	{"c10d::ProcessGroupNCCL::WorkNCCL::wait", "", Work},
	{"c10d::ProcessGroupNCCL::WorkNCCL::synchronize", "", Work},
	{"c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal", "", Work},
	// PyTorch c10d over gloo with CUDA tensors: the work waits for its
	// streams, then runs the collective on the host.
	{"c10d::AsyncAllreduceCUDAHostWork::run", "", Site},
	{"c10d::AsyncAllreduceCUDADeviceWork::run", "", Site},
	{"c10d::AsyncBroadcastCUDAWork::run", "", Site},
	{"c10d::AsyncAllgatherCUDAWork::run", "", Site},
	{"c10d::AsyncReduceCUDAWork::run", "", Site},
	{"c10d::AsyncSparseAllreduceCUDAWork::run", "", Site},
	{"c10d::AsyncGatherCUDAWork::run", "", Site},
	{"c10d::AsyncScatterCUDAWork::run", "", Site},
}

// gpuLibraries are the files of the GPU runtimes, drivers and collective
// libraries, by the start of their base name: a frame in one is the GPU
// libraries' own, named or not.
var gpuLibraries = []string{"libcuda.", "libcudart", "libnccl", "libmcruntime", "libmcdriver", "libmccl"}

// macaLibraries are MetaX's among them.
var macaLibraries = []string{"libmcruntime", "libmcdriver", "libmccl"}

// systemLibraries are the C and C++ runtimes: their frames are where every
// wait ends (futex, poll, nanosleep), never what it is for.
var systemLibraries = []string{"libc.so", "libc-", "libpthread", "ld-linux", "libstdc++", "libgcc_s", "[vdso]", "[uprobes]"}

// byName indexes the table: function name to role and vendor.
var byName = func() map[string]match {
	m := make(map[string]match, 2*len(table))
	for _, e := range table {
		if e.cuda != "" {
			m[e.cuda] = match{e.role, "cuda"}
		}
		if e.maca != "" {
			m[e.maca] = match{e.role, "maca"}
		}
	}
	return m
}()

type match struct {
	role   Role
	vendor string
}

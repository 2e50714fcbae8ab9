package gpuwait

// Role is what a frame of the wait table says of a thread whose stack
// passes through it.
type Role uint8

const (
	// Block: a call that returns only once GPU work completed (a
	// synchronize, a synchronous copy) or peers joined (NCCL's blocking
	// calls). On a real GPU the thread spins inside it (CUDA's default
	// schedule) or sleeps (cudaDeviceScheduleBlockingSync).
	Block Role = iota + 1
	// Poll: a query that returns at once. A thread caught in one sample
	// after sample (the same caller, the same Python frames) polls in a
	// loop.
	Poll
	// Work: a framework routine that waits for GPU work, through the
	// calls above or its own poll-and-sleep loop: the thread waits
	// whatever it is seen doing inside.
	Work
	// Site: a framework routine that waits for GPU work through the calls
	// above among other things (a gloo collective on CUDA tensors: wait
	// for the stream, then the network): it names the wait when a Block or
	// Poll frame lies inside it, and is no wait alone.
	Site
)

func (r Role) String() string {
	switch r {
	case Block:
		return "block"
	case Poll:
		return "poll"
	case Work:
		return "work"
	case Site:
		return "site"
	}
	return "unknown"
}

// entry is one row of the wait table: the CUDA name and its MACA twin
// (MetaX's runtime and MCCL rename cuda* to mc* and nccl* to mccl*), ""
// where one vendor has none.
type entry struct {
	cuda, maca string
	role       Role
}

// table is every frame by which a stack is known to wait on the GPU. The
// names are the symbols as the unwinder names them: C functions, and C++
// functions demangled without their parameters. Versioned driver
// entry points (_v2) and per-thread default stream variants (_ptsz,
// _ptds) are rows of their own: a stack shows the symbol the library
// exports. The real stacks of testdata/ (an H100, CUDA 13, driver 580,
// PyTorch 2.11) name cuCtxSynchronize_v2 under cudaDeviceSynchronize and
// cuStreamSynchronize under cudaStreamSynchronize, the driver's own
// frames below them unnamed.
var table = []entry{
	// Runtime: synchronize and synchronous copies.
	{"cudaDeviceSynchronize", "mcDeviceSynchronize", Block},
	{"cudaThreadSynchronize", "mcThreadSynchronize", Block},
	{"cudaStreamSynchronize", "mcStreamSynchronize", Block},
	{"cudaStreamSynchronize_ptsz", "mcStreamSynchronize_ptsz", Block},
	{"cudaEventSynchronize", "mcEventSynchronize", Block},
	{"cudaMemcpy", "mcMemcpy", Block},
	{"cudaMemcpy_ptds", "mcMemcpy_ptds", Block},
	// Runtime: queries.
	{"cudaStreamQuery", "mcStreamQuery", Poll},
	{"cudaStreamQuery_ptsz", "mcStreamQuery_ptsz", Poll},
	{"cudaEventQuery", "mcEventQuery", Poll},
	// Driver (MetaX ships no public driver API by these names).
	{"cuCtxSynchronize", "", Block},
	{"cuCtxSynchronize_v2", "", Block},
	{"cuStreamSynchronize", "", Block},
	{"cuStreamSynchronize_ptsz", "", Block},
	{"cuEventSynchronize", "", Block},
	{"cuMemcpyDtoH", "", Block},
	{"cuMemcpyDtoH_v2", "", Block},
	{"cuMemcpyDtoH_v2_ptds", "", Block},
	{"cuMemcpy", "", Block},
	{"cuMemcpy_ptds", "", Block},
	{"cuStreamQuery", "", Poll},
	{"cuStreamQuery_ptsz", "", Poll},
	{"cuEventQuery", "", Poll},
	// NCCL's blocking calls: they return once every rank joined.
	{"ncclCommInitRank", "mcclCommInitRank", Block},
	{"ncclCommInitRankConfig", "mcclCommInitRankConfig", Block},
	{"ncclCommInitAll", "mcclCommInitAll", Block},
	{"ncclCommSplit", "mcclCommSplit", Block},
	{"ncclCommFinalize", "mcclCommFinalize", Block},
	{"ncclCommDestroy", "mcclCommDestroy", Block},
	{"ncclGroupEnd", "mcclGroupEnd", Block},
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
// libraries, by the start of their base name: their own frames between a
// wait and its caller (unnamed driver internals, the runtime calling the
// driver) never name the caller.
var gpuLibraries = []string{"libcuda.", "libcudart", "libnccl", "libmcruntime", "libmcdriver", "libmccl"}

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

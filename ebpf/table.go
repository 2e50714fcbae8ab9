package ebpf

import (
	"slices"
	"strings"

	"github.com/xpu-timer/xpu-timer/timer"
)

// A probe is one symbol of one vendor library and the programs attached to
// it: entry (a uprobe) and exit (a uretprobe), either may be empty.
type probe struct {
	Symbol   string
	Group    string // "runtime", "driver" or "collective": missing symbols are reported per group
	Entry    string // program names in probes.bpf.c
	Exit     string
	Vendor   timer.Vendor
	Arg      uint8 // cookie bits 8-15: collective op, or the kind of a call_exit
	Copy     uint8 // cookie bits 16-23: the copy kind a driver copy's name says
	CallID   uint8 // cookie bits 16-23 of a call made now and then (callNames), in Copy's place
	Driver   bool  // cookie bit 24: a driver call (its copy kind is in the cookie)
	Twin     bool  // a per-thread-stream twin (_ptsz, _ptds): absent in many builds, never reported missing
	Optional bool  // a call of newer releases only (cuLibraryGetKernel, CUDA 12): never reported missing
	Part     part  // what the probe serves: the parts a user may turn off (Options)
}

// part is what a probe serves.
type part uint8

const (
	partCore      part = iota // launches, synchronizes, synchronous copies, collectives, the loader: always probed
	partCopyEvent             // asynchronous copies, event records and queries, stream waits and queries, elapsed times (Options.NoCopyEventProbes)
	partName                  // the lookups that name kernels once each: cuModuleGetFunction, cuLibraryGetKernel (Options.NoKernelNames)
	partLookup                // cuKernelGetFunction, made before launches: probed on demand (lookups.go), and not at all without kernel names
)

// Cookie is the attach cookie the programs read with bpf_get_attach_cookie
// (probes.bpf.c's header comment).
func (p probe) Cookie() uint64 {
	c := uint64(p.Vendor) | uint64(p.Arg)<<8 | uint64(p.Copy|p.CallID)<<16
	if p.Driver {
		c |= 1 << 24
	}
	return c
}

type call struct {
	name        string // without the vendor prefix
	entry, exit string
	arg         uint8
	copy        uint8    // a driver copy's kind (cudaMemcpyKind: 1 HtoD, 2 DtoH, 3 DtoD, 4 default)
	twins       []string // suffixes of per-thread-default-stream variants
	optional    bool     // absent from older releases: never reported missing
	part        part
	stream      bool // a call made now and then whose first argument is a stream
}

// nowAndThen makes a call made now and then (not at every step): one a
// thread may block in that is no wait of its own. Its entry and return
// are probed (a return probe costs nothing a step there); the engine
// knows only that the thread is inside it (timer.KindCall), waiting on
// the whole device, or on its stream when it takes one.
func nowAndThen(name string, c call) call {
	c.name, c.entry, c.exit, c.arg = name, "call_enter", "call_exit", uint8(timer.KindCall)
	return c
}

// Copy kinds of the driver's copies, by name (cudaMemcpyKind's values).
const (
	copyHtoD    = 1
	copyDtoH    = 2
	copyDtoD    = 3
	copyDefault = 4
)

// runtimeCalls are the runtime's calls, probed only for a runtime whose
// driver we do not probe (MACA's, which has its driver linked in):
// NVIDIA's runtime makes every call through the driver's entry points,
// probed there (driverCalls), and one call must be one trap (probes.bpf.c,
// "One trap per call").
var runtimeCalls = []call{
	{name: "LaunchKernel", entry: "launch_kernel", twins: []string{"_ptsz"}},
	{name: "LaunchKernelExC", entry: "launch_kernel_exc", twins: []string{"_ptsz"}},
	{name: "LaunchCooperativeKernel", entry: "launch_kernel", twins: []string{"_ptsz"}, optional: true},
	{name: "LaunchHostFunc", entry: "launch_host_func", twins: []string{"_ptsz"}, optional: true},
	{name: "GraphLaunch", entry: "graph_launch", twins: []string{"_ptsz"}},
	{name: "MemcpyAsync", entry: "memcpy_async", twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "Memcpy", entry: "memcpy_enter", exit: "call_exit", arg: uint8(timer.KindMemcpy), twins: []string{"_ptds"}},
	{name: "EventRecord", entry: "event_record", twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "EventQuery", entry: "event_query_enter", exit: "call_exit", arg: uint8(timer.KindEventQuery), part: partCopyEvent},
	{name: "EventSynchronize", entry: "event_sync_enter", exit: "call_exit", arg: uint8(timer.KindEventSynchronize)},
	{name: "StreamSynchronize", entry: "stream_sync_enter", exit: "call_exit", arg: uint8(timer.KindStreamSynchronize), twins: []string{"_ptsz"}},
	{name: "StreamQuery", entry: "stream_query_enter", exit: "call_exit", arg: uint8(timer.KindStreamQuery), twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "StreamWaitEvent", entry: "stream_wait_event", twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "DeviceSynchronize", entry: "device_sync_enter", exit: "call_exit", arg: uint8(timer.KindDeviceSynchronize)},
	{name: "EventElapsedTime", entry: "elapsed_enter", exit: "call_exit", arg: uint8(timer.KindEventElapsed), part: partCopyEvent},
}

// driverCalls are the CUDA driver's calls: every call of a CUDA process,
// the runtime's (which it makes through these), Triton's, XLA's, NCCL's,
// cuBLAS's. Optional: the calls older drivers lack (cuLaunchKernelEx 11.8,
// the library API 12.0, cuEventElapsedTime_v2 12.8, cuCtxSynchronize_v2
// 13.0) and those newer ones may drop (cuEventElapsedTime).
var driverCalls = []call{
	{name: "LaunchKernel", entry: "cu_launch_kernel", twins: []string{"_ptsz"}},
	{name: "LaunchKernelEx", entry: "cu_launch_kernel_ex", twins: []string{"_ptsz"}, optional: true},
	{name: "LaunchCooperativeKernel", entry: "cu_launch_kernel", twins: []string{"_ptsz"}},
	{name: "LaunchHostFunc", entry: "launch_host_func", twins: []string{"_ptsz"}},
	{name: "GraphLaunch", entry: "graph_launch", twins: []string{"_ptsz"}},
	{name: "MemcpyAsync", entry: "cu_memcpy_async", copy: copyDefault, twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "MemcpyHtoDAsync_v2", entry: "cu_memcpy_async", copy: copyHtoD, twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "MemcpyDtoHAsync_v2", entry: "cu_memcpy_async", copy: copyDtoH, twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "MemcpyDtoDAsync_v2", entry: "cu_memcpy_async", copy: copyDtoD, twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "Memcpy", entry: "memcpy_enter", exit: "call_exit", arg: uint8(timer.KindMemcpy), copy: copyDefault, twins: []string{"_ptds"}},
	{name: "MemcpyHtoD_v2", entry: "memcpy_enter", exit: "call_exit", arg: uint8(timer.KindMemcpy), copy: copyHtoD, twins: []string{"_ptds"}},
	{name: "MemcpyDtoH_v2", entry: "memcpy_enter", exit: "call_exit", arg: uint8(timer.KindMemcpy), copy: copyDtoH, twins: []string{"_ptds"}},
	{name: "MemcpyDtoD_v2", entry: "memcpy_enter", exit: "call_exit", arg: uint8(timer.KindMemcpy), copy: copyDtoD, twins: []string{"_ptds"}},
	{name: "EventRecord", entry: "event_record", twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "EventRecordWithFlags", entry: "event_record", twins: []string{"_ptsz"}, optional: true, part: partCopyEvent},
	{name: "EventQuery", entry: "event_query_enter", exit: "call_exit", arg: uint8(timer.KindEventQuery), part: partCopyEvent},
	{name: "EventSynchronize", entry: "event_sync_enter", exit: "call_exit", arg: uint8(timer.KindEventSynchronize)},
	{name: "StreamSynchronize", entry: "stream_sync_enter", exit: "call_exit", arg: uint8(timer.KindStreamSynchronize), twins: []string{"_ptsz"}},
	{name: "StreamQuery", entry: "stream_query_enter", exit: "call_exit", arg: uint8(timer.KindStreamQuery), twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "StreamWaitEvent", entry: "stream_wait_event", twins: []string{"_ptsz"}, part: partCopyEvent},
	{name: "CtxSynchronize", entry: "device_sync_enter", exit: "call_exit", arg: uint8(timer.KindDeviceSynchronize)},
	{name: "CtxSynchronize_v2", entry: "device_sync_enter", exit: "call_exit", arg: uint8(timer.KindDeviceSynchronize), optional: true},
	{name: "EventElapsedTime", entry: "elapsed_enter", exit: "call_exit", arg: uint8(timer.KindEventElapsed), optional: true, part: partCopyEvent},
	{name: "EventElapsedTime_v2", entry: "elapsed_enter", exit: "call_exit", arg: uint8(timer.KindEventElapsed), optional: true, part: partCopyEvent},
	// Not launches: they tell which name an opaque function handle stands for.
	{name: "ModuleGetFunction", entry: "get_function_enter", exit: "get_function_exit", part: partName},
	{name: "LibraryGetKernel", entry: "get_function_enter", exit: "get_function_exit", optional: true, part: partName},
	{name: "KernelGetFunction", entry: "kernel_get_function_enter", exit: "kernel_get_function_exit", optional: true, part: partLookup},
	// Made now and then: allocations and frees (CUDA documents that they
	// synchronize the device: torch.cuda.empty_cache() frees its cached
	// blocks with cuMemFree_v2), synchronous memsets, host registration,
	// destroys and unloads, module loads (which compile PTX), and context
	// teardown.
	nowAndThen("MemAlloc_v2", call{}),
	nowAndThen("MemAllocHost_v2", call{}),
	nowAndThen("MemHostAlloc", call{}),
	nowAndThen("MemAllocManaged", call{optional: true}),
	nowAndThen("MemAllocPitch_v2", call{optional: true}),
	nowAndThen("MemFree_v2", call{}),
	nowAndThen("MemFreeHost", call{}),
	nowAndThen("MemHostRegister_v2", call{}),
	nowAndThen("MemHostUnregister", call{}),
	nowAndThen("MemsetD8_v2", call{twins: []string{"_ptds"}}),
	nowAndThen("MemsetD16_v2", call{twins: []string{"_ptds"}, optional: true}),
	nowAndThen("MemsetD32_v2", call{twins: []string{"_ptds"}}),
	nowAndThen("StreamDestroy_v2", call{stream: true}),
	nowAndThen("EventDestroy_v2", call{}),
	nowAndThen("GraphDestroy", call{}),
	nowAndThen("GraphExecDestroy", call{}),
	nowAndThen("GraphInstantiateWithFlags", call{optional: true}),
	nowAndThen("ModuleLoad", call{}),
	nowAndThen("ModuleLoadData", call{}),
	nowAndThen("ModuleLoadDataEx", call{}),
	nowAndThen("ModuleLoadFatBinary", call{optional: true}),
	nowAndThen("ModuleUnload", call{}),
	nowAndThen("LibraryLoadData", call{optional: true}),
	nowAndThen("LibraryLoadFromFile", call{optional: true}),
	nowAndThen("LibraryUnload", call{optional: true}),
	nowAndThen("CtxDestroy_v2", call{}),
	nowAndThen("DevicePrimaryCtxRelease_v2", call{}),
	nowAndThen("DevicePrimaryCtxReset_v2", call{}),
}

// macaNowAndThen are the MACA runtime's calls made now and then (MACA has
// no driver we probe: its runtime's are). CUDA's runtime makes the same
// through the driver's (driverCalls), probed there alone.
var macaNowAndThen = []call{
	nowAndThen("Malloc", call{}),
	nowAndThen("MallocHost", call{}),
	nowAndThen("HostAlloc", call{optional: true}),
	nowAndThen("Free", call{}),
	nowAndThen("FreeHost", call{}),
	nowAndThen("HostRegister", call{optional: true}),
	nowAndThen("HostUnregister", call{optional: true}),
	nowAndThen("Memset", call{}),
	nowAndThen("StreamDestroy", call{stream: true}),
	nowAndThen("EventDestroy", call{}),
	nowAndThen("GraphDestroy", call{optional: true}),
	nowAndThen("GraphExecDestroy", call{optional: true}),
	nowAndThen("DeviceReset", call{optional: true}),
}

var collectiveCalls = []call{
	{name: "CommInitRank", entry: "comm_init_enter", exit: "comm_init_exit"},
	{name: "CommInitRankConfig", entry: "comm_init_enter", exit: "comm_init_exit"},
	{name: "CommSplit", entry: "comm_split_enter", exit: "comm_split_exit"},
	{name: "CommDestroy", entry: "comm_destroy"},
	{name: "CommAbort", entry: "comm_destroy"},
	{name: "AllReduce", entry: "coll_reduce_op", arg: uint8(timer.OpAllReduce)},
	{name: "ReduceScatter", entry: "coll_reduce_op", arg: uint8(timer.OpReduceScatter)},
	{name: "AllGather", entry: "coll_all_gather", arg: uint8(timer.OpAllGather)},
	{name: "Broadcast", entry: "coll_broadcast", arg: uint8(timer.OpBroadcast)},
	{name: "Reduce", entry: "coll_reduce", arg: uint8(timer.OpReduce)},
	{name: "Send", entry: "coll_p2p", arg: uint8(timer.OpSend)},
	{name: "Recv", entry: "coll_p2p", arg: uint8(timer.OpRecv)},
	{name: "GroupStart", entry: "group_start"},
	{name: "GroupEnd", entry: "group_end"},
	nowAndThen("CommFinalize", call{optional: true}), // NCCL 2.14+
}

// probes is every symbol we know, CUDA and MACA; callNames the calls made
// now and then among them, by id (a K_CALL record's op, its probe's
// CallID).
var probes, callNames = buildProbes()

// callName is a call made now and then: its function, and whether its
// first argument is a stream.
type callName struct {
	symbol string
	stream bool
}

// maxCallIDs bounds callNames: an id is a byte.
const maxCallIDs = 256

// probeBySymbol indexes probes by symbol name.
var probeBySymbol = func() map[string]probe {
	m := make(map[string]probe, len(probes))
	for _, p := range probes {
		m[p.Symbol] = p
	}
	return m
}()

func buildProbes() ([]probe, []callName) {
	var out []probe
	var names []callName
	add := func(prefix, group string, v timer.Vendor, calls []call) {
		for _, c := range calls {
			p := probe{Symbol: prefix + c.name, Group: group, Entry: c.entry, Exit: c.exit, Vendor: v, Arg: c.arg,
				Copy: c.copy, Driver: group == "driver", Optional: c.optional, Part: c.part}
			symbols := []string{p.Symbol}
			for _, s := range c.twins {
				symbols = append(symbols, p.Symbol+s)
			}
			for i, sym := range symbols {
				q := p
				q.Symbol, q.Twin = sym, i > 0
				if c.entry == "call_enter" {
					q.CallID = uint8(len(names)) // maxCallIDs: TestCallNames
					names = append(names, callName{symbol: sym, stream: c.stream})
				}
				out = append(out, q)
			}
		}
	}
	add("cu", "driver", timer.VendorCUDA, driverCalls)
	add("nccl", "collective", timer.VendorCUDA, collectiveCalls)
	add("mc", "runtime", timer.VendorMACA, runtimeCalls)
	add("mc", "runtime", timer.VendorMACA, macaNowAndThen)
	add("mccl", "collective", timer.VendorMACA, collectiveCalls)
	return append(out, loaderProbe), names
}

// loaderProbe is on the dynamic loader (ld.so): it reports each change of
// a process's loaded libraries, so that a CUDA or NCCL library loaded late
// (PyTorch dlopens them at import) is probed at once.
var loaderProbe = probe{Symbol: "_dl_debug_state", Group: "loader", Entry: "dl_state"}

// rDebugSymbol is the loader's debugger interface (struct r_debug), whose
// r_state says whether a call of _dl_debug_state begins a change of the
// loaded objects or ends it. A library's scan (probeSymbolsOf) keeps its
// place, as if a file offset, under this name; the loader probe's cookie
// is its distance from _dl_debug_state (loaderCookie).
const rDebugSymbol = "_r_debug"

// cookieOf is the cookie p is attached with in a library whose scan is
// syms.
func cookieOf(p probe, syms map[string]uint64) uint64 {
	if p.Entry == loaderProbe.Entry {
		return loaderCookie(syms)
	}
	return p.Cookie()
}

// loaderCookie is what dl_state adds to its address to find r_debug (in
// the same object, so the same load bias applies): the distance from
// _dl_debug_state to _r_debug, or 0 where the loader has no _r_debug
// (musl): then every call holds the process.
func loaderCookie(syms map[string]uint64) uint64 {
	r, ok := syms[rDebugSymbol]
	if !ok {
		return 0
	}
	return r - syms[loaderProbe.Symbol]
}

// loaderNames are the file-name prefixes of dynamic loaders.
var loaderNames = []string{"ld-linux", "ld64.so", "ld-2."}

// The file-name prefixes of the vendor libraries we look for without
// reading their symbols: the GPU runtimes and drivers, the collective
// libraries, and both (libraryNames).
var (
	gpuNames        = []string{"libcudart", "libcuda.", "libmcruntime", "libmcdriver"}
	collectiveNames = []string{"libnccl", "libmccl"}
	libraryNames    = slices.Concat(gpuNames, collectiveNames)
)

// boringLibraries are mapped libraries never worth a symbol scan.
var boringLibraries = []string{
	"libc.so", "libc-", "ld-linux", "libm.so", "libpthread", "libdl.so", "librt.so",
	"libstdc++", "libgcc_s", "libpython", "libz.so", "libutil", "libffi", "libcrypto",
	"libssl", "libexpat", "liblzma", "libbz2", "libuuid", "libselinux", "libsystemd",
}

// knownName reports whether a mapped file's name marks a vendor library.
func knownName(path string) bool {
	return hasPrefix(path, libraryNames)
}

// attachRank orders a process's mapped libraries for attaching: the GPU
// runtimes and drivers (0), then the collective libraries (1), then the
// rest (2): a symbol scan of a large unknown library (libtorch) must not
// delay the probes of the CUDA runtime loaded beside it, and the
// collectives an op issues come after what completes them (issuers).
func attachRank(path string) int {
	switch {
	case hasPrefix(path, gpuNames):
		return 0
	case hasPrefix(path, collectiveNames):
		return 1
	}
	return 2
}

// issuers are the entry programs that issue the GPU work the engine then
// awaits: launches, asynchronous copies, event records, stream waits,
// collectives. A running process's library goes live under the probes
// one program after another (the kernel installs each symbol's breakpoint
// in turn, in every process mapping the file), so these are attached
// last (issuersLast), and the collective libraries after the GPU ones
// (attachRank): every op seen issued is then followed by the
// synchronizes, queries and synchronous copies that complete it. An op
// seen issued while those were not yet live stayed awaited until its
// stream's next synchronize, and a hang within that step named a kernel
// long done as the oldest it waits on.
var issuers = map[string]bool{
	"launch_kernel": true, "launch_kernel_exc": true, "cu_launch_kernel": true, "cu_launch_kernel_ex": true,
	"launch_host_func": true, "graph_launch": true, "memcpy_async": true, "cu_memcpy_async": true,
	"event_record": true, "stream_wait_event": true,
	"coll_reduce_op": true, "coll_all_gather": true, "coll_broadcast": true, "coll_reduce": true, "coll_p2p": true,
	"group_start": true, "group_end": true,
}

// issuersLast orders entry programs for attaching: the others first,
// then the issuers, each by name.
func issuersLast(a, b string) int {
	switch {
	case issuers[a] == issuers[b]:
		return strings.Compare(a, b)
	case issuers[a]:
		return 1
	}
	return -1
}

// boring reports whether a mapped file is a system library we never scan.
func boring(path string) bool {
	return hasPrefix(path, boringLibraries)
}

// loader reports whether a mapped file is a dynamic loader.
func loader(path string) bool {
	return hasPrefix(path, loaderNames)
}

// hasPrefix reports whether path's base name starts with one of prefixes.
func hasPrefix(path string, prefixes []string) bool {
	base := path[strings.LastIndexByte(path, '/')+1:]
	for _, p := range prefixes {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
}

// wants says whether p is probed under o: the parts a user turned off
// are not.
func (o *Options) wants(p probe) bool {
	switch p.Part {
	case partCopyEvent:
		return !o.NoCopyEventProbes
	case partName, partLookup:
		return !o.NoKernelNames
	}
	return true
}

// plan picks, from the symbols a library exports, the probes to attach
// under o, and the symbols it lacks among the groups it serves (twins
// excepted).
func plan(exported map[string]uint64, o *Options) (attach []probe, missing []string) {
	groups := map[string]bool{}
	for _, p := range probes {
		if _, ok := exported[p.Symbol]; ok {
			groups[p.Group+"/"+p.Vendor.String()] = true
		}
	}
	for _, p := range probes {
		_, ok := exported[p.Symbol]
		switch {
		case !o.wants(p):
		case ok:
			attach = append(attach, p)
		case !p.Twin && !p.Optional && groups[p.Group+"/"+p.Vendor.String()]:
			missing = append(missing, p.Symbol)
		}
	}
	return attach, missing
}

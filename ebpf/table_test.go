package ebpf

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/timer"
)

func TestPlanReportsMissingPerGroup(t *testing.T) {
	exported := map[string]uint64{"cuMemcpyAsync": 0x100, "cuEventQuery": 0x200, "ncclAllReduce": 0x300, "cudaLaunchKernel": 0x400,
		"cudaStreamSynchronize": 0x500, "mcEventQuery": 0x600}
	attach, missing := plan(exported, &Options{})
	var names []string
	for _, p := range attach {
		names = append(names, p.Symbol)
	}
	slices.Sort(names)
	// NVIDIA's runtime is probed in the driver it calls: nothing of it here.
	if !slices.Equal(names, []string{"cuEventQuery", "cuMemcpyAsync", "mcEventQuery", "ncclAllReduce"}) {
		t.Errorf("attach %v", names)
	}
	for _, m := range []string{"cuStreamSynchronize", "ncclCommInitRank", "mcStreamSynchronize"} {
		if !slices.Contains(missing, m) {
			t.Errorf("%s not reported missing: %v", m, missing)
		}
	}
	for _, m := range missing {
		if p := probeBySymbol[m]; p.Twin || p.Optional {
			t.Errorf("%s reported missing", m)
		}
	}
}

func TestProbeCookies(t *testing.T) {
	p := probeBySymbol["mcclReduceScatter"]
	if p.Vendor != timer.VendorMACA || p.Cookie() != uint64(timer.VendorMACA)|uint64(timer.OpReduceScatter)<<8 {
		t.Errorf("mcclReduceScatter: %+v cookie %#x", p, p.Cookie())
	}
	if q := probeBySymbol["cuEventQuery"]; q.Exit != "call_exit" || q.Arg != uint8(timer.KindEventQuery) {
		t.Errorf("cuEventQuery: %+v", q)
	}
	for _, n := range []string{"cuMemcpy_ptds", "cuLaunchKernel", "cuLaunchKernelEx_ptsz", "cuCtxSynchronize_v2",
		"cuEventElapsedTime", "cuEventElapsedTime_v2", "cuKernelGetFunction", "ncclCommSplit", "mcLaunchKernel",
		"mcLaunchKernelExC_ptsz", "mcGraphLaunch", "mcMemcpy_ptds"} {
		if _, ok := probeBySymbol[n]; !ok {
			t.Errorf("no probe for %s", n)
		}
	}
	// A CUDA call is probed once: in the driver, which the runtime calls.
	for _, p := range probes {
		if strings.HasPrefix(p.Symbol, "cuda") {
			t.Errorf("%s is probed (%+v): a call through it would trap in the driver too", p.Symbol, p)
		}
	}
	// A driver copy's cookie: its kind, its copy direction, the driver bit.
	if p := probeBySymbol["cuMemcpyDtoH_v2_ptds"]; p.Cookie() != uint64(timer.KindMemcpy)<<8|2<<16|1<<24 || p.Exit != "call_exit" {
		t.Errorf("cuMemcpyDtoH_v2_ptds: %+v cookie %#x", p, p.Cookie())
	}
	if p := probeBySymbol["mcMemcpy"]; p.Cookie()>>16 != 0 {
		t.Errorf("mcMemcpy: cookie %#x, want no copy kind and no driver bit", p.Cookie())
	}
}

// TestCUDADriverOnly holds the programs that do not read their cookie
// (probes.bpf.c, FOLLOWED_CUDA_DRIVER: the launch programs, which run at
// every launch) to the probes they assume: the CUDA driver's, with no
// argument and no copy kind.
func TestCUDADriverOnly(t *testing.T) {
	want := uint64(timer.VendorCUDA) | 1<<24
	seen := map[string]int{}
	for _, p := range probes {
		switch p.Entry {
		case "cu_launch_kernel", "cu_launch_kernel_ex":
			seen[p.Entry]++
			if p.Cookie() != want || p.Group != "driver" {
				t.Errorf("%s (%s, %s) has cookie %#x: its program takes it to be %#x", p.Symbol, p.Entry, p.Group, p.Cookie(), want)
			}
		}
	}
	if seen["cu_launch_kernel"] == 0 || seen["cu_launch_kernel_ex"] == 0 {
		t.Errorf("probes of the driver-only launch programs: %v", seen)
	}
}

func TestLibraryNames(t *testing.T) {
	for path, want := range map[string]bool{
		"/x/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12": true,
		"/usr/lib/libcuda.so.1":                     true,
		"/opt/torch/lib/libcudart-d0da41ae.so.11.0": true,
		"/opt/maca/lib/libmccl.so.2":                true,
		"/usr/lib/libc.so.6":                        false,
	} {
		if knownName(path) != want {
			t.Errorf("knownName(%s) = %v", path, !want)
		}
	}
	if !boring("/lib/x86_64-linux-gnu/libc.so.6") || boring("/opt/vendor/libfoo.so") {
		t.Error("boring")
	}
}

// The parts a user turns off are not attached, nor reported missing; the
// rest is.
func TestPlanParts(t *testing.T) {
	exported := map[string]uint64{}
	for _, p := range probes {
		if p.Vendor == timer.VendorCUDA && p.Group != "collective" {
			exported[p.Symbol] = 1
		}
	}
	delete(exported, "cuEventQuery")
	delete(exported, "cuModuleGetFunction")
	has := func(o Options) (map[string]bool, []string) {
		attach, missing := plan(exported, &o)
		got := map[string]bool{}
		for _, p := range attach {
			got[p.Symbol] = true
		}
		return got, missing
	}
	all, missing := has(Options{})
	for _, s := range []string{"cuLaunchKernel", "cuMemcpyAsync", "cuEventRecord", "cuKernelGetFunction", "cuLibraryGetKernel", "cuStreamSynchronize"} {
		if !all[s] {
			t.Errorf("%s not attached by default", s)
		}
	}
	if !slices.Contains(missing, "cuEventQuery") || !slices.Contains(missing, "cuModuleGetFunction") {
		t.Errorf("missing %v", missing)
	}
	names, missing := has(Options{NoKernelNames: true})
	for _, s := range []string{"cuKernelGetFunction", "cuLibraryGetKernel"} {
		if names[s] {
			t.Errorf("%s attached without kernel names", s)
		}
	}
	if !names["cuLaunchKernel"] || !names["cuMemcpyAsync"] || slices.Contains(missing, "cuModuleGetFunction") {
		t.Errorf("without kernel names: launch %v, copy %v, missing %v", names["cuLaunchKernel"], names["cuMemcpyAsync"], missing)
	}
	ce, missing := has(Options{NoCopyEventProbes: true})
	for _, s := range []string{"cuMemcpyAsync", "cuMemcpyHtoDAsync_v2", "cuEventRecord", "cuStreamWaitEvent", "cuStreamQuery", "cuEventElapsedTime_v2"} {
		if ce[s] {
			t.Errorf("%s attached without copy and event probes", s)
		}
	}
	for _, s := range []string{"cuLaunchKernel", "cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize", "cuMemcpy", "cuMemcpyDtoH_v2", "cuKernelGetFunction"} {
		if !ce[s] {
			t.Errorf("%s not attached without copy and event probes", s)
		}
	}
	if slices.Contains(missing, "cuEventQuery") {
		t.Errorf("without copy and event probes, missing %v", missing)
	}
}

// TestCallNames checks the calls made now and then: each has its id (a
// byte) in its cookie and its name under that id, the return probed and
// the kind a KindCall; CUDA's are the driver's alone (its runtime makes
// them through the driver), MACA's the runtime's.
func TestCallNames(t *testing.T) {
	if len(callNames) == 0 || len(callNames) > maxCallIDs {
		t.Fatalf("%d calls made now and then, want 1 to %d", len(callNames), maxCallIDs)
	}
	seen := map[string]bool{}
	for _, p := range probes {
		if p.Entry != "call_enter" {
			continue
		}
		c := callNames[p.CallID]
		if c.symbol != p.Symbol || seen[p.Symbol] {
			t.Errorf("%s: id %d names %s (seen before: %v)", p.Symbol, p.CallID, c.symbol, seen[p.Symbol])
		}
		seen[p.Symbol] = true
		if p.Exit != "call_exit" || p.Cookie() != uint64(p.Vendor)|uint64(timer.KindCall)<<8|uint64(p.CallID)<<16|map[bool]uint64{true: 1 << 24}[p.Driver] {
			t.Errorf("%s: %+v cookie %#x", p.Symbol, p, p.Cookie())
		}
		if p.Vendor == timer.VendorCUDA && p.Group == "runtime" {
			t.Errorf("%s: CUDA's runtime makes it through the driver, probed there", p.Symbol)
		}
	}
	if len(seen) != len(callNames) {
		t.Errorf("%d probes of %d calls made now and then", len(seen), len(callNames))
	}
	for _, n := range []string{"cuMemFree_v2", "cuMemAlloc_v2", "cuStreamDestroy_v2", "cuModuleLoadData", "cuMemsetD8_v2_ptds",
		"cuCtxDestroy_v2", "mcFree", "mcMalloc", "ncclCommFinalize", "mcclCommFinalize"} {
		if p, ok := probeBySymbol[n]; !ok || p.Entry != "call_enter" {
			t.Errorf("%s: %+v", n, p)
		}
	}
	if !callNames[probeBySymbol["cuStreamDestroy_v2"].CallID].stream || callNames[probeBySymbol["cuMemFree_v2"].CallID].stream {
		t.Error("the stream argument of cuStreamDestroy_v2, and none of cuMemFree_v2")
	}
}

// Attached to a running process, the programs that complete GPU work go
// live before those that issue it, and the GPU libraries before the
// collective ones: every issuer names a program of the tables, every
// launch, asynchronous copy, event record, stream wait and collective is
// one, and no synchronize, query or synchronous copy is.
func TestIssuersAndAttachRank(t *testing.T) {
	entries := map[string]bool{}
	for _, calls := range [][]call{runtimeCalls, driverCalls, collectiveCalls} {
		for _, c := range calls {
			entries[c.entry] = true
		}
	}
	for prog := range issuers {
		if !entries[prog] {
			t.Errorf("issuer %q is no entry program of the tables", prog)
		}
	}
	for _, prog := range []string{"launch_kernel", "cu_launch_kernel", "cu_launch_kernel_ex", "graph_launch", "cu_memcpy_async",
		"event_record", "stream_wait_event", "coll_reduce_op", "coll_p2p"} {
		if !issuers[prog] {
			t.Errorf("%s issues work: it must be attached last", prog)
		}
	}
	completers := []string{"memcpy_enter", "stream_sync_enter", "device_sync_enter", "event_sync_enter", "event_query_enter",
		"stream_query_enter", "call_enter", "get_function_enter"}
	for _, prog := range completers {
		if issuers[prog] {
			t.Errorf("%s completes work or names it: it must go live before the issuers", prog)
		}
	}
	// sorted from two orders: the same order, every issuer after every other
	up := slices.Sorted(maps.Keys(entries))
	down := slices.Clone(up)
	slices.Reverse(down)
	slices.SortFunc(up, issuersLast)
	slices.SortFunc(down, issuersLast)
	if !slices.Equal(up, down) {
		t.Errorf("attach order depends on the input's: %v, %v", up, down)
	}
	first := slices.IndexFunc(up, func(p string) bool { return issuers[p] })
	if first < 0 || slices.ContainsFunc(up[first:], func(p string) bool { return !issuers[p] }) {
		t.Errorf("attach order %v: an issuer before another program", up)
	}

	for path, want := range map[string]int{
		"/usr/lib/x86_64-linux-gnu/libcuda.so.1": 0, "/opt/cuda/lib64/libcudart.so.12": 0, "/opt/maca/lib/libmcruntime.so": 0,
		"/opt/nccl/lib/libnccl.so.2": 1, "/opt/maca/lib/libmccl.so": 1, "/torch/lib/libtorch_cuda.so": 2,
	} {
		if got := attachRank(path); got != want {
			t.Errorf("attachRank(%s) = %d, want %d", path, got, want)
		}
	}
}

package gpuwait

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

// TestRealStacks classifies every thread of dumps taken on an H100 and an
// H200 (CUDA 13, driver 580, PyTorch 2.11, testdata/): exactly the threads
// that waited on the GPU are found, with their call and caller (the
// driver's own threads, asleep in libcuda, are not).
func TestRealStacks(t *testing.T) {
	for _, tc := range []struct {
		file  string
		waits map[int]string // tid: Wait.String()
	}{
		// One process, torch.cuda.synchronize() behind a kernel that
		// never ends; the main thread spins in the driver.
		{"h100-nccl1-rank0.stacktrace", map[int]string{886: "cuCtxSynchronize_v2 from c10::cuda::device_synchronize"}},
		// DDP over gloo on CUDA tensors, rank 2's kernel never ends: its
		// gloo thread spins in cuStreamSynchronize, the main thread
		// sleeps in autograd (no wait of its own).
		{"h100-ddp-gloo-rank2.stacktrace", map[int]string{1173: "cuStreamSynchronize from c10d::AsyncAllreduceCUDAHostWork::run"}},
		// A peer of it: its gloo thread is inside the same c10d work, but
		// waits for the network (gloo's allreduce), not the GPU.
		{"h100-ddp-gloo-rank0.stacktrace", nil},
		// Calls that are no waits, blocked behind torch.cuda._sleep's
		// kernel on an H200 (driver 580, torch 2.11 cu13): under CUDA_LAUNCH_BLOCKING=1 its own
		// launch; a loop of x.add_(1) (the first add's launch, which
		// loads its module lazily, waits for the running kernel); and
		// torch.cuda.empty_cache() freeing cached blocks. The exported
		// entry point is on the stack above the driver's unnamed frames.
		{"h200-launch-blocking-rank0.stacktrace", map[int]string{843: "cuLaunchKernel of at::cuda::(anonymous namespace)::spin_kernel from at::cuda::sleep"}},
		{"h200-queue-full-rank0.stacktrace", map[int]string{1070: "cuLaunchKernel from at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctorOnSelf_add<float> >"}},
		{"h200-free-sync-rank0.stacktrace", map[int]string{1294: "cuMemFree_v2 from c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_block"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := dumpfile.Read(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Threads) < 5 {
				t.Fatalf("%d threads in the fixture", len(f.Threads))
			}
			found := map[int]string{}
			for _, th := range f.Threads {
				if w, ok := Classify(th.Native); ok {
					found[th.TID] = w.String()
				}
			}
			if len(found) != len(tc.waits) {
				t.Errorf("waits %v, want %v", found, tc.waits)
			}
			for tid, want := range tc.waits {
				if found[tid] != want {
					t.Errorf("thread %d: %q, want %q", tid, found[tid], want)
				}
			}
		})
	}
}

func stackOf(spec ...string) []stack.Frame {
	var out []stack.Frame
	for i := 0; i < len(spec); i += 2 {
		out = append(out, stack.Frame{Func: spec[i], Module: spec[i+1]})
	}
	return out
}

const (
	libc    = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	libcuda = "/usr/lib/libcuda.so.1"
	cudart  = "/opt/lib/libcudart.so.13"
	mcrt    = "/opt/maca/lib/libmcruntime.so"
	torch   = "/opt/torch/lib/libtorch_cuda.so"
	nccl    = "/opt/lib/libnccl.so.2"
	ffi     = "/usr/lib/x86_64-linux-gnu/libffi.so.8"
	app     = "/job/app"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stack []stack.Frame
		want  string // Wait.String(); "" when no wait
		role  Role
	}{
		{"sleeping in the runtime's synchronize", stackOf("??", libc, "ioctl", libc, "??", libcuda, "cuStreamSynchronize", libcuda, "cudaStreamSynchronize", cudart, "step", app, "main", app),
			"cuStreamSynchronize from step", Call},
		{"MACA twin", stackOf("??", mcrt, "mcDeviceSynchronize", mcrt, "train", app),
			"mcDeviceSynchronize from train", Call},
		{"event query polled", stackOf("cudaEventQuery", cudart, "poll_done", app, "main", app),
			"cudaEventQuery from poll_done", Call},
		{"c10d work wait sleeping between polls", stackOf("clock_nanosleep", libc, "std::this_thread::sleep_for", app, "c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal", torch, "c10d::ProcessGroupNCCL::WorkNCCL::wait", torch, "pybind", app),
			"c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal from c10d::ProcessGroupNCCL::WorkNCCL::wait", Work},
		{"c10d work wait polling an event", stackOf("??", libcuda, "cuEventQuery", libcuda, "??", cudart, "cudaEventQuery", cudart, "c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal", torch, "c10d::ProcessGroupNCCL::WorkNCCL::wait", torch),
			"cuEventQuery from c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal", Call},
		{"split-off part", stackOf("??", libcuda, "cuCtxSynchronize_v2 [clone .cold]", libcuda, "main", app),
			"cuCtxSynchronize_v2 from main", Call},
		{"a callback run from inside a call is the thread's own work", stackOf("compute", app, "??", libcuda, "cuStreamSynchronize", libcuda, "main", app), "", 0},
		{"gloo over CUDA waiting on the network", stackOf("recv", libc, "gloo::allreduce", torch, "c10d::AsyncAllreduceCUDAHostWork::run", torch), "", 0},
		{"computing", stackOf("gemm", app, "main", app), "", 0},
		{"no frames", nil, "", 0},
		// Calls that are no waits of their own, blocked behind a kernel
		// that never ends.
		{"a launch waiting for a slot, the testbed's runtime path", stackOf("fg_spin_wait", libcuda, "enqueue", libcuda, "launch", libcuda, "fg_impl_cuLaunchKernel", libcuda, "cudaLaunchKernel", cudart, "??", ffi, "ffi_call", ffi),
			"cudaLaunchKernel from ffi_call", Call},
		{"a launch under CUDA_LAUNCH_BLOCKING, the driver's 580 frames", stackOf("??", libcuda, "??", libcuda, "cuLaunchKernel", libcuda, "??", cudart, "cudaLaunchKernel", cudart, "at::native::vectorized_elementwise_kernel", torch),
			"cuLaunchKernel from at::native::vectorized_elementwise_kernel", Call},
		{"a launch through a 535 stub: no frame names it", stackOf("??", libcuda, "??", libcuda, "??", ffi, "ffi_call", ffi),
			"a call into libcuda.so.1 from ffi_call", Call},
		{"a free waiting for the device", stackOf("fg_spin_wait", libcuda, "sync_all", libcuda, "cuMemFree_v2", libcuda, "cudaFree", cudart, "c10::cuda::CUDACachingAllocator::emptyCache", torch),
			"cuMemFree_v2 from c10::cuda::CUDACachingAllocator::emptyCache", Call},
		{"an all-reduce launch waiting for its kernel", stackOf("fg_spin_wait", libcuda, "fakegpu_drv_enqueue_host", libcuda, "coll", nccl, "ncclAllReduce", nccl, "c10d::ProcessGroupNCCL::allreduce", torch),
			"ncclAllReduce from c10d::ProcessGroupNCCL::allreduce", Call},
		{"a runtime linked into the framework", stackOf("??", torch, "cudaStreamSynchronize", torch, "at::native::copy_", torch),
			"cudaStreamSynchronize from at::native::copy_", Call},
		{"the driver's own thread: nobody called it", stackOf("poll", libc, "??", libcuda, "??", libcuda, "start_thread", libc, "clone3", libc), "", 0},
		{"NCCL's proxy thread", stackOf("??", libc, "ncclProxyService", nccl, "start_thread", libc, "clone3", libc), "", 0},
		{"a framework function named like an API call is no GPU library", stackOf("THCPModule_cudaSynchronize", torch, "main", app), "", 0},
	} {
		if w, ok := ClassifyCut(tc.stack); ok != (tc.want != "") || ok && w.String() != tc.want {
			// a whole stack cut nowhere classifies alike
			if !strings.HasPrefix(tc.name, "the driver's own thread") && !strings.HasPrefix(tc.name, "NCCL's proxy") {
				t.Errorf("%s, cut: %q %v, want %q", tc.name, w, ok, tc.want)
			}
		}
		w, ok := Classify(tc.stack)
		if got := map[bool]string{true: w.String()}[ok]; got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if ok && w.Role != tc.role {
			t.Errorf("%s: role %v, want %v", tc.name, w.Role, tc.role)
		}
		if want := map[bool]string{true: "maca", false: "cuda"}[strings.Contains(tc.name, "MACA")]; ok && w.Vendor != want {
			t.Errorf("%s: vendor %q, want %q", tc.name, w.Vendor, want)
		}
	}
}

// A stack cut at another tracer's return-probe trampoline (the unwinding
// stopped there: no caller frame) is a wait when GPU frames are on top,
// its caller unknown; a whole stack that ends in GPU frames (a library's
// own thread) is none.
func TestClassifyCut(t *testing.T) {
	cut := stackOf("fg_spin_wait", libcuda, "sync_all", libcuda, "cuMemcpy", libcuda)
	if w, ok := ClassifyCut(cut); !ok || w.String() != "cuMemcpy" {
		t.Errorf("cut stack: %q %v, want cuMemcpy", w, ok)
	}
	if w, ok := Classify(cut); ok {
		t.Errorf("the same stack whole: %q, want no wait (nobody called it)", w)
	}
	if w, ok := ClassifyCut(stackOf("compute", app)); ok {
		t.Errorf("a cut stack of the thread's own work: %q", w)
	}
}

// TestTableTwins checks the table: no name twice, MACA twins named as
// MetaX renames CUDA's, roles set.
func TestTableTwins(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range table {
		for _, n := range []string{e.cuda, e.maca} {
			if n == "" {
				continue
			}
			if seen[n] {
				t.Errorf("%s twice", n)
			}
			seen[n] = true
		}
		if e.role < Call || e.role > Site {
			t.Errorf("%s: role %d", e.cuda, e.role)
		}
		switch {
		case e.maca == "":
		case len(e.cuda) > 4 && e.cuda[:4] == "cuda":
			if e.maca != "mc"+e.cuda[4:] {
				t.Errorf("%s: MACA twin %s", e.cuda, e.maca)
			}
		case len(e.cuda) > 4 && e.cuda[:4] == "nccl":
			if e.maca != "mccl"+e.cuda[4:] {
				t.Errorf("%s: MACA twin %s", e.cuda, e.maca)
			}
		default:
			t.Errorf("%s: a MACA twin of a name that is neither cuda* nor nccl*", e.cuda)
		}
	}
}

// A call that returns at once in a running job is momentary: one sample
// of it says nothing of a wait; a synchronize, a free, a work wait are not.
func TestMomentary(t *testing.T) {
	for _, c := range []struct {
		w    Wait
		want bool
	}{
		{Wait{Call: "cuLaunchKernel", Role: Call}, true},
		{Wait{Call: "cuLaunchKernelEx_ptsz", Role: Call}, true},
		{Wait{Call: "cudaMemcpyAsync", Role: Call}, true},
		{Wait{Call: "cuEventQuery", Role: Call}, true},
		{Wait{Call: "cuEventRecord", Role: Call}, true},
		{Wait{Call: "cuStreamWaitEvent", Role: Call}, true},
		{Wait{Library: "libcuda.so.1", Role: Call}, true},
		{Wait{Call: "cuStreamSynchronize", Role: Call}, false},
		{Wait{Call: "cuMemFree_v2", Role: Call}, false},
		{Wait{Call: "ncclCommInitRank", Role: Call}, false},
		{Wait{Call: "c10d::ProcessGroupNCCL::WorkNCCL::wait", Role: Work}, false},
	} {
		if got := c.w.Momentary(); got != c.want {
			t.Errorf("%+v: Momentary %v, want %v", c.w, got, c.want)
		}
	}
}

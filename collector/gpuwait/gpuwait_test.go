package gpuwait

import (
	"path/filepath"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/stack"
)

// TestRealStacks classifies every thread of dumps taken on an H100 (CUDA
// 13, driver 580, PyTorch 2.11, testdata/): exactly the threads that
// waited on the GPU are found, with their call and caller.
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
			"cuStreamSynchronize from step", Block},
		{"MACA twin", stackOf("??", mcrt, "mcDeviceSynchronize", mcrt, "train", app),
			"mcDeviceSynchronize from train", Block},
		{"event query polled", stackOf("cudaEventQuery", cudart, "poll_done", app, "main", app),
			"cudaEventQuery from poll_done", Poll},
		{"c10d work wait sleeping between polls", stackOf("clock_nanosleep", libc, "std::this_thread::sleep_for", app, "c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal", torch, "c10d::ProcessGroupNCCL::WorkNCCL::wait", torch, "pybind", app),
			"c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal from c10d::ProcessGroupNCCL::WorkNCCL::wait", Work},
		{"split-off part", stackOf("??", libcuda, "cuCtxSynchronize_v2 [clone .cold]", libcuda, "main", app),
			"cuCtxSynchronize_v2 from main", Block},
		{"a callback run from inside a call is the thread's own work", stackOf("compute", app, "??", libcuda, "cuStreamSynchronize", libcuda, "main", app), "", 0},
		{"gloo over CUDA waiting on the network", stackOf("recv", libc, "gloo::allreduce", torch, "c10d::AsyncAllreduceCUDAHostWork::run", torch), "", 0},
		{"computing", stackOf("gemm", app, "main", app), "", 0},
		{"no frames", nil, "", 0},
	} {
		w, ok := Classify(tc.stack)
		if got := map[bool]string{true: w.String()}[ok]; got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if ok && w.Role != tc.role {
			t.Errorf("%s: role %v, want %v", tc.name, w.Role, tc.role)
		}
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
		if e.role < Block || e.role > Site {
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

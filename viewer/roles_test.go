package viewer

import (
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/viewer/culprit"
)

// TestWaitOf: a thread inside a collective or a wait says what it waits
// in; a library's idle loop, NCCL's own threads and device code do not.
func TestWaitOf(t *testing.T) {
	const (
		torch   = "/opt/torch/lib/libtorch_cpu.so"
		ncclLib = "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
		cudart  = "/opt/nvidia/cu13/lib/libcudart.so.13"
		c10d    = "/opt/torch/distributed/distributed_c10d.py"
	)
	for _, tc := range []struct {
		name   string
		frames []string // func, module pairs, innermost first
		python []stack.Frame
		role   culprit.Role
		want   string
	}{
		{"gloo waits for a peer's data", []string{"pthread_cond_timedwait", libc, "gloo::transport::tcp::UnboundBuffer::waitRecv", torch, "gloo::(anonymous namespace)::ring", torch}, nil, culprit.Background, "gloo collective"},
		{"gloo's transport loop idles", []string{"epoll_wait", libc, "gloo::transport::tcp::Loop::run", torch}, nil, culprit.Background, ""},
		{"a process group's idle work loop", []string{"std::condition_variable::wait", "libstdc++.so.6", "c10d::ProcessGroupGloo::runLoop", torch}, nil, culprit.Background, ""},
		{"DDP's backward waits for its all-reduce", []string{"std::condition_variable::wait", "libstdc++.so.6", "c10d::Reducer::finalize_backward", torch}, nil, culprit.App, "c10d wait"},
		{"a work's wait", []string{"c10d::ProcessGroupNCCL::WorkNCCL::wait", torch}, nil, culprit.Driver, "c10d wait"},
		{"a store key", []string{"recv", libc, "c10d::TCPStore::doGet", torch}, nil, culprit.Driver, "c10d store wait"},
		{"a stream synchronize", []string{"??", "libcuda.so.1", "cudaStreamSynchronize", cudart}, nil, culprit.Background, "CUDA synchronize"},
		{"the application in NCCL", []string{"sched_yield", libc, "ncclGroupEnd", ncclLib}, nil, culprit.Driver, "collective call (ncclGroupEnd)"},
		{"NCCL's own proxy thread", []string{"ncclProxyProgress", ncclLib, "ncclProxyService", ncclLib}, nil, culprit.Background, ""},
		{"device code on a stream executor", []string{"nccl_wait_peers", ncclLib, "ncclDevKernel_Generic", ncclLib}, nil, culprit.App, ""},
		{"torch.distributed in Python", []string{"_PyEval_EvalFrameDefault", libpy}, []stack.Frame{{Func: "barrier", File: c10d, Line: 4000}}, culprit.Driver, "torch.distributed collective"},
		{"asleep in the job's own code", []string{"clock_nanosleep", libc, "time_sleep", libpy}, []stack.Frame{{Func: "stall", File: "/job/train.py", Line: 3}}, culprit.Driver, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var frames []stack.Frame
			for i := 0; i+1 < len(tc.frames); i += 2 {
				frames = append(frames, stack.Frame{Func: tc.frames[i], Module: tc.frames[i+1]})
			}
			th := &stack.Thread{TID: 1, Name: "t", Native: frames, Python: tc.python}
			if got := waitOf(th, frames, tc.role); got != tc.want {
				t.Errorf("waitOf = %q, want %q", got, tc.want)
			}
		})
	}
}

package activity

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

const site = "/opt/torch/.venv/lib/python3.12/site-packages/"

func py(fn, file string, line int) stack.Frame {
	return stack.Frame{Func: fn, File: file, Line: line, Module: "python"}
}

func nat(fn, module string) stack.Frame { return stack.Frame{Func: fn, Module: module} }

// eval is the interpreter's frames below any Python code: the outer part
// of every Python thread's native stack.
var eval = []stack.Frame{
	nat("_PyEval_EvalFrameDefault", "/usr/bin/python3.12"), nat("PyEval_EvalCode", "/usr/bin/python3.12"),
	nat("Py_RunMain", "/usr/bin/python3.12"), nat("__libc_start_main", "/lib/x86_64-linux-gnu/libc.so.6"),
}

// train is the outer Python frames of a training script.
var train = []stack.Frame{py("train_step", "/job/train.py", 88), py("train", "/job/train.py", 120), py("<module>", "/job/train.py", 140)}

func native(fs ...stack.Frame) []stack.Frame { return append(fs, eval...) }
func python(fs ...stack.Frame) []stack.Frame { return append(fs, train...) }

// thread is the main thread (tid 100 of pid 100).
func thread(n, p []stack.Frame) stack.Thread {
	return stack.Thread{TID: 100, Name: "python3", Native: n, Python: p}
}

// helper is a second thread, a watchdog polling its events.
var helper = stack.Thread{TID: 101, Name: "pt_nccl_watchdg", Native: native(nat("cudaEventQuery", "/usr/lib/libcudart.so.12"),
	nat("c10d::ProcessGroupNCCL::WorkNCCL::isCompleted", "/opt/libtorch_cuda.so")), Python: nil}

func TestClassify(t *testing.T) {
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	write := nat("__GI___libc_write", libc)
	for _, c := range []struct {
		name    string
		threads []stack.Thread
		facts   Facts
		want    Activity
	}{
		{
			"torch.save writing a record",
			[]stack.Thread{thread(native(write, nat("caffe2::serialize::PyTorchStreamWriter::writeRecord", "/opt/libtorch_cpu.so"),
				nat("pybind11::cpp_function::dispatcher", "/opt/libtorch_python.so")),
				[]stack.Frame{py("_save", site+"torch/serialization.py", 1206), py("save", site+"torch/serialization.py", 967),
					py("save_checkpoint", "/job/train.py", 60), py("train", "/job/train.py", 121), py("<module>", "/job/train.py", 140)}), helper},
			Facts{},
			Activity{Checkpoint, "save_checkpoint@train.py:60"},
		},
		{
			"safetensors save_file, in its Rust extension",
			[]stack.Thread{thread(native(write, nat("??", site+"safetensors/_safetensors_rust.abi3.so")),
				python(py("save_file", site+"safetensors/torch.py", 286)))},
			Facts{},
			Activity{Checkpoint, "save_file@torch.py:286"},
		},
		{
			"torch.save copying a GPU tensor to the host: still the save",
			[]stack.Thread{thread(native(nat("cuMemcpyDtoH_v2", "/usr/lib/libcuda.so.1"), nat("cudaMemcpy", "/usr/lib/libcudart.so.12")),
				python(py("_save", site+"torch/serialization.py", 1206), py("save", site+"torch/serialization.py", 967)))},
			Facts{TID: 100, Call: "cudaMemcpy", Kernel: "gemm"},
			Activity{Checkpoint, "save@serialization.py:967"},
		},
		{
			"a checkpoint loaded at the start",
			[]stack.Thread{thread(native(nat("__GI___libc_read", libc)),
				python(py("load_checkpoint", "/job/train.py", 30)))},
			Facts{},
			Activity{Checkpoint, "load_checkpoint@train.py:30"},
		},
		{
			"activation checkpointing recomputes: not a checkpoint",
			[]stack.Thread{thread(native(nat("__sched_yield", libc)),
				python(py("forward", "/job/model.py", 12), py("checkpoint", site+"torch/utils/checkpoint.py", 488)))},
			Facts{},
			Activity{Python, "forward@model.py:12"},
		},
		{
			"a DataLoader with workers: the main thread waits for a batch",
			[]stack.Thread{thread(native(nat("__poll", libc)),
				python(py("wait", "/usr/lib/python3.12/threading.py", 359), py("get", "/usr/lib/python3.12/multiprocessing/queues.py", 113),
					py("_try_get_data", site+"torch/utils/data/dataloader.py", 1133), py("_get_data", site+"torch/utils/data/dataloader.py", 1295),
					py("_next_data", site+"torch/utils/data/dataloader.py", 1333), py("__next__", site+"torch/utils/data/dataloader.py", 631)))},
			Facts{},
			Activity{DataLoader, "_try_get_data@dataloader.py:1133"},
		},
		{
			"no workers: the main thread reads the dataset itself",
			[]stack.Thread{thread(native(nat("__GI___libc_read", libc)),
				python(py("__getitem__", "/job/data.py", 40), py("fetch", site+"torch/utils/data/_utils/fetch.py", 52),
					py("_next_data", site+"torch/utils/data/dataloader.py", 677)))},
			Facts{},
			Activity{DataLoader, "fetch@fetch.py:52"},
		},
		{
			"the testbed's loader, PyTorch's routine names in another file",
			[]stack.Thread{thread(native(nat("__GI___libc_read", libc)),
				python(py("line", "/t/run.py", 600), py("_try_get_data", "/t/run.py", 650), py("_get_data", "/t/run.py", 645)))},
			Facts{},
			Activity{DataLoader, "_try_get_data@run.py:650"},
		},
		{
			"torch.compile: dynamo traces, inductor compiles",
			[]stack.Thread{thread(native(nat("__GI___libc_read", libc)),
				python(py("wait", site+"torch/_inductor/async_compile.py", 300), py("compile_fx", site+"torch/_inductor/compile_fx.py", 1500),
					py("_compile", site+"torch/_dynamo/convert_frame.py", 900), py("__call__", site+"torch/_dynamo/convert_frame.py", 1100),
					py("_fn", site+"torch/_dynamo/eval_frame.py", 600)))},
			Facts{},
			Activity{Compile, "__call__@convert_frame.py:1100"},
		},
		{
			"a compiled function running: not compiling",
			[]stack.Thread{thread(native(nat("cuLaunchKernel", "/usr/lib/libcuda.so.1")),
				python(py("call", "/tmp/torchinductor_root/ab/cab.py", 80), py("_fn", site+"torch/_dynamo/eval_frame.py", 600)))},
			Facts{},
			Activity{Python, "call@cab.py:80"},
		},
		{
			"Triton's JIT in its MLIR passes",
			[]stack.Thread{thread(native(nat("mlir::PassManager::run", site+"triton/_C/libtriton.so")),
				python(py("compile", site+"triton/compiler/compiler.py", 300), py("run", site+"triton/runtime/jit.py", 580)))},
			Facts{},
			Activity{Compile, "compile@compiler.py:300"},
		},
		{
			"garbage collection under the training loop",
			[]stack.Thread{thread(native(nat("visit_reachable", "/usr/lib/libpython3.11.so.1.0"), nat("gc_collect_main", "/usr/lib/libpython3.11.so.1.0")),
				python(py("forward", "/job/model.py", 12)))},
			Facts{},
			Activity{GC, "forward@model.py:12"},
		},
		{
			"garbage collection in a static python 3.10 (collect)",
			[]stack.Thread{thread(native(nat("collect", "/usr/bin/python3.10"), nat("collect_with_callback", "/usr/bin/python3.10")), nil)},
			Facts{},
			Activity{GC, ""},
		},
		{
			"a function called collect elsewhere is no collection",
			[]stack.Thread{thread(native(nat("collect", "/opt/libapp.so")), nil)},
			Facts{},
			Activity{Unknown, "collect"},
		},
		{
			"a synchronize the probes saw, on a kernel",
			[]stack.Thread{thread(native(nat("cuStreamSynchronize", "/usr/lib/libcuda.so.1"), nat("cudaStreamSynchronize", "/usr/lib/libcudart.so.12"),
				nat("c10::cuda::stream_synchronize", "/opt/libc10_cuda.so")),
				python(py("synchronize", site+"torch/cuda/streams.py", 100)))},
			Facts{TID: 100, Call: "cudaStreamSynchronize", Kernel: "flash_fwd_kernel"},
			Activity{GPUWait, "cuStreamSynchronize from c10::cuda::stream_synchronize, kernel flash_fwd_kernel"},
		},
		{
			"waiting in another communicator's collective",
			[]stack.Thread{thread(native(nat("cudaStreamSynchronize", "/usr/lib/libcudart.so.12"), nat("c10::cuda::stream_synchronize", "/opt/libc10_cuda.so")),
				python(py("recv", site+"torch/distributed/distributed_c10d.py", 2300))), helper},
			Facts{TID: 100, Call: "cudaStreamSynchronize", Collective: "Recv #7 on comm 9c1e04a1b2c3", Kernel: "gemm"},
			Activity{Collective, "Recv #7 on comm 9c1e04a1b2c3"},
		},
		{
			"a watchdog waiting in a collective while the main thread sleeps: python",
			[]stack.Thread{thread(native(nat("clock_nanosleep", libc)),
				python(py("straggle_forever", "/t/run.py", 729), py("train_step", "/t/run.py", 800))), helper},
			Facts{TID: 101, Call: "cudaEventQuery (polling)", Collective: "AllReduce #9 on comm 42aa"},
			Activity{Python, "straggle_forever@run.py:729"},
		},
		{
			"a C++ program in its own code",
			[]stack.Thread{{TID: 100, Native: []stack.Frame{nat("futex_wait", libc), nat("??", ""), nat("worker_loop", "/opt/bin/app"), nat("main", "/opt/bin/app")}}},
			Facts{},
			Activity{Unknown, "worker_loop"},
		},
		{"no thread", nil, Facts{}, Activity{Unknown, ""}},
		{
			"the main thread missing: the first Python thread",
			[]stack.Thread{helper, {TID: 102, Python: python(py("loop", "/job/train.py", 5))}},
			Facts{},
			Activity{Python, "loop@train.py:5"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The order of the threads in the sample does not matter.
			for _, threads := range [][]stack.Thread{c.threads, reversed(c.threads)} {
				if got := Classify(100, threads, c.facts); got != c.want {
					t.Errorf("Classify = %+v, want %+v", got, c.want)
				}
			}
		})
	}
}

func reversed(ts []stack.Thread) []stack.Thread {
	out := slices.Clone(ts)
	slices.Reverse(out)
	return out
}

// A real stack: the main thread of a torch job on an H100 in
// torch.cuda.synchronize() (collector/capture/gpuwait's testdata).
func TestClassifyH100(t *testing.T) {
	f, err := dumpfile.Read(filepath.Join("..", "gpuwait", "testdata", "h100-nccl1-rank0.stacktrace"))
	if err != nil {
		t.Fatal(err)
	}
	got := Classify(f.PID, f.Threads, Facts{})
	if want := (Activity{GPUWait, "cuCtxSynchronize_v2 from c10::cuda::device_synchronize"}); got != want {
		t.Errorf("Classify = %+v, want %+v", got, want)
	}
}

// Real dumps of a torch job on the CPU (viewer/testdata/torchjob: gloo,
// DistributedDataParallel, 2 DataLoader workers per rank), rank 2 faulty:
// what the rank does, and what a rank waiting in gloo's all-reduce does.
func TestClassifyTorchJob(t *testing.T) {
	for _, c := range []struct {
		fault string
		rank  int
		want  Activity
	}{
		{"sleep", 2, Activity{Python, "stall_in_python_sleep@job.py:153"}},
		{"deadlock", 2, Activity{Python, "deadlock_two_locks@job.py:176"}},
		{"busy", 2, Activity{Python, "spin_forever@job.py:159"}},
		{"dataloader", 2, Activity{DataLoader, "_MultiProcessingDataLoaderIter._try_get_data@dataloader.py:1120"}},
		{"sleep", 0, Activity{Python, "backward@__init__.py:197"}},
	} {
		f, err := dumpfile.Read(filepath.Join("..", "..", "..", "viewer", "testdata", "torchjob", c.fault, fmt.Sprintf("%05d-00004.stacktrace", c.rank)))
		if err != nil {
			t.Fatal(err)
		}
		for _, threads := range [][]stack.Thread{f.Threads, reversed(f.Threads)} {
			if got := Classify(f.PID, threads, Facts{}); got != c.want {
				t.Errorf("%s rank %d: Classify = %+v, want %+v", c.fault, c.rank, got, c.want)
			}
		}
	}
}

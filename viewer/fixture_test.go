package viewer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

// The fixtures model what the agent dumps from testdata/fakegpu/run.py
// (fault step 3, three all-reduces per step): CPython 3.11 running the
// trainer and calling the fake CUDA runtime and NCCL through ctypes; one
// executor thread per stream ("gpu-stream0" default, "gpu-stream1" compute,
// "gpu-stream2" communication) running kernels and collectives; the
// "pt_nccl_watchdg" Python thread polling events every 100 ms (caught asleep
// or in cudaEventQuery: noise the report must not blame); the "dataloader"
// thread. Each fault leaves the marks run.py and the fake libraries make.

const (
	libc    = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	libpy   = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"
	pybin   = "/root/.pyenv/versions/3.11.7/bin/python3.11"
	ctypes  = "/root/.pyenv/versions/3.11.7/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"
	libffi  = "/usr/lib/x86_64-linux-gnu/libffi.so.8"
	fakeDir = "/work/main/testdata/fakegpu/build/"
	cudart  = fakeDir + "libcudart.so.12"
	nccl    = fakeDir + "libnccl.so.2"
	kernels = fakeDir + "libfakekernels.so"
	runPy   = "/work/main/testdata/fakegpu/run.py"
	queuePy = "/root/.pyenv/versions/3.11.7/lib/python3.11/queue.py"
	thrPy   = "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py"

	worldComm = "3f2a0b1c9d8e7f60a1b2c3d4e5f60718"
	lastSeq   = 12 // step 3's last all-reduce: the healthy ranks issued #10-#12 and completed #9
)

// Faults are the fault kinds of the testbed, each with the rank it hits in
// the fixtures.
var Faults = []struct {
	Kind   string
	Faulty int
}{
	{"skip-collective", 5},
	{"kernel-hang", 3},
	{"python-sleep", 2},
	{"deadlock", 6},
	{"dataloader", 1},
	{"nccl-stall", 4},
	{"dstate", 7},
}

// native builds frames from outermost-first (func, module) pairs.
func native(pairs ...string) []stack.Frame {
	var out []stack.Frame
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, stack.Frame{Func: pairs[i], Module: pairs[i+1], Addr: 0x7f0000001000 + uint64(i)*0x40})
	}
	return out
}

// py builds Python frames from outermost-first (func, file, line) triples.
func py(fr ...any) []stack.Frame {
	var out []stack.Frame
	for i := 0; i+2 < len(fr); i += 3 {
		out = append(out, stack.Frame{Func: fr[i].(string), File: fr[i+1].(string), Line: fr[i+2].(int), Module: "python"})
	}
	return out
}

// thread assembles a thread from outermost-first parts: native frames up
// to the interpreter, the Python frames it runs, and the native frames the
// innermost Python frame called. Python-less threads pass nil python.
func thread(tid int, name, state string, outer, python, inner []stack.Frame) stack.Thread {
	t := stack.Thread{TID: tid, Name: name, State: state}
	nat := slices.Clone(outer)
	merged := slices.Clone(outer)
	if python != nil {
		nat = append(nat, stack.Frame{Func: "_PyEval_EvalFrameDefault", Module: libpy, Addr: 0x7f00000a0000})
		merged = append(merged, python...)
		t.Python = slices.Clone(python)
		slices.Reverse(t.Python)
	}
	nat = append(nat, inner...)
	merged = append(merged, inner...)
	slices.Reverse(nat)
	slices.Reverse(merged)
	t.Native = nat
	if python != nil {
		t.Merged = merged
	}
	return t
}

var (
	mainOuter = native("_start", pybin, "__libc_start_main", libc, "Py_BytesMain", libpy, "pymain_run_python", libpy,
		"_PyRun_SimpleFileObject", libpy, "run_mod", libpy, "PyEval_EvalCode", libpy)
	threadOuter = native("clone3", libc, "start_thread", libc, "thread_run", libpy, "_PyObject_Call", libpy)
	streamOuter = native("clone3", libc, "start_thread", libc, "fg_executor_main", cudart)
	ctypesCall  = native("_PyObject_MakeTpCall", libpy, "PyCFuncPtr_call", ctypes, "_ctypes_callproc", ctypes,
		"ffi_call", libffi, "ffi_call_unix64", libffi)
	condWait  = native("pthread_cond_wait@@GLIBC_2.3.2", libc, "__futex_abstimed_wait_common", libc)
	timedWait = native("pthread_cond_timedwait@@GLIBC_2.3.2", libc, "__futex_abstimed_wait_common", libc)
	sleepC    = native("time_sleep", libpy, "clock_nanosleep@@GLIBC_2.17", libc)
	lockWait  = native("lock_PyThread_acquire_lock", libpy, "acquire_timed", libpy, "PyThread_acquire_lock_timed", libpy,
		"do_futex_wait", libc, "__new_sem_wait_slow64", libc)
	bootstrap = []any{"_bootstrap", thrPy, 995, "_bootstrap_inner", thrPy, 1038}
)

func concat(parts ...[]stack.Frame) []stack.Frame { return slices.Concat(parts...) }

// trainPy is the main thread's Python stack down to train_step, then inner.
func trainPy(inner ...any) []stack.Frame {
	return append(py("<module>", runPy, 554, "main", runPy, 549, "rank_main", runPy, 541, "train", runPy, 510), py(inner...)...)
}

// rankFile is one rank's dump under fault kind (kind "" is a healthy rank
// of a job whose faulty rank is elsewhere, hit by fault).
func rankFile(kind, fault string, rank, world int, rng *rand.Rand) *dumpfile.File {
	pid := 40000 + rank*10
	f := &dumpfile.File{
		Rank: rank, WorldSize: world, LocalRank: rank % 8, LocalWorldSize: min(world, 8),
		Host: fmt.Sprintf("node-%d", rank/8), PID: pid, Cmdline: []string{"python3", runPy, "--nproc", strconv.Itoa(world)},
		State: "S (sleeping)", Reason: "hang", DumpedAt: time.Date(2026, 11, 22, 14, 0, 0, 0, time.UTC).Add(time.Duration(rank) * time.Millisecond),
		DumpDuration: 18 * time.Millisecond, StoppedFor: 3 * time.Millisecond,
	}
	issued, completed := uint64(lastSeq), uint64(lastSeq-3)
	coll := &dumpfile.Op{Kind: "collective", Vendor: "cuda", Stream: 0x5502, TID: pid, Issued: 1e12, Op: "AllReduce",
		Dtype: "bfloat16", Count: 25 << 20, Comm: worldComm, Seq: lastSeq - 2, NRanks: int32(world), Bytes: 50 << 20}
	f.Hang = &dumpfile.Hang{Kind: "gpu", PID: pid, Rank: rank, DetectedAt: 1.3e12, Timeout: 300e9, AgeNs: 301e9, Oldest: coll,
		Waiters: []dumpfile.Waiter{{TID: pid, Call: "cudaMemcpy", Stream: 0x5501, Since: 1e12}}, Pending: 6}

	// The healthy main thread reads the loss: cudaMemcpy waits for the
	// compute stream, which waits for the all-reduces on the comm stream.
	mainPy := trainPy("train_step", runPy, 527, "read_loss", runPy, 531, "memcpy_d2h", runPy, 228)
	mainInner := concat(ctypesCall, native("cudaMemcpy", cudart, "fg_wait_counter", cudart), condWait)
	compute := concat(native("fg_stream_wait_event", cudart, "fg_wait_counter", cudart), condWait)
	comm := concat(native("ncclDevKernel_Generic", nccl, "nccl_wait_peers", nccl), timedWait)
	if fault == "skip-collective" {
		// The skipping rank's loss all-reduce met the others' first bucket:
		// they wait for data it never sends.
		comm = concat(native("ncclDevKernel_Generic", nccl, "nccl_wait_peer_data", nccl), timedWait)
	}
	idle := condWait
	loader := thread(pid+5, "dataloader", "S", threadOuter,
		py(append(bootstrap, "run", runPy, 444, "put", queuePy, 140, "wait", thrPy, 320)...), lockWait)
	var extra []stack.Thread

	switch kind {
	case "skip-collective":
		// Skipped the two bucket all-reduces of step 3: issued only the loss's.
		issued, completed = lastSeq-2, lastSeq-3
		f.Hang.Oldest.Seq = lastSeq - 2
		comm = concat(native("ncclDevKernel_Generic", nccl, "nccl_wait_peers", nccl), timedWait)
	case "kernel-hang":
		// flash_attn_bwd_kernel never ends; the comm stream waits for it.
		f.State = "R (running)"
		f.Hang.Oldest = &dumpfile.Op{Kind: "kernel", Vendor: "cuda", Stream: 0x5501, TID: pid, Issued: 0.99e12,
			Kernel: "flash_attn_bwd_kernel", Grid: [3]uint32{108, 1, 1}, Block: [3]uint32{256, 1, 1}}
		f.Hang.Pending = 9
		compute = native("fg_run_kernel", cudart, "flash_attn_bwd_kernel", kernels, "fake_kernel_body", kernels,
			"fake_kernel_spin_forever", kernels, "nanosleep", libc)
		comm = concat(native("fg_stream_wait_event", cudart, "fg_wait_counter", cudart), condWait)
	case "python-sleep":
		issued, completed = lastSeq-3, lastSeq-3
		f.Hang = &dumpfile.Hang{Kind: "host", PID: pid, Rank: rank, DetectedAt: 1.3e12, Timeout: 300e9, AgeNs: 305e9}
		mainPy = trainPy("train_step", runPy, 521, "straggle_forever", runPy, 481)
		mainInner = sleepC
		compute, comm = idle, idle
	case "deadlock":
		issued, completed = lastSeq-3, lastSeq-3
		f.Hang, f.Reason = nil, "peer"
		mainPy = trainPy("train_step", runPy, 523, "deadlock_forever", runPy, 476)
		mainInner = lockWait
		compute, comm = idle, idle
		extra = append(extra, thread(pid+6, "ckpt_writer", "S", threadOuter,
			py(append(bootstrap, "run", thrPy, 975, "checkpoint_writer", runPy, 467)...), lockWait))
	case "dataloader":
		issued, completed = lastSeq-3, lastSeq-3
		f.Hang, f.Reason = nil, "peer"
		mainPy = trainPy("train_step", runPy, 515, "next", runPy, 454, "get", queuePy, 171, "wait", thrPy, 320)
		mainInner = lockWait
		compute, comm = idle, idle
		loader = thread(pid+5, "dataloader", "S", threadOuter,
			py(append(bootstrap, "run", runPy, 444, "load", runPy, 449, "read", runPy, 433)...),
			native("os_read", libpy, "_Py_read", libpy, "read", libc))
	case "nccl-stall":
		// Every rank issued step 3's all-reduces; this one's NIC is dead.
		comm = native("ncclDevKernel_Generic", nccl, "fake_net_ib_poll_cq", nccl, "nanosleep", libc)
	case "dstate":
		issued, completed = lastSeq-3, lastSeq-3
		f.State, f.Hang, f.Reason = "D (disk sleep)", nil, "peer"
		f.Errors = []string{"process in state D: not attached, only its state recorded"}
	}
	f.Comms = []dumpfile.CommState{{ID: worldComm, Rank: int32(rank), NRanks: int32(world), Issued: issued, Completed: completed, LastOp: "AllReduce"}}
	if f.Hang != nil {
		f.Hang.Comms = f.Comms
	}
	if f.State[0] == 'D' {
		return f
	}
	watch := thread(pid+4, "pt_nccl_watchdg", "S", threadOuter, py(append(bootstrap, "run", runPy, 412)...), sleepC)
	if rng.IntN(3) == 0 { // caught polling: noise
		watch = thread(pid+4, "pt_nccl_watchdg", "S", threadOuter,
			py(append(bootstrap, "run", runPy, 411, "poll_once", runPy, 418, "<listcomp>", runPy, 418, "query", runPy, 222)...),
			concat(ctypesCall, native("cudaEventQuery", cudart)))
	}
	f.Threads = append([]stack.Thread{
		thread(pid, "python3", "S", mainOuter, mainPy, mainInner),
		thread(pid+1, "gpu-stream0", "S", streamOuter, nil, idle),
		thread(pid+2, "gpu-stream1", "S", streamOuter, nil, compute),
		thread(pid+3, "gpu-stream2", "S", streamOuter, nil, comm),
		watch, loader,
	}, extra...)
	if kind == "kernel-hang" {
		f.Threads[2].State = "R"
	}
	return f
}

// writeFault writes the dumps of a job of world ranks where kind hits
// faulty into dir, and returns their paths.
func writeFault(dir, kind string, world, faulty int) ([]string, error) {
	rng := rand.New(rand.NewPCG(uint64(world), uint64(faulty)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for r := range world {
		k := ""
		if r == faulty {
			k = kind
		}
		p, err := dumpfile.Write(dir, rankFile(k, kind, r, world, rng))
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func faultDir(kind string) string { return filepath.Join("testdata", "faults", kind) }

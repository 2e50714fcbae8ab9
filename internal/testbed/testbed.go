// Package testbed builds and drives the fake GPU testbed of testdata/fakegpu:
// C libraries exporting the CUDA/NCCL and MACA/MCCL names with real stream,
// event, graph and cross-process collective semantics (the CUDA runtime
// loads the driver, libcuda.so.1, at its first call and calls it; host
// waits spin as CUDA's default schedule, see SchedEnv), and run.py, a
// torchrun-like launcher of a fake training job with injectable hangs and
// a launch-bound mode.
package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Fault kinds understood by run.py --fault.
const (
	FaultSkipCollective = "skip-collective"
	FaultKernelHang     = "kernel-hang"
	FaultPythonSleep    = "python-sleep"
	FaultDeadlock       = "deadlock"
	FaultDataloader     = "dataloader"
	// FaultDataloaderWorker blocks, in a read of a pipe nobody writes, the
	// data loader worker process (forked from the rank like PyTorch's
	// DataLoader workers) that makes batch K of rank R; the rank's main
	// thread waits for the batch. It implies --workers 2 unless
	// JobOptions.Workers says otherwise.
	FaultDataloaderWorker = "dataloader-worker"
	FaultNCCLStall        = "nccl-stall"
	// FaultTritonHang: the first launch of step K of rank R, a Triton
	// kernel (triton_poi_fused_add_0) that Python launches through the
	// driver's cuLaunchKernelEx as Triton 3.x does, never ends.
	FaultTritonHang = "triton-hang"
	// FaultGraphHang: every rank replays a captured CUDA graph each step
	// and synchronizes the device; rank R's replay at step K never ends.
	// The graph's kernels make no launch call: only the graph launch and
	// the synchronize (cuCtxSynchronize_v2) are seen.
	FaultGraphHang = "graph-hang"
	// FaultCheckpoint is no hang (not in Faults): rank R saves a
	// checkpoint before the all-reduce of step K for run.py's
	// --checkpoint-seconds (60 by default), through functions shaped as
	// torch.save's, while the others wait in the all-reduce; then it
	// goes on.
	FaultCheckpoint = "checkpoint"
)

// Faults after which the faulty rank's main thread blocks, spinning, in
// a call that is no wait, behind spin_kernel (torch.cuda._sleep's kernel)
// that never ends, launched at the start of the fault step.
const (
	// FaultQueueFull: then a loop of small launches that never
	// synchronizes; the stream's queue fills (QueueDepthEnv) and a launch
	// waits for a slot.
	FaultQueueFull = "queue-full"
	// FaultLaunchBlocking: every rank runs with CUDA_LAUNCH_BLOCKING=1,
	// so the launch of spin_kernel waits for it (and the peers'
	// all-reduces wait inside ncclAllReduce for the faulty rank's).
	FaultLaunchBlocking = "launch-blocking"
	// FaultFreeSync: then a cached block is freed (cudaFree, as
	// torch.cuda.empty_cache()), which waits for the device.
	FaultFreeSync = "free-sync"
)

// Faults lists the fault kinds of the fault matrix.
var Faults = []string{FaultSkipCollective, FaultKernelHang, FaultPythonSleep, FaultDeadlock, FaultDataloader,
	FaultDataloaderWorker, FaultNCCLStall, FaultTritonHang, FaultGraphHang}

// CallFaults lists the faults that block a thread in a call that is no
// wait (issue 39's cells: cmd/internal/e2e, TestBlockedCalls).
var CallFaults = []string{FaultQueueFull, FaultLaunchBlocking, FaultFreeSync}

// DriverFaults are the faults on the CUDA driver's own path (a Triton
// launch): on MACA, which has no driver library in the testbed, they are
// the runtime's kernel-hang under another name.
var DriverFaults = []string{FaultTritonHang}

// SchedEnv names how the fake driver's host waits wait: "spin" (the
// default, as CUDA's default schedule: state R for the whole wait),
// "yield" or "blocking" (a futex sleep). A program's cudaSetDeviceFlags
// wins over it.
const SchedEnv = "XPU_FAKEGPU_SCHED"

// QueueDepthEnv sets how many operations a stream of the fake driver
// holds before a call that queues one more waits for a slot (spinning, as
// the schedule says): 1024 by default, as a GPU's roughly 1,000 pending
// launches.
const QueueDepthEnv = "XPU_FAKEGPU_QUEUE_DEPTH"

// ShmPrefix starts the name of every shared-memory segment of the fake NCCL
// (under /dev/shm without the slash).
const ShmPrefix = "xpufake-"

// Bed is a built testbed.
type Bed struct {
	Root string // testdata/fakegpu, absolute
	Dir  string // Root/build
}

var (
	buildOnce sync.Once
	buildBed  *Bed
	buildErr  error
)

// Build runs make in testdata/fakegpu once per test binary and fails t on error.
func Build(t testing.TB) *Bed {
	t.Helper()
	buildOnce.Do(func() { buildBed, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("build fake gpu testbed: %v", buildErr)
	}
	return buildBed
}

func build() (*Bed, error) {
	root, err := FindRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("make", "-s", "-C", root)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("make -C %s: %w\n%s", root, err, out)
	}
	return &Bed{Root: root, Dir: filepath.Join(root, "build")}, nil
}

// FindRoot returns the absolute path of testdata/fakegpu, found from this
// source file or by walking up from the working directory.
func FindRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "fakegpu")
		if _, err := os.Stat(filepath.Join(root, "Makefile")); err == nil {
			return filepath.Abs(root)
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find testbed: %w", err)
	}
	for {
		root := filepath.Join(dir, "testdata", "fakegpu")
		if _, err := os.Stat(filepath.Join(root, "Makefile")); err == nil {
			return root, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find testbed: no testdata/fakegpu above %s", dir)
		}
		dir = parent
	}
}

// Lib returns the path of a built library, e.g. "libcudart.so.12".
func (b *Bed) Lib(name string) string { return filepath.Join(b.Dir, name) }

// Bin returns the path of a built program, e.g. "launchloop" or "tests/rttest".
func (b *Bed) Bin(name string) string { return filepath.Join(b.Dir, name) }

// RunPy returns the path of run.py.
func (b *Bed) RunPy() string { return filepath.Join(b.Root, "run.py") }

// Private copies the bed's programs and libraries (build/'s plain files) to
// a directory of t's own and returns that bed: a measurement's probes are
// then on files no other tracer of the machine holds probes on (uprobes
// live on the file), which would trap its runs too.
func (b *Bed) Private(t testing.TB) *Bed {
	t.Helper()
	dir := t.TempDir()
	ents, err := os.ReadDir(b.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(b.Dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &Bed{Root: b.Root, Dir: dir}
}

// Package spinwait builds, for tests, a process whose threads wait on a
// fake GPU the way they do on a real one: testdata/spinwait.c, whose
// driver (testdata/cuda.c, built as libcuda.so.1) spins in
// cuCtxSynchronize_v2 and sleeps in cuStreamSynchronize behind a kernel
// that never ends, under a runtime (testdata/rt.c, libcudart.so.13) whose
// cudaDeviceSynchronize calls it. It stands in for the fake GPU testbed's spinning
// synchronize where a test needs no more than those two waits; the usage
// line of spinwait.c lists its modes.
package spinwait

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Program is the built program and its driver.
type Program struct {
	Bin string // spinwait
	Lib string // libcuda.so.1: set SPINWAIT_LIB to it
	RT  string // libcudart.so.13 beside it, whose cudaDeviceSynchronize calls the driver's
}

// Env is the environment entry that points the program at its driver.
func (p Program) Env() string { return "SPINWAIT_LIB=" + p.Lib }

var (
	mu    sync.Mutex
	built Program
)

// Build compiles the program and its driver with gcc, once per test
// binary, into a directory of its own that outlives the test (the
// programs are shared by the tests of one binary).
func Build(t testing.TB) Program {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if built.Bin != "" {
		return built
	}
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "testdata")
	dir, err := os.MkdirTemp("", "spinwait")
	if err != nil {
		t.Fatal(err)
	}
	p := Program{Bin: filepath.Join(dir, "spinwait"), Lib: filepath.Join(dir, "libcuda.so.1"), RT: filepath.Join(dir, "libcudart.so.13")}
	for _, args := range [][]string{
		{"gcc", "-O2", "-g", "-shared", "-fPIC", "-o", p.Lib, filepath.Join(src, "cuda.c")},
		{"gcc", "-O2", "-g", "-shared", "-fPIC", "-o", p.RT, filepath.Join(src, "rt.c"), p.Lib, "-Wl,-rpath," + dir},
		{"gcc", "-O2", "-g", "-pthread", "-o", p.Bin, filepath.Join(src, "spinwait.c"), "-ldl"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	built = p
	return p
}

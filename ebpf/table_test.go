package ebpf

import (
	"slices"
	"testing"

	"github.com/xpu-timer/xpu-timer/timer"
)

func TestPlanReportsMissingPerGroup(t *testing.T) {
	exported := map[string]uint64{"cudaLaunchKernel": 0x100, "cudaEventQuery": 0x200, "ncclAllReduce": 0x300}
	attach, missing := plan(exported)
	var names []string
	for _, p := range attach {
		names = append(names, p.Symbol)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"cudaEventQuery", "cudaLaunchKernel", "ncclAllReduce"}) {
		t.Errorf("attach %v", names)
	}
	for _, m := range []string{"cudaStreamSynchronize", "ncclCommInitRank"} {
		if !slices.Contains(missing, m) {
			t.Errorf("%s not reported missing: %v", m, missing)
		}
	}
	for _, m := range missing {
		if p := probeBySymbol[m]; p.Twin || p.Vendor != timer.VendorCUDA || p.Group == "driver" {
			t.Errorf("%s reported missing", m)
		}
	}
}

func TestProbeCookies(t *testing.T) {
	p := probeBySymbol["mcclReduceScatter"]
	if p.Vendor != timer.VendorMACA || p.Cookie() != uint64(timer.VendorMACA)|uint64(timer.OpReduceScatter)<<8 {
		t.Errorf("mcclReduceScatter: %+v cookie %#x", p, p.Cookie())
	}
	if q := probeBySymbol["cudaEventQuery"]; q.Exit != "call_exit" || q.Arg != uint8(timer.KindEventQuery) {
		t.Errorf("cudaEventQuery: %+v", q)
	}
	for _, n := range []string{"cudaLaunchKernel_ptsz", "cudaMemcpy_ptds", "cuLaunchKernel", "ncclCommSplit", "mcLaunchKernel"} {
		if _, ok := probeBySymbol[n]; !ok {
			t.Errorf("no probe for %s", n)
		}
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

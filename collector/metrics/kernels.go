package metrics

import (
	"cmp"
	"slices"
	"strings"
)

// Kernel classes: the values of the "class" label of
// xpu_timer_kernel_duration_seconds. A process may run a thousand distinct
// kernels; their names as labels would make millions of series across a
// large job, so kernels are grouped into these classes (xpu_timer does the
// same), and only the top N by time are named (Exporter.SetTopKernels).
const (
	ClassMatmul      = "matmul"
	ClassAttention   = "attention"
	ClassCollective  = "collective"
	ClassElementwise = "elementwise"
	ClassCopy        = "copy"
	ClassOther       = "other"
)

// classRules are tried in order on the lower-cased kernel name: the first
// class with a matching substring wins (so "ncclDevKernel_AllReduce" is a
// collective, not a reduction, and "flash_fwd_gemm" attention, not matmul).
var classRules = []struct {
	class string
	subs  []string
}{
	{ClassCollective, []string{"nccl", "mccl", "rccl", "allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter", "alltoall", "all_to_all", "sendrecv"}},
	{ClassAttention, []string{"flash", "attention", "attn", "fmha", "mha_", "sdpa"}},
	{ClassMatmul, []string{"gemm", "gemv", "matmul", "bmm", "cublas", "cutlass", "xmma", "wgmma", "hgmma", "conv"}},
	{ClassCopy, []string{"memcpy", "memset", "copy", "transpose", "gather", "scatter", "index", "cat_"}},
	{ClassElementwise, []string{"elementwise", "vectorized", "unrolled", "reduce", "fill", "norm", "softmax", "gelu", "relu", "silu", "swiglu", "dropout", "adam", "sgd", "foreach", "rotary", "rope", "embedding", "activation", "sigmoid", "tanh"}},
}

// KernelClass returns the class of a (demangled) kernel name.
func KernelClass(name string) string {
	lower := strings.ToLower(name)
	for _, r := range classRules {
		for _, s := range r.subs {
			if strings.Contains(lower, s) {
				return r.class
			}
		}
	}
	return ClassOther
}

// kernelSeries is one series of xpu_timer_kernel_duration_seconds.
type kernelSeries struct {
	class, kernel string // kernel "" for the class's kernels not named
	d             Durations
}

// kernelSeriesOf groups a rank's kernels into classes, naming the top
// kernels by total time separately (their time is not in the class's
// unnamed series, so sums over a class stay right).
func kernelSeriesOf(ks []Kernel, top int) []kernelSeries {
	named := map[string]bool{}
	if top > 0 {
		byName := mergeKernels(ks)
		slices.SortStableFunc(byName, func(a, b mergedKernel) int {
			return cmp.Or(cmp.Compare(b.d.Sum, a.d.Sum), strings.Compare(a.name, b.name))
		})
		for _, k := range byName[:min(top, len(byName))] {
			named[k.name] = true
		}
	}
	idx := map[[2]string]int{}
	var out []kernelSeries
	for _, k := range ks {
		name := orUnknown(k.Name)
		key := [2]string{KernelClass(name), ""}
		if named[name] {
			key[1] = name
		}
		if i, ok := idx[key]; ok {
			out[i].d = addDurations(out[i].d, k.Durations)
			continue
		}
		idx[key] = len(out)
		out = append(out, kernelSeries{class: key[0], kernel: key[1], d: k.Durations})
	}
	return out
}

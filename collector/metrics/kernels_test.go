package metrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
)

func TestKernelClass(t *testing.T) {
	for name, want := range map[string]string{
		"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": ClassCollective,
		"ncclKernel_ReduceScatter_RING_SIMPLE_Sum_float":                             ClassCollective,
		"flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false>>":          ClassAttention,
		"fmha_cutlassF_bf16_aligned_64x64_rf_sm80":                                   ClassAttention,
		"pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel":                ClassAttention,
		"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64":                ClassMatmul,
		"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn":                ClassMatmul,
		"cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu>":                  ClassMatmul,
		"gemm_bf16_kernel": ClassMatmul,
		"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>": ClassElementwise,
		"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>":                   ClassElementwise,
		"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>":           ClassElementwise,
		"void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>":     ClassCopy,
		"[CUDA memcpy HtoD]": ClassCopy,
		"void at::native::(anonymous namespace)::CatArrayBatchedCopy<float>": ClassCopy,
		"void at::native::index_elementwise_kernel<128, 4>":                  ClassCopy,
		"my_custom_kernel": ClassOther,
		"":                 ClassOther,
	} {
		if got := KernelClass(name); got != want {
			t.Errorf("KernelClass(%q) = %s, want %s", name, got, want)
		}
	}
}

// busyRank is a rank the way the agent reports one (durations without
// buckets), running n distinct kernels across every class and the
// collectives of FSDP training in bf16, small and large.
func busyRank(rank, n int) Rank {
	prefixes := []string{"sm90_xmma_gemm_bf16_", "ampere_fp16_s16816gemm_", "flash_fwd_kernel_", "ncclDevKernel_AllGather_",
		"vectorized_elementwise_kernel_", "CatArrayBatchedCopy_", "my_kernel_"}
	r := Rank{Rank: rank, LocalRank: rank % 8, PID: 1000 + rank, PendingOps: 3, OldestAgeSeconds: 0.01,
		GPU: &dumpfile.GPU{Index: rank % 8, UUID: fmt.Sprintf("GPU-%d", rank), Utilization: 90, MemoryUsed: 1 << 30, MemoryTotal: 80 << 30}}
	for i := range n {
		k := Kernel{Name: fmt.Sprintf("%s%d", prefixes[i%len(prefixes)], i),
			Durations: Durations{Count: uint64(i + 1), Sum: float64(i+1) * 1e-4, Min: 1e-4, Max: 1e-4, Avg: 1e-4, P99: 1e-4}}
		if KernelClass(k.Name) == ClassMatmul {
			k.Operation, k.DType = "Matmul", map[bool]string{true: "bf16", false: "fp16"}[i%len(prefixes) == 0]
		}
		r.Kernels = append(r.Kernels, k)
	}
	for _, op := range []string{"AllReduce", "AllGather", "ReduceScatter"} {
		for _, small := range []bool{false, true} {
			r.Collectives = append(r.Collectives, Collective{Operation: op, DType: "bf16", Small: small, BusBandwidth: 1e10,
				Durations: Durations{Count: 10, Sum: 0.01, Min: 1e-3, Max: 1e-3, Avg: 1e-3, P99: 1e-3}})
		}
	}
	return r
}

// seriesPerRank counts the series of each rank label value in one scrape
// (a histogram counts one series per bucket, plus _sum and _count).
func seriesPerRank(t *testing.T, g prometheus.Gatherer) map[string]int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			rank := ""
			for _, l := range m.Label {
				if l.GetName() == "rank" {
					rank = l.GetValue()
				}
			}
			if rank == "" {
				continue
			}
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				n[rank] += len(m.Histogram.Bucket) + 3 // buckets, +Inf, _sum, _count
				for _, b := range m.Histogram.Bucket {
					if b.GetUpperBound() > 1e308 {
						n[rank]-- // +Inf given as a bucket
					}
				}
			default:
				n[rank]++
			}
		}
	}
	return n
}

func TestSeriesPerRankBounded(t *testing.T) {
	const ranks, limit, top = 8, 100, 10
	snap := func(kernels int) Snapshot {
		var s Snapshot
		for r := range ranks {
			s.Ranks = append(s.Ranks, busyRank(r, kernels))
		}
		return s
	}
	x := New(testStatic)
	x.SetSource(func() Snapshot { return snap(7) })
	few := seriesPerRank(t, x.Gatherer())
	x.SetSource(func() Snapshot { return snap(1024) })
	many := seriesPerRank(t, x.Gatherer())
	if len(many) != ranks {
		t.Fatalf("series of %d ranks, want %d", len(many), ranks)
	}
	for r, n := range many {
		if n > limit {
			t.Errorf("rank %s: %d series with 1024 kernel names, want at most %d", r, n, limit)
		}
		if n != few[r] {
			t.Errorf("rank %s: %d series with 1024 kernel names, %d with 7: the count follows the names", r, n, few[r])
		}
	}
	t.Logf("series per rank by default: %d (7 or 1024 kernel names)", many["0"])

	x.SetTopKernels(top)
	named := seriesPerRank(t, x.Gatherer())
	for r, n := range named {
		if n != many[r]+top*3 {
			t.Errorf("rank %s with the top %d kernels named: %d series, want %d", r, top, n, many[r]+top*3)
		}
	}
}

// Naming the top kernels moves their time out of their class's unnamed
// series: the sum over a class is the same either way.
func TestTopKernelsKeepClassSums(t *testing.T) {
	r := busyRank(0, 100)
	sums := func(top int) (map[string]float64, map[string]bool) {
		s, names := map[string]float64{}, map[string]bool{}
		for _, k := range kernelSeriesOf(r.Kernels, top) {
			s[k.class] += k.d.Sum
			if k.kernel != "" {
				names[k.kernel] = true
			}
		}
		return s, names
	}
	plain, none := sums(0)
	withTop, names := sums(3)
	if len(none) != 0 || len(names) != 3 {
		t.Fatalf("named %v by default, %v with top 3", none, names)
	}
	// The three kernels with the most time are the last three.
	for _, i := range []int{97, 98, 99} {
		if !names[r.Kernels[i].Name] {
			t.Errorf("top 3 %v lack %s", names, r.Kernels[i].Name)
		}
	}
	for c, v := range plain {
		if d := withTop[c] - v; d > 1e-9 || d < -1e-9 {
			t.Errorf("class %s: sum %g with top kernels named, %g without", c, withTop[c], v)
		}
	}
}

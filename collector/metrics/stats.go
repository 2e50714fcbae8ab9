package metrics

import (
	"strings"

	"github.com/xpu-timer/xpu-timer/timer"
)

// durations is a summary of the engine's, in seconds.
func durations(sm timer.Summary) Durations {
	return Durations{Count: sm.Count, Sum: float64(sm.SumNs) / 1e9,
		Min: float64(sm.MinNs) / 1e9, Max: float64(sm.MaxNs) / 1e9, Avg: sm.MeanNs() / 1e9, P99: float64(sm.P99Ns) / 1e9}
}

// KernelsOf is the series of the engine's kernel statistics of a rank:
// each kernel's best window, a matrix multiply named by its operation
// and data type.
func KernelsOf(ks []timer.KernelStat) []Kernel {
	var out []Kernel
	for _, k := range ks {
		mk := Kernel{Name: k.Name, Durations: durations(k.Best())}
		lower := strings.ToLower(k.Name)
		if strings.Contains(lower, "gemm") || strings.Contains(lower, "matmul") {
			mk.Operation = "Matmul"
			mk.DType = dtypeOfName(lower)
		}
		out = append(out, mk)
	}
	return out
}

// CollectivesOf is the series of the engine's collective statistics of a
// rank, data types spelled as xpu_timer's labels do.
func CollectivesOf(cs []timer.CollStat) []Collective {
	var out []Collective
	for _, c := range cs {
		out = append(out, Collective{Operation: c.Key.Op, DType: shortDtype(c.Key.Dtype),
			Durations: durations(c.Best()), BusBandwidth: c.BusBWGbps * 1e9 / 8, Small: c.Key.SizeClass < 1<<20})
	}
	return out
}

// shortDtype spells NCCL data types the way xpu_timer's labels do.
func shortDtype(d string) string {
	switch d {
	case "bfloat16":
		return "bf16"
	case "float16":
		return "fp16"
	case "float32":
		return "fp32"
	case "float64":
		return "fp64"
	case "float8e4m3":
		return "fp8_e4m3"
	case "float8e5m2":
		return "fp8_e5m2"
	}
	return d
}

// dtypeOfName is the data type a kernel's lower-cased name spells.
func dtypeOfName(n string) string {
	for _, d := range []string{"bf16", "fp16", "fp32", "fp8", "tf32"} {
		if strings.Contains(n, d) {
			return d
		}
	}
	return "unknown"
}

package ebpf

import "testing"

// A kernel's kept name is demangled; cut by the probe, it reads as far as
// it goes; a name that fits is left to the demangler alone.
func TestKeptName(t *testing.T) {
	kept := func(s string) []byte {
		b := make([]byte, 128)
		copy(b, s)
		return b
	}
	cut := "_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_0c5b6e8543distribution_elementwise_grid_stride_kernelIfLi4EZNS0_9t"
	if len(cut) != 127 {
		t.Fatalf("the H100's cut name is %d bytes, want 127", len(cut))
	}
	for _, c := range []struct{ in, want string }{
		{cut, "at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<…>"},
		{"_ZN2at4cuda12_GLOBAL__N_111spin_kernelEl", "at::cuda::(anonymous namespace)::spin_kernel"},
		{"_ZN2at6native29vectorized_elementwise_ker", "_ZN2at6native29vectorized_elementwise_ker"}, // not cut: not ours to guess
		{"triton_poi_fused_add_0", "triton_poi_fused_add_0"},
	} {
		if got := keptName(kept(c.in)); got != c.want {
			t.Errorf("keptName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

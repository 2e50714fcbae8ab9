package symbols

import "testing"

// A mangled name cut short reads as far as its components go.
func TestDemanglePrefix(t *testing.T) {
	for _, c := range []struct {
		raw, want string
		ok        bool
	}{
		// the H100's DDP hang, as the probe kept it (127 bytes)
		{"_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_0c5b6e8543distribution_elementwise_grid_stride_kernelIfLi4EZNS0_9t",
			"at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<…>", true},
		{"_ZN2at6native29vectorized_elementwise_ker", "at::native::vectorized_elementwise_ker…", true},
		{"_ZNSt6vector", "std::vector…", true},
		{"_ZN5cudnn3ops4gemmE", "cudnn::ops::gemm", true},
		{"_ZNK3foo3barEv", "foo::bar", true},
		{"_Z11spin_kernelIiEvT_", "spin_kernel<…>", true},
		{"_Z11spin_kernell", "spin_kernel", true},
		{"_Z11spin_ke", "spin_ke…", true},
		{"_ZN", "", false},
		{"_Z", "", false},
		{"triton_poi_fused_add_0", "", false},
	} {
		got, ok := DemanglePrefix(c.raw)
		if got != c.want || ok != c.ok {
			t.Errorf("DemanglePrefix(%q) = %q, %v; want %q, %v", c.raw, got, ok, c.want, c.ok)
		}
	}
}

package viewer

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRealGPU reads dumps of real hangs on an H100 (testdata/gpu): the
// report names the rank with GPU work past the timeout, says on what
// evidence, and never blames ranks that only wait for it.
func TestRealGPU(t *testing.T) {
	for _, tc := range []struct {
		dir     string
		culprit []int
		want    []string
		absent  []string
	}{
		{"h100-ddp-gloo-rank2-kernel", []int{2}, []string{
			"Likely culprit: rank 2\n",
			"rank 2 hangs in kernel at::cuda::(anonymous namespace)::spin_kernel (stream 0x0, not a collective), while ranks 0-1/3 are not hung on GPU work and wait in gloo collective [a kernel outstanding 11s, past the 10s timeout]",
			"Waiting, not blamed: ranks 0-1/3, their stacks inside a gloo collective",
		}, []string{"[host]", "evidence is thin"}},
		{"h100-ddp-gloo-rank2-late-agent", []int{2}, []string{
			"Likely culprit: rank 2\n",
			"rank 2 waits on the GPU in cuStreamSynchronize (thread 4157, seen on its stack), while ranks 0-1/3 are not hung on GPU work and wait in gloo collective [a GPU wait of 10s on its native stacks, past the 10s timeout]",
		}, []string{"evidence is weak", "evidence is thin"}},
		{"h100-nccl1-kernel", []int{0}, []string{
			"Likely culprit: rank 0\n",
			"rank 0 hangs in kernel 0x167e5680 (stream 0x0, not a collective) [a kernel outstanding 11s, past the 10s timeout]",
		}, []string{"evidence is thin"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			res, err := Run(Options{Dir: filepath.Join("testdata", "gpu", tc.dir), Out: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Report.Culprits, tc.culprit) || res.Report.Thin {
				t.Errorf("culprits %v (thin %v), want %v\n%s", res.Report.Culprits, res.Report.Thin, tc.culprit, res.Summary)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Summary, w) {
					t.Errorf("summary lacks %q:\n%s", w, res.Summary)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(res.Summary, a) {
					t.Errorf("summary has %q:\n%s", a, res.Summary)
				}
			}
		})
	}
}

package dumpfile

import (
	"strings"
	"testing"
)

// The hang line names the oldest kernel by its name, or else by its handle:
// a kernel launched through a handle whose lookup came before the tracer
// (attached late) still has an identity there.
func TestTextOldestKernel(t *testing.T) {
	for _, c := range []struct {
		op   Op
		want string
	}{
		{Op{Kind: "kernel", Kernel: "triton_poi_fused_add_0", Func: 0x5a00, Stream: 0x10, TID: 7},
			"  oldest: kernel triton_poi_fused_add_0 on stream 0x10, thread 7\n"},
		{Op{Kind: "kernel", Func: 0x167e5680, TID: 886}, "  oldest: kernel 0x167e5680 on stream 0x0, thread 886\n"},
		{Op{Kind: "memcpy", Stream: 0x20, TID: 9}, "  oldest: memcpy on stream 0x20, thread 9\n"},
	} {
		op := c.op
		got := Text(&File{Hang: &Hang{Kind: "gpu", Oldest: &op}})
		if !strings.Contains(got, c.want) {
			t.Errorf("%+v: no %q in\n%s", c.op, c.want, got)
		}
	}
}

// Several awaited ops: the text names the newest and how many there are.
func TestTextNewest(t *testing.T) {
	fill := Op{Kind: "kernel", Kernel: "fill", Stream: 0x10, TID: 7}
	spin := Op{Kind: "kernel", Kernel: "spin_on_flag", Stream: 0x10, TID: 7}
	got := Text(&File{Hang: &Hang{Kind: "gpu", Oldest: &fill, Newest: &spin, Awaited: 3}})
	for _, want := range []string{
		"  oldest: kernel fill on stream 0x10, thread 7\n",
		"  3 awaited ops not known complete",
		"  newest: kernel spin_on_flag on stream 0x10, thread 7\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	if got := Text(&File{Hang: &Hang{Kind: "gpu", Oldest: &fill, Awaited: 1}}); strings.Contains(got, "newest") {
		t.Errorf("one awaited op, yet a newest:\n%s", got)
	}
}

package dumpfile

import (
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/timer"
)

// The hang line names the oldest kernel by its name, or else by its handle:
// a kernel launched through a handle whose lookup came before the tracer
// (attached late) still has an identity there.
func TestTextOldestKernel(t *testing.T) {
	for _, c := range []struct {
		op   timer.Op
		want string
	}{
		{timer.Op{Kind: "kernel", Kernel: "triton_poi_fused_add_0", Func: 0x5a00, Stream: 0x10, TID: 7},
			"  oldest: kernel triton_poi_fused_add_0 on stream 0x10, thread 7\n"},
		{timer.Op{Kind: "kernel", Func: 0x167e5680, TID: 886}, "  oldest: kernel 0x167e5680 on stream 0x0, thread 886\n"},
		{timer.Op{Kind: "memcpy", Stream: 0x20, TID: 9}, "  oldest: memcpy on stream 0x20, thread 9\n"},
	} {
		op := c.op
		got := Text(&File{Hang: &timer.Hang{Kind: "gpu", Oldest: &op}})
		if !strings.Contains(got, c.want) {
			t.Errorf("%+v: no %q in\n%s", c.op, c.want, got)
		}
	}
}

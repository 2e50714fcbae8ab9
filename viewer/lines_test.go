package viewer

import (
	"slices"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

// Real captures symbolize native frames with source lines, so a frame's key
// names its source file, not its library: the C library tip and the
// collective library must still be told by the frame's module. Here the
// communication thread of rank 2 polls a dead NIC while the others wait for
// peers, each caught at a different libc frame of the same wait.
func TestFramesWithSourceLines(t *testing.T) {
	dir := t.TempDir()
	tips := [][]stack.Frame{
		{{Func: "__futex_abstimed_wait_common64", File: "nptl/futex-internal.c", Line: 57, Module: libc, Addr: 1}},
		{{Func: "__futex_abstimed_wait_common64", File: "nptl/futex-internal.c", Line: 57, Module: libc, Addr: 1},
			{Func: "__GI___futex_abstimed_wait_cancelable64", File: "nptl/futex-internal.c", Line: 139, Module: libc, Addr: 2}},
		{{Func: "__GI___clock_nanosleep", File: "../sysdeps/unix/sysv/linux/clock_nanosleep.c", Line: 48, Module: libc, Addr: 3}},
	}
	for r := range 4 {
		coll := []stack.Frame{
			{Func: "nccl_wait_peers", File: "src/nccl.c", Line: 120, Module: nccl, Addr: 10},
			{Func: "run_coll", File: "src/nccl.c", Line: 181, Module: nccl, Addr: 11},
		}
		tip := tips[r%2]
		if r == 2 {
			coll = []stack.Frame{
				{Func: "fake_net_ib_poll_cq", File: "src/nccl.c", Line: 141, Module: nccl, Addr: 12},
				{Func: "run_coll", File: "src/nccl.c", Line: 176, Module: nccl, Addr: 13},
			}
			tip = tips[2]
		}
		outer := []stack.Frame{
			{Func: "fg_executor_main", File: "src/runtime.c", Line: 144, Module: cudart, Addr: 20},
			{Func: "start_thread", File: "nptl/pthread_create.c", Line: 442, Module: libc, Addr: 21},
		}
		f := &dumpfile.File{Rank: r, WorldSize: 4, PID: 100 + r, State: "S (sleeping)", Reason: "hang",
			Threads: []stack.Thread{{TID: 200 + r, Name: "gpu-stream1", Native: append(append(append([]stack.Frame{}, tip...), coll...), outer...)}}}
		if _, err := dumpfile.Write(dir, f); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Run(Options{Dir: dir, Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Report
	if len(rep.Groups) != 2 || !slices.Equal(rep.Groups[0].Ranks, []int{0, 1, 3}) {
		t.Errorf("groups %+v, want ranks 0/1/3 together (their stacks differ only in the libc tip)", rep.Groups)
	}
	if len(rep.Culprits) != 1 || rep.Culprits[0] != 2 {
		t.Fatalf("culprits %v, want [2]:\n%s", rep.Culprits, res.Summary)
	}
	var kinds []string
	for _, f := range rep.Findings {
		kinds = append(kinds, f.Kind.String())
	}
	if len(kinds) != 1 || kinds[0] != "stack" || !strings.Contains(rep.Why, "fake_net_ib_poll_cq@nccl.c:141") ||
		strings.Contains(rep.Why, "futex") {
		t.Fatalf("findings %v, why %q: want one stack finding naming the poll, not the libc tip", kinds, rep.Why)
	}
}

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

// libcPath is the C library every rank of the testbed maps.
const libcPath = "/usr/lib/x86_64-linux-gnu/libc.so.6"

// libcUprobe attaches, for the test's life, an empty uprobe program on
// the libc function sym in every process, as monitoring agents on
// production nodes do (the step-0 race of issue 27 showed under one on
// getpid): another uprobe on the node slows every rank's calls and the
// kernel's uprobe paths beside ours. XPU_TIMER_MATRIX_LIBC_UPROBE names
// sym for TestFaultMatrix (empty: none).
func libcUprobe(t testing.TB, sym string) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "noise",
		Type:         ebpf.Kprobe,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load the libc uprobe program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	ex, err := link.OpenExecutable(libcPath)
	if err != nil {
		t.Fatalf("open %s: %v", libcPath, err)
	}
	l, err := ex.Uprobe(sym, prog, nil)
	if err != nil {
		t.Fatalf("uprobe %s in %s: %v", sym, libcPath, err)
	}
	t.Cleanup(func() { l.Close() })
	return prog
}

// matrixNoise attaches what XPU_TIMER_MATRIX_LIBC_UPROBE asks for and
// says so, for the matrix's table.
func matrixNoise(t testing.TB) string {
	sym := strings.TrimSpace(os.Getenv("XPU_TIMER_MATRIX_LIBC_UPROBE"))
	if sym == "" {
		return ""
	}
	libcUprobe(t, sym)
	return fmt.Sprintf("with an empty uprobe on libc's %s in every process", sym)
}

// The helper's program runs when a process calls the function: its run
// count (kernel BPF statistics) rises by a Python's os.getpid().
func TestLibcUprobeRuns(t *testing.T) {
	privileged.Root(t)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatalf("enable BPF statistics: %v", err)
	}
	defer stats.Close()
	prog := libcUprobe(t, "getpid")
	runs := func() uint64 {
		st, err := prog.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.RunCount
	}
	before := runs()
	if out, err := exec.Command("python3", "-c", "import os; os.getpid()").CombinedOutput(); err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	if after := runs(); after <= before {
		t.Fatalf("the uprobe on getpid ran %d times before a process called it and %d after", before, after)
	}
}

package procfs

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestParseSyscall(t *testing.T) {
	for _, c := range []struct {
		in   string
		pc   uint64
		okay bool
	}{
		{"230 0x1 0x1 0x7fffba34f3f0 0x0 0x0 0x0 0x7fffba34f3d8 0x7fc01045c503\n", 0x7fc01045c503, true},
		{"-1 0x7ffd5c3c1a28 0x401136\n", 0x401136, true},
		{"running\n", 0, false},
		{"", 0, false},
		{"230 0x1 0x1 0x0 0x0 0x0 0x0 0x7fff 0x0", 0, false}, // no address
		{"230 0x1 0x1 0x0 0x0 0x0 0x0 0x7fff 7fc0", 0, false}, // no 0x
		{"x 0x7fff 0x401136", 0, false},
		{"-1 0x7fff 0x401136 0x5", 0, false},
		{"-1 0x7fff 0xffffffffffffffffff", 0, false}, // too wide
	} {
		pc, ok := ParseSyscall([]byte(c.in))
		if pc != c.pc || ok != c.okay {
			t.Errorf("ParseSyscall(%q) = %#x, %v; want %#x, %v", c.in, pc, ok, c.pc, c.okay)
		}
	}
}

// TestSyscallPC reads the file of a child asleep in nanosleep: its PC lies
// in an executable mapping of the child. Reading another process's file
// needs the right to trace it: a child of ours, as root or not.
func TestSyscallPC(t *testing.T) {
	if _, ok := SyscallPC(os.Getpid(), 1<<30); ok {
		t.Error("SyscallPC of no thread succeeded")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	var pc uint64
	var ok bool
	for deadline := time.Now().Add(10 * time.Second); !ok; {
		if st, err := ReadStat(pid); err == nil && st.State == 'S' {
			pc, ok = SyscallPC(pid, pid)
		}
		if !ok && time.Now().After(deadline) {
			t.Fatalf("no PC of sleeping %d", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	maps, err := Maps(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Exec() && m.Start <= pc && pc < m.End {
			t.Logf("pc %#x in %s", pc, m.Path)
			return
		}
	}
	t.Errorf("pc %#x of sleeping %d in no executable mapping", pc, pid)
}

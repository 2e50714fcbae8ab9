package caps

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNumbers(t *testing.T) {
	for _, c := range []struct{ ours, unix int }{
		{SysPtrace, unix.CAP_SYS_PTRACE}, {SysAdmin, unix.CAP_SYS_ADMIN}, {Perfmon, unix.CAP_PERFMON}, {BPF, unix.CAP_BPF},
	} {
		if c.ours != c.unix {
			t.Errorf("capability %d, unix says %d", c.ours, c.unix)
		}
	}
}

// Self agrees with the kernel's own account in /proc/self/status.
func TestSelfMatchesStatus(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			want, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no CapEff in /proc/self/status")
	}
	e, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	for c := range 64 {
		if got := e.Has(c); got != (want&(1<<c) != 0) {
			t.Errorf("capability %d: Has %v, CapEff %#x", c, got, want)
		}
	}
}

func TestHasOutOfRange(t *testing.T) {
	e := Effective{^uint32(0), ^uint32(0)}
	if e.Has(-1) || e.Has(64) || !e.Has(0) || !e.Has(63) {
		t.Error("range checks wrong")
	}
}

package procfs

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestParseSched(t *testing.T) {
	s, err := ParseSched([]byte("740303758 2158806286 666\n"))
	if err != nil || s.RunNs != 740303758 || s.Runs != 666 {
		t.Fatalf("%+v %v", s, err)
	}
	for _, bad := range []string{"", "1 2", "a b c", "1 2 3 4", "-1 2 3"} {
		if _, err := ParseSched([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestParseLastRan(t *testing.T) {
	text := "python3 (1, #threads: 1)\n---\nse.exec_start                                :       1907389.663377\nse.vruntime : 1.0\n"
	ns, err := ParseLastRan([]byte(text))
	if err != nil || ns != 1907389663377 {
		t.Fatalf("%d %v", ns, err)
	}
	if ns, err := ParseLastRan([]byte("se.exec_start : 12.5\n")); err != nil || ns != 12500000 {
		t.Errorf("short fraction: %d %v", ns, err)
	}
	for _, bad := range []string{"", "se.exec_start : x.1", "se.exec_start : -3.0", "se.vruntime : 1.0"} {
		if _, err := ParseLastRan([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestParseSleeps(t *testing.T) {
	text := "Name:\tpython3\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t1234\nnonvoluntary_ctxt_switches:\t56\n"
	if n, err := ParseSleeps([]byte(text)); err != nil || n != 1234 {
		t.Fatalf("%d %v", n, err)
	}
	for _, bad := range []string{"", "nonvoluntary_ctxt_switches:\t56\n", "voluntary_ctxt_switches:\tx\n", "voluntary_ctxt_switches:\t-1\n"} {
		if _, err := ParseSleeps([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The calling thread's own files: it runs, so its syscall file says so,
// and its counters are readable.
func TestOwnThread(t *testing.T) {
	pid := os.Getpid()
	s, err := ReadSched(pid, pid)
	if err != nil || s.Runs == 0 {
		t.Fatalf("%+v %v", s, err)
	}
	if _, err := ReadOwnLastRan(); err != nil && !strings.Contains(err.Error(), "exec_start") {
		t.Fatal(err)
	}
	if _, err := ReadSyscall(pid, pid); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSleeps(pid, pid); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSched(1<<30, 1<<30); err == nil {
		t.Error("a missing process read")
	}
}

// Python's time.sleep (clock_nanosleep from 3.11, select with no set
// before) is a sleep for time alone; a futex, a read or a select on a
// socket is not.
func TestTimedSleep(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x86-64 system call numbers")
	}
	for _, c := range []struct {
		site string
		want bool
	}{
		{"230 0x1 0x1 0x7ffc3ad1e4a0 0x0 0x0 0x0 0x7ffc3ad1e478 0x7f0c1e8e4b4a", true},
		{"35 0x7ffc3ad1e4a0 0x0 0x0 0x0 0x0 0x0 0x7ffc3ad1e478 0x7f0c1e8e4b4a", true},
		{"23 0x0 0x0 0x0 0x0 0x7ffd5b8a0f70 0x0 0x7ffd5b8a0f48 0x7f5e0f2d0a9a", true},
		{"23 0x8 0x7ffd5b8a0f70 0x0 0x0 0x7ffd5b8a0f90 0x0 0x7ffd5b8a0f48 0x7f5e0f2d0a9a", false},
		{"7 0x0 0x0 0x3e8 0x0 0x0 0x0 0x7ffd5b8a0f48 0x7f5e0f2d0a9a", true},
		{"7 0x7ffd5b8a0f70 0x1 0x3e8 0x0 0x0 0x0 0x7ffd5b8a0f48 0x7f5e0f2d0a9a", false},
		{"202 0x7f0c1c0008e0 0x189 0x0 0x0 0x0 0xffffffff 0x7ffc3ad1e478 0x7f0c1e8e4b4a", false},
		{"0 0x3 0x7ffc3ad1e4a0 0x1000 0x0 0x0 0x0 0x7ffc3ad1e478 0x7f0c1e8e4b4a", false},
		{"running", false},
		{"", false},
	} {
		if got := TimedSleep(c.site); got != c.want {
			t.Errorf("TimedSleep(%q) = %v, want %v", c.site, got, c.want)
		}
	}
}

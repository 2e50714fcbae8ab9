package procfs

import (
	"os"
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
	if _, err := ReadSched(1<<30, 1<<30); err == nil {
		t.Error("a missing process read")
	}
}

package hugeheap

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/benchtable"
)

func TestMode(t *testing.T) {
	switch m := Mode(); m {
	case "always", "madvise", "never":
	default:
		t.Fatalf("Mode() = %q, want always, madvise or never (this kernel has transparent huge pages)", m)
	}
}

// TestModes reads each mode the kernel can be in, and asks for huge pages
// in "madvise" alone.
func TestModes(t *testing.T) {
	real := Mode()
	defer func(f string) { modeFile = f }(modeFile)
	for _, c := range []struct{ text, mode string }{
		{"[always] madvise never\n", "always"},
		{"always [madvise] never\n", "madvise"},
		{"always madvise [never]\n", "never"},
		{"always madvise never\n", ""},
		{"]madvise[\n", ""},
		{"", ""},
	} {
		modeFile = filepath.Join(t.TempDir(), "enabled")
		if err := os.WriteFile(modeFile, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := Mode(); got != c.mode {
			t.Errorf("Mode() of %q = %q, want %q", c.text, got, c.mode)
		}
		if c.mode != "madvise" && Reserve(16<<20) {
			t.Errorf("Reserve in mode %q asked for huge pages", c.mode)
		}
		if c.mode == "madvise" && real != "" && !Reserve(16<<20) { // a kernel with huge pages
			t.Errorf("Reserve in mode madvise did not ask for huge pages")
		}
	}
	modeFile = filepath.Join(t.TempDir(), "absent")
	if got := Mode(); got != "" {
		t.Errorf("Mode() of no file = %q, want \"\"", got)
	}
}

// vmaOf returns the VmFlags and AnonHugePages (kB) of the mapping of this
// process that holds addr, from /proc/self/smaps.
func vmaOf(t *testing.T, addr uintptr) (flags string, hugeKB int) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			var lo, hi uintptr
			if _, err := fmt.Sscanf(fields[0], "%x-%x", &lo, &hi); err == nil {
				in = lo <= addr && addr < hi
			}
			continue
		}
		if !in || len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "AnonHugePages:":
			hugeKB, _ = strconv.Atoi(fields[1])
		case "VmFlags:":
			return strings.Join(fields[1:], " "), hugeKB
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return "", 0
}

// TestReserve checks that, in mode "madvise", the heap allocations after
// Reserve lie in memory marked for huge pages (VmFlags "hg"), and that
// Reserve asks for nothing in the other modes or for less than a page.
func TestReserve(t *testing.T) {
	if Reserve(page - 1) {
		t.Error("Reserve(less than a huge page) asked for huge pages")
	}
	if m := Mode(); m != "madvise" {
		if Reserve(16 << 20) {
			t.Errorf("Reserve in mode %q asked for huge pages", m)
		}
		return
	}
	if !Reserve(16 << 20) {
		t.Fatal("Reserve in mode madvise did not ask for huge pages")
	}
	b := make([]byte, 4<<20)
	for i := range b {
		b[i] = 1
	}
	// Its middle: the free pages just below the reserved block, outside
	// it, may take its first few (8 KiB of 4 MiB, seen under load).
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b))) + uintptr(len(b)/2)
	flags, huge := vmaOf(t, addr)
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("the heap mapping holding the middle of a 4 MiB slice has VmFlags %q, want hg", flags)
	}
	t.Logf("VmFlags %s; AnonHugePages %d kB", flags, huge)
}

// BenchmarkFault measures what a first touch of fresh anonymous memory
// costs per 4 KiB, in 4 KiB pages and in huge pages asked for as Reserve
// does, and logs the two side by side.
func BenchmarkFault(b *testing.B) {
	if Mode() != "madvise" {
		b.Skipf("transparent huge page mode %q: nothing to compare", Mode())
	}
	const n = 16 << 20
	touch := func(huge bool) time.Duration {
		m, err := unix.Mmap(-1, 0, n+page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Munmap(m)
		start := int(-uintptr(unsafe.Pointer(&m[0])) & (page - 1))
		r := m[start : start+n]
		if huge {
			if err := unix.Madvise(r, unix.MADV_HUGEPAGE); err != nil {
				b.Fatal(err)
			}
		}
		begin := time.Now()
		for i := 0; i < n; i += 4096 {
			r[i] = 1
		}
		return time.Since(begin)
	}
	var small, huge time.Duration
	for b.Loop() {
		small += touch(false)
		huge += touch(true)
	}
	perPage := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) / (n / 4096) }
	if small == 0 || huge == 0 {
		b.Fatal("measured nothing")
	}
	b.ReportMetric(perPage(small), "small-ns/4KiB")
	b.ReportMetric(perPage(huge), "huge-ns/4KiB")
	benchtable.Row(b, "first touch of fresh memory, huge pages vs 4 KiB pages",
		fmt.Sprintf("%.0f ns/4 KiB (huge pages)", perPage(huge)),
		fmt.Sprintf("%.0f ns/4 KiB (4 KiB pages, one fault each)", perPage(small)), perPage(huge)/perPage(small))
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"encoding/binary"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/rawfile"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// A thread blocked in a call with a return probe has the kernel's
// trampoline where the call's return address was; ReturnAddress gives
// back the address the entry program saved, by thread and stack slot, and
// nothing for another slot.
func TestReturnAddress(t *testing.T) {
	bed := testbed.Build(t)
	loop := bed.Bin("launchloop")
	// The driver probed ahead: its probes are then there before the
	// runtime's first call, not attached when ld.so reports the load.
	tr := newTracer(t, Options{Libraries: []string{bed.Lib("libcuda.so.1")}})
	rec := record(t, tr)
	// A blocking synchronize: the helper reads the stack of a thread asleep
	// in a system call, and the testbed's default wait spins.
	p := start(t, "/bin/sh", "-c", `read x; `+testbed.SchedEnv+`=blocking exec "$0" 1 --call hang`, loop)
	if err := tr.Follow(p.pid()); err != nil {
		t.Fatal(err)
	}
	p.send(t, "go")
	p.until(t, "hung")
	rec.waitFor(t, "the synchronize's entry", func(evs []timer.Event, _ []Notice) bool {
		return hasEvent(evs, p.pid(), timer.KindStreamSynchronize)
	})

	// One call in flight with a return probe: the driver's
	// cuStreamSynchronize, which the runtime's cudaStreamSynchronize makes
	// (the runtime is not probed: "One trap per call"). Its return address
	// lies in the runtime.
	tramp := mapping(t, p.pid(), "[uprobes]")
	slots := findWords(t, p.pid(), tramp[0])
	if len(slots) != 1 {
		t.Fatalf("%d trampolines on the stack (%#x), want 1: the driver's synchronize", len(slots), slots)
	}
	text := mapping(t, p.pid(), bed.Lib("libcudart.so.12"))
	ra, ok := tr.ReturnAddress(p.pid(), slots[0])
	if !ok {
		t.Fatalf("no return address at slot %#x", slots[0])
	}
	if ra < text[0] || ra >= text[1] {
		t.Errorf("return address %#x at slot %#x is outside the runtime's code %#x-%#x", ra, slots[0], text[0], text[1])
	}
	slot := slots[0]
	if ra, ok := tr.ReturnAddress(p.pid(), slot+8); ok {
		t.Errorf("a return address %#x at slot %#x, where none was saved", ra, slot+8)
	}
	if ra, ok := tr.ReturnAddress(p.pid()+1, slot); ok {
		t.Errorf("a return address %#x for thread %d, which made no call", ra, p.pid()+1)
	}
}

// mapping is the first executable mapping of pid whose path is path.
func mapping(t *testing.T, pid int, path string) [2]uint64 {
	t.Helper()
	maps, err := procfs.Maps(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		if m.Path == path && m.Exec() {
			return [2]uint64{m.Start, m.End}
		}
	}
	t.Fatalf("no executable mapping of %s in process %d: %+v", path, pid, maps)
	return [2]uint64{}
}

// findWords are the stack addresses of the word v on the stack of pid's
// main thread, from its stack pointer up (/proc/PID/syscall names it while
// the thread blocks in a system call).
func findWords(t *testing.T, pid int, v uint64) []uint64 {
	t.Helper()
	text, err := procfs.ReadSyscall(pid, pid)
	if err != nil {
		t.Fatal(err)
	}
	fs := strings.Fields(text)
	if len(fs) < 9 {
		t.Fatalf("process %d is not in a system call: %q", pid, text)
	}
	sp, err := strconv.ParseUint(strings.TrimPrefix(fs[7], "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	n, _ := rawfile.ReadProcess(pid, sp, buf) // as far as the stack goes
	var out []uint64
	for i := 0; i+8 <= n; i += 8 {
		if binary.LittleEndian.Uint64(buf[i:]) == v {
			out = append(out, sp+uint64(i))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %#x on the stack of process %d within %d bytes above %#x", v, pid, n, sp)
	}
	return out
}

// ReturnAddress looks a thread's stashes up under every key probes.bpf.c
// can give them: a kind (up to K_GROUP_END), or stashBeyondKinds plus one.
func TestStashKeys(t *testing.T) {
	src, err := os.ReadFile("probes.bpf.c")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]uint64{}
	var last uint64
	for _, m := range regexp.MustCompile(`(?m)^\s*(K_\w+) = (\d+),`).FindAllSubmatch(src, -1) {
		v, _ := strconv.ParseUint(string(m[2]), 10, 64)
		kinds[string(m[1])] = v
		if string(m[1]) != "K_CALL" { // stashed under STASH_CALL + its id
			last = max(last, v)
		}
	}
	if last != uint64(probesKindK_GROUP_END) {
		t.Errorf("the last kind is %d, ReturnAddress stops at K_GROUP_END (%d)", last, probesKindK_GROUP_END)
	}
	stashes := regexp.MustCompile(`(?m)^\s*(STASH_\w+) = (\d+)(?: \+ (K_\w+))?,`).FindAllSubmatch(src, -1)
	if len(stashes) == 0 {
		t.Fatal("no STASH_ keys in probes.bpf.c")
	}
	for _, m := range stashes {
		base, _ := strconv.ParseUint(string(m[2]), 10, 64)
		if string(m[1]) == "STASH_CALL" { // a base: STASH_CALL + a call's id
			if base != stashCall || base < stashBeyondKinds+last+1 {
				t.Errorf("STASH_CALL is %d, ReturnAddress looks up %d plus an id (above the others, up to %d)", base, stashCall, stashBeyondKinds+last)
			}
			continue
		}
		k, ok := kinds[string(m[3])]
		if len(m[3]) > 0 && !ok {
			t.Errorf("%s: no kind %s", m[1], m[3])
		}
		if base != stashBeyondKinds || k > last {
			t.Errorf("%s is %d + %d: ReturnAddress looks up %d to %d", m[1], base, k, stashBeyondKinds, stashBeyondKinds+last)
		}
	}
	// Every stash_key names a kind, a STASH_ key, or a kind variable.
	for _, m := range regexp.MustCompile(`stash_key\(pid_tgid, (\w+)\)`).FindAllSubmatch(src, -1) {
		if a := string(m[1]); a != "kind" && !strings.HasPrefix(a, "K_") && !strings.HasPrefix(a, "STASH_") {
			t.Errorf("stash_key(pid_tgid, %s): a key ReturnAddress may not look up", a)
		}
	}
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"os"
	"testing"
)

// Each pid has a bit of its own, neighbours in a word included, and a pid
// out of the kernel's range is refused, not folded onto another's bit.
func TestFollowedSet(t *testing.T) {
	f := &followedSet{words: make([]uint64, followedWords)}
	pids := []int{1, 63, 64, 65, 4096, followedWords*64 - 1}
	for _, pid := range pids {
		if err := f.add(pid); err != nil {
			t.Fatalf("add %d: %v", pid, err)
		}
	}
	for _, pid := range []int{2, 62, 66, 4095, 4097} {
		if f.has(pid) {
			t.Errorf("pid %d is followed; only %v were added", pid, pids)
		}
	}
	f.remove(64)
	for _, pid := range pids {
		if f.has(pid) != (pid != 64) {
			t.Errorf("pid %d: followed %v after removing 64", pid, f.has(pid))
		}
	}
	for _, pid := range []int{0, -1, followedWords * 64, 1 << 40} {
		if err := f.add(pid); err == nil {
			t.Errorf("add %d: no error", pid)
		}
		if f.has(pid) {
			t.Errorf("pid %d out of range is followed", pid)
		}
		f.remove(pid) // no panic
	}
	if f.words[0] != 1<<1|1<<63 || f.words[1] != 1<<1 {
		t.Errorf("words 0 and 1 are %#x %#x", f.words[0], f.words[1])
	}
	// Closed (as by Tracer.Close, beside a Follow): refused, no fault.
	f.words = nil
	if err := f.add(2); err == nil {
		t.Error("add after close: no error")
	}
	if f.has(1) {
		t.Error("pid 1 followed after close")
	}
	f.remove(1)
}

// Follow after Close is refused with an error; it does not write into the
// unmapped set.
func TestFollowAfterClose(t *testing.T) {
	tr := newTracer(t, Options{})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Follow(os.Getpid()); err == nil {
		t.Error("Follow after Close: no error")
	}
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"fmt"
	"os"
	"testing"
)

// Lookups are kept by pid and address: many kernels of several processes
// come back right however their slots collide; a process forgotten is
// forgotten in the kept lookups too; a process that maps code loses the
// kept lookups that named nothing, and keeps the others.
func TestKernelNamesKept(t *testing.T) {
	k := newKernelNames(nil)
	const pids, kernels = 3, 200 // more than recentNames: slots are shared
	name := func(pid, i int) string { return fmt.Sprintf("kernel_%d_%d", pid, i) }
	addr := func(i int) uint64 { return 0x7f0000001000 + uint64(i)*0x40 }
	for pid := 1; pid <= pids; pid++ {
		p := &procNames{names: map[uint64]string{}}
		for i := range kernels {
			p.names[addr(i)] = name(pid, i)
		}
		k.procs[pid] = p
	}
	for round := range 3 {
		for i := range kernels {
			for pid := 1; pid <= pids; pid++ {
				if got := k.lookup(pid, addr(i)); got != name(pid, i) {
					t.Fatalf("round %d: pid %d kernel %d named %q, want %q", round, pid, i, got, name(pid, i))
				}
			}
		}
	}

	k.forget(2) // its maps are gone: unknown pids are looked up afresh and fail
	for i := range kernels {
		if got := k.lookup(2, addr(i)); got != "" {
			t.Fatalf("pid 2, forgotten, still names kernel %d %q", i, got)
		}
	}

	p := k.procs[1]
	unnamed, named := addr(kernels), addr(0)
	p.names[unnamed] = ""
	if got := k.lookup(1, unnamed); got != "" {
		t.Fatalf("unnamed address named %q", got)
	}
	k.lookup(1, named)
	k.mapped(1)
	p.names[unnamed] = "loaded_later" // what the new mapping names
	p.names[named] = "renamed"        // not looked up again: the kept name stands
	if got := k.lookup(1, unnamed); got != "loaded_later" {
		t.Errorf("after the process mapped code, the unnamed address is named %q, want loaded_later", got)
	}
	if got := k.lookup(1, named); got != name(1, 0) {
		t.Errorf("after the process mapped code, a named kernel is %q, want its kept %q", got, name(1, 0))
	}
}

// A handle that stays unnamed keeps the lookups attached one window, not
// for good: each handle counts once per process.
func TestUnnamedCountsOnce(t *testing.T) {
	k := newKernelNames(nil)
	syms, err := k.cache.Process(os.Getpid()) // 0x1000 and 0x2000 are in no mapping of this process
	if err != nil {
		t.Fatal(err)
	}
	k.procs[7] = &procNames{syms: syms, names: map[uint64]string{}}
	if k.lookup(7, 0x1000) != "" || !k.takeUnnamed() {
		t.Fatal("a handle nothing names is not counted")
	}
	if k.lookup(7, 0x1000); k.takeUnnamed() {
		t.Error("the same handle counted again (cached)")
	}
	k.learned() // forgets what named nothing, not what was counted
	if k.lookup(7, 0x1000); k.takeUnnamed() {
		t.Error("the same handle counted again after names were learned")
	}
	if k.lookup(7, 0x2000); !k.takeUnnamed() {
		t.Error("another handle is not counted")
	}
	s := lookupState{lookupLearning, 0}
	for now := int64(0); now <= 10*int64(lookupWindow); now += int64(lookupEvery) {
		k.lookup(7, 0x1000)
		s = nextLookup(s, now, lookupNews{unnamed: k.takeUnnamed()}, int64(lookupWindow))
	}
	if s.phase != lookupQuiet {
		t.Errorf("a handle that stays unnamed kept the lookups %s", s.phase)
	}
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"fmt"
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

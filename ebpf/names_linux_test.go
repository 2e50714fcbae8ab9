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
				if got := k.lookup(pid, addr(i), 0); got != name(pid, i) {
					t.Fatalf("round %d: pid %d kernel %d named %q, want %q", round, pid, i, got, name(pid, i))
				}
			}
		}
	}

	k.forget(2) // its maps are gone: unknown pids are looked up afresh and fail
	for i := range kernels {
		if got := k.lookup(2, addr(i), 0); got != "" {
			t.Fatalf("pid 2, forgotten, still names kernel %d %q", i, got)
		}
	}

	p := k.procs[1]
	unnamed, named := addr(kernels), addr(0)
	p.names[unnamed] = ""
	if got := k.lookup(1, unnamed, 0); got != "" {
		t.Fatalf("unnamed address named %q", got)
	}
	k.lookup(1, named, 0)
	k.mapped(1)
	p.names[unnamed] = "loaded_later" // what the new mapping names
	p.names[named] = "renamed"        // not looked up again: the kept name stands
	if got := k.lookup(1, unnamed, 0); got != "loaded_later" {
		t.Errorf("after the process mapped code, the unnamed address is named %q, want loaded_later", got)
	}
	if got := k.lookup(1, named, 0); got != name(1, 0) {
		t.Errorf("after the process mapped code, a named kernel is %q, want its kept %q", got, name(1, 0))
	}
}

// A handle nothing names is pending until its first launch after the
// lookups' probes came: named then by the lookup made before it, or given
// up on for good; one that launches no more is given up after
// maxPendingAge. Either way it leaves the lookups quiet at last.
func TestPendingHandles(t *testing.T) {
	k := newKernelNames(nil)
	syms, err := k.cache.Process(os.Getpid()) // 0x1000 and up are in no mapping of this process
	if err != nil {
		t.Fatal(err)
	}
	k.procs[7] = &procNames{syms: syms, names: map[uint64]string{}}
	const ms = int64(1e6)
	if k.lookup(7, 0x1000, 10*ms) != "" {
		t.Fatal("named")
	}
	if u, n := k.takeNews(10 * ms); !u || n != 1 {
		t.Fatalf("news %v, %d pending; want a handle pending", u, n)
	}
	k.lookup(7, 0x1000, 20*ms) // the probes are away: still pending
	if u, n := k.takeNews(20 * ms); u || n != 1 {
		t.Fatalf("news %v, %d pending; want the same one pending, no news", u, n)
	}
	k.since.Store(30 * ms)
	k.lookup(7, 0x1000, 30*ms+lookupMargin/2) // too close to the probes' coming
	if _, n := k.takeNews(31 * ms); n != 1 {
		t.Fatalf("%d pending right after the probes came, want 1", n)
	}
	k.lookup(7, 0x1000, 40*ms) // no name in the map: given up
	if u, n := k.takeNews(40 * ms); u || n != 0 {
		t.Fatalf("news %v, %d pending; want it given up", u, n)
	}
	k.learned()
	if k.lookup(7, 0x1000, 50*ms); k.unnamed {
		t.Error("a handle given up on is pending again")
	}
	k.lookup(7, 0x2000, 60*ms) // another, which never launches again
	if _, n := k.takeNews(60 * ms); n != 1 {
		t.Fatalf("%d pending, want the new one", n)
	}
	if _, n := k.takeNews(60*ms + maxPendingAge + 1); n != 0 {
		t.Errorf("%d pending after maxPendingAge", n)
	}
	s := lookupState{lookupLearning, 0}
	for now := 60*ms + maxPendingAge; now <= 60*ms+maxPendingAge+2*int64(lookupWindow); now += int64(lookupEvery) {
		k.lookup(7, 0x1000, now)
		k.lookup(7, 0x2000, now)
		u, n := k.takeNews(now)
		s = nextLookup(s, now, lookupNews{unnamed: u, pending: n}, int64(lookupWindow))
	}
	if s.phase != lookupQuiet {
		t.Errorf("handles given up on kept the lookups %s", s.phase)
	}
	k.forget(7)
	if k.npending != 0 {
		t.Errorf("%d pending after the process was forgotten", k.npending)
	}
}

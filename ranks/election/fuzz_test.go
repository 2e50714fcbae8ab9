package election

import (
	"slices"
	"testing"
)

// fuzzProcesses builds up to 12 processes from data: distinct pids and
// first sightings (as the book gives them), parents among the processes
// built before (so the lineage has no cycle) or unknown, identities from
// a few keys, every flag and an earlier role from the bytes.
func fuzzProcesses(data []byte) []Process {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	n := int(next()%12) + 1
	ps := make([]Process, 0, n)
	for i := range n {
		flags, ids, kin := next(), next(), next()
		p := Process{PID: 100 + i, Seen: uint64(n - i + int(kin>>4)*16)}
		if i > 0 && kin&1 != 0 {
			p.Parent = ps[int(kin>>1)%i].PID
		}
		p.Key = Key{Job: []string{"a", "b"}[ids&1], Rank: int(ids>>1) % 3, World: 4}
		p.Known, p.Env = flags&1 != 0, flags&2 != 0 && flags&1 != 0
		if !p.Known {
			p.Key = Key{Rank: -1}
		}
		p.GPU, p.Comm, p.Python, p.Exited = flags&4 != 0, flags&8 != 0, flags&16 != 0, flags&32 != 0
		switch flags >> 6 {
		case 1:
			p.Role = Shadow
		case 2:
			p.Role = Outside
		case 3:
			if i > 0 {
				p.Role, p.Of = Helper, ps[int(ids>>3)%i].PID
			}
		}
		ps = append(ps, p)
	}
	return ps
}

// The invariants of the election over any set of processes (doc.go):
// one vote per process, the same votes whatever the input order, at most
// one rank per identity, exited and outside processes keep their part, a
// rank shows a sign of one, a process with no known identity is never
// made a helper, wrapper or shadow, and a helper the election makes
// helps a process above it.
func FuzzElect(f *testing.F) {
	f.Add([]byte{3, 7, 2, 0, 7, 2, 3, 23, 2, 5, 19, 2, 1})
	f.Add([]byte{5, 39, 0, 0, 23, 0, 3, 23, 0, 3, 7, 2, 7, 3, 2, 5, 201, 9, 1})
	f.Add([]byte{11, 7, 0, 0, 87, 2, 1, 151, 4, 3, 7, 6, 5, 39, 2, 7, 7, 8, 9, 23, 10, 11, 7, 12, 13})
	f.Fuzz(func(t *testing.T, data []byte) {
		ps := fuzzProcesses(data)
		votes := Elect(slices.Clone(ps))
		if len(votes) != len(ps) {
			t.Fatalf("%d votes for %d processes", len(votes), len(ps))
		}
		byPID := map[int]Vote{}
		for i, v := range votes {
			byPID[ps[i].PID] = v
		}
		// The same votes in other orders.
		for _, order := range [][]Process{reversed(ps), rotated(ps)} {
			for i, v := range Elect(order) {
				if byPID[order[i].PID] != v {
					t.Fatalf("pid %d: %+v in one order, %+v in another; processes %+v", order[i].PID, byPID[order[i].PID], v, ps)
				}
			}
		}
		rankOf := map[Key]int{}
		for i, v := range votes {
			p := ps[i]
			switch {
			case p.Exited && v.Role != Exited, !p.Exited && p.Role == Outside && v.Role != Outside:
				t.Fatalf("pid %d (exited %v, was %v) voted %v", p.PID, p.Exited, p.Role, v.Role)
			case v.Role == Rank && !p.GPU && !p.Comm && !p.Env:
				t.Fatalf("pid %d a rank without a sign of one: %+v", p.PID, p)
			case !p.Known && p.Role != Helper && (v.Role == Helper || v.Role == Wrapper || v.Role == Shadow):
				t.Fatalf("pid %d without identity voted %v", p.PID, v.Role)
			case v.Role == Helper && p.Role != Helper && !above(ps, p, v.Of):
				t.Fatalf("pid %d helps %d, not above it; processes %+v", p.PID, v.Of, ps)
			}
			if v.Role == Rank && p.Known {
				if other, ok := rankOf[p.Key]; ok {
					t.Fatalf("identity %+v has two ranks, %d and %d; processes %+v", p.Key, other, p.PID, ps)
				}
				rankOf[p.Key] = p.PID
			}
		}
	})
}

func rotated(ps []Process) []Process {
	k := len(ps) / 2
	return append(slices.Clone(ps[k:]), ps[:k]...)
}

// above says whether pid is an ancestor of p among ps.
func above(ps []Process, p Process, pid int) bool {
	parent := func(q int) int {
		for _, x := range ps {
			if x.PID == q {
				return x.Parent
			}
		}
		return 0
	}
	for a := range Lineage(parent, p.PID, len(ps)) {
		if a == pid {
			return true
		}
	}
	return false
}

package election

import (
	"iter"
	"slices"
	"strconv"
)

// Role is what a traced process is to the agent (see the package doc).
type Role uint8

const (
	Candidate Role = iota
	Rank
	Helper
	Wrapper
	Shadow
	Outside
	Exited
)

var roleNames = [...]string{"candidate", "rank", "helper", "wrapper", "shadow", "outside", "exited"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Key is an identity: the rank of a job of a world size.
type Key struct {
	Job         string
	Rank, World int
}

// Process is what the agent knows of one traced process.
type Process struct {
	PID    int
	Parent int // the forker (or /proc's parent), 0 when unknown

	Key   Key
	Known bool // Key is the process's own: from its environment or its first communicator
	Env   bool // its environment names a rank

	GPU    bool   // made a GPU call
	Comm   bool   // created a communicator
	Python bool   // runs a Python interpreter
	Seen   uint64 // order in which the agent first knew it

	Exited bool
	// Role is the process's live role after the election before (for an
	// exited process, the one it held when it exited); Candidate for a
	// process new or exec'd since. Of is the rank a Helper helps.
	Role Role
	Of   int
}

// Vote is the role Elect gives a process; Of names the rank a Helper
// helps.
type Vote struct {
	Role Role
	Of   int
}

// likeness is how much p looks like the rank of its identity: it made GPU
// calls or created a communicator (2), it runs Python (1), neither (0).
func (p *Process) likeness() int {
	switch {
	case p.GPU || p.Comm:
		return 2
	case p.Python:
		return 1
	}
	return 0
}

// demoted says whether p is a helper or a wrapper.
func demoted(v Vote) bool { return v.Role == Helper || v.Role == Wrapper }

// Elect gives every process of ps its role; the votes are in ps's order.
// Elect reads ps only.
func Elect(ps []Process) []Vote {
	e := election{byPID: make(map[int]int, len(ps)), ps: ps, votes: make([]Vote, len(ps))}
	for i := range ps {
		e.byPID[ps[i].PID] = i
	}
	groups := map[Key][]int{}
	var order []Key
	for i := range ps {
		p := &ps[i]
		switch {
		case p.Exited:
			e.votes[i] = Vote{Role: Exited}
			continue
		case p.Role == Outside:
			e.votes[i] = Vote{Role: Outside}
			continue
		case p.Role == Helper || p.Role == Wrapper:
			e.votes[i] = Vote{Role: p.Role, Of: p.Of}
		case p.GPU || p.Comm || p.Env:
			e.votes[i] = Vote{Role: Rank}
		default:
			e.votes[i] = Vote{Role: Candidate}
		}
		if p.Known {
			if _, ok := groups[p.Key]; !ok {
				order = append(order, p.Key)
			}
			groups[p.Key] = append(groups[p.Key], i)
		}
	}
	for _, k := range order {
		e.group(k, groups[k])
	}
	return e.votes
}

// election is one run of Elect.
type election struct {
	ps    []Process
	byPID map[int]int // pid -> index in ps
	votes []Vote
}

// group applies the rules to the processes g of identity k.
func (e *election) group(k Key, g []int) {
	// Rule 1: below the exited rank of the identity, a helper of it.
	for _, i := range g {
		if a, ok := e.exitedRankAbove(i, k); ok && !demoted(e.votes[i]) {
			e.votes[i] = Vote{Role: Helper, Of: a}
		}
	}
	if len(g) < 2 {
		return
	}
	// Rule 2: the owner.
	owner := e.owner(g)
	if owner < 0 {
		return // the rank is gone; its helpers and wrappers stay what they were
	}
	// Rule 3: the others.
	o := &e.ps[owner]
	for _, i := range g {
		p := &e.ps[i]
		switch {
		case i == owner:
		case e.descends(i, o.PID):
			e.votes[i] = Vote{Role: Helper, Of: o.PID}
		case e.descends(owner, p.PID) || p.likeness() < o.likeness():
			e.votes[i] = Vote{Role: Wrapper}
		case !demoted(e.votes[i]):
			e.votes[i] = Vote{Role: Shadow}
		}
	}
}

// owner is rule 2's choice among g: of the processes neither helpers
// nor wrappers, those most like a rank; of those, the outer ones (none of
// the others above them); of those, the one known first. A set, not a
// fold over g: the choice never turns on g's order, even where kinship
// and first sight disagree (a child known before its parent). -1: none.
func (e *election) owner(g []int) int {
	most := -1
	var alike []int
	for _, i := range g {
		switch l := e.ps[i].likeness(); {
		case demoted(e.votes[i]), l < most:
		case l > most:
			most, alike = l, append(alike[:0], i)
		default:
			alike = append(alike, i)
		}
	}
	owner, outer := -1, false
	for _, i := range alike {
		o := !slices.ContainsFunc(alike, func(j int) bool { return j != i && e.descends(i, e.ps[j].PID) })
		if owner < 0 || o && !outer || o == outer && e.ps[i].Seen < e.ps[owner].Seen {
			owner, outer = i, o
		}
	}
	return owner
}

// Lineage yields the pids of pid's parent, its parent's, and so on, as
// far as parent (0: unknown, or none) knows them: the last one yielded
// may be a pid parent does not know. At most limit+1 steps, so that pids
// reused into a cycle end the walk.
func Lineage(parent func(pid int) int, pid, limit int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for seen := 0; seen <= limit; seen++ {
			if pid = parent(pid); pid == 0 || !yield(pid) {
				return
			}
		}
	}
}

// parent is ps's parent of pid, 0 when ps lacks pid or its parent.
func (e *election) parent(pid int) int {
	if i, ok := e.byPID[pid]; ok {
		return e.ps[i].Parent
	}
	return 0
}

// lineage is Lineage through the processes of ps, exited ones included.
func (e *election) lineage(i int) iter.Seq[int] {
	return Lineage(e.parent, e.ps[i].PID, len(e.ps))
}

// descends says whether ps[i] is below the process pid.
func (e *election) descends(i, pid int) bool {
	for a := range e.lineage(i) {
		if a == pid {
			return true
		}
	}
	return false
}

// exitedRankAbove returns the nearest exited ancestor of ps[i] that was
// the rank of identity k (not a wrapper, and running Python, the GPU or
// a communicator).
func (e *election) exitedRankAbove(i int, k Key) (pid int, ok bool) {
	for a := range e.lineage(i) {
		j, known := e.byPID[a]
		if !known {
			continue
		}
		q := &e.ps[j]
		if q.Exited && q.Role != Wrapper && q.likeness() > 0 && q.Known && q.Key == k {
			return a, true
		}
	}
	return 0, false
}

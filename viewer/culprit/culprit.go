// Package culprit reads every rank's dump and says which ranks are behind
// the rest, in the words of NCCL's RAS service: per communicator the
// collective sequence numbers each rank issued and completed, the ranks that
// never issued what the others wait in, ranks hung in a kernel while the
// others wait in a collective, ranks silent on the host, ranks in state D,
// ranks with no dump, and ranks whose stacks differ from the majority.
package culprit

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xpu-timer/xpu-timer/timer"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// Rank is what the report needs of one rank's dump.
type Rank struct {
	Rank    int
	File    string // dump file name
	State   string // "S (sleeping)", ...
	Reason  string
	Hang    *timer.Hang
	Comms   []timer.CommState
	Threads []Thread
}

// Thread is one thread of a rank, reduced to the identity of its stack.
type Thread struct {
	TID   int
	Name  string
	Stack int    // equal for threads with identical stacks, across ranks
	Where string // the innermost frames, for people
	Coll  bool   // the stack runs through the collective library (NCCL, MCCL)
	Py    bool   // the thread runs Python code
	// Frames returns the stack, outermost first, without the C library
	// frames at its tip; the report calls it only for the threads it names.
	Frames func() []string
}

// Kinds of findings, in the order the culprit is taken from.
const (
	KindBehind  = "behind"  // issued fewer collectives than the others on a communicator
	KindKernel  = "kernel"  // hung in a kernel while others wait in a collective
	KindHost    = "host"    // no GPU call while peers wait
	KindDState  = "dstate"  // uninterruptible sleep
	KindMissing = "missing" // no dump
	KindStack   = "stack"   // a thread in the collective library differs from the majority's
	KindNative  = "native"  // a thread without Python frames (a stream executor, a proxy) differs from the majority's
	KindOdd     = "odd"     // a Python thread's stack differs from the majority's
)

// kindOrder ranks the kinds: a rank behind on a communicator is the surest
// sign; a stack that differs from a clear majority comes before ranks with
// no dump, which may be missing for mundane reasons (node lost, unreadable).
// Threads outside the collective library come last: polling threads caught
// at different points of their loop are noise.
var kindOrder = []string{KindBehind, KindKernel, KindHost, KindDState, KindStack, KindNative, KindMissing, KindOdd}

// Finding is one observation that points at ranks.
type Finding struct {
	Kind  string
	Ranks []int
	Text  string
}

// Comm is what the dumps say of one communicator.
type Comm struct {
	ID        string
	NRanks    int
	Members   []int          // global ranks that reported it
	Issued    map[int]uint64 // global rank -> last issued sequence number
	Completed map[int]uint64
	LastOp    map[int]string
}

// Group is a set of ranks with identical stacks.
type Group struct {
	Ranks []int
	Diff  []string // for groups other than the largest: its threads that the largest group lacks
}

// Report is the whole analysis.
type Report struct {
	World    int
	Files    int
	Missing  []int
	DState   []int
	Comms    []*Comm
	Groups   []Group
	Findings []Finding
	Culprits []int
	Why      string
}

// Analyse builds the report of a job of world ranks from the ranks that
// left a dump.
func Analyse(world int, ranks []Rank) *Report {
	ranks = slices.Clone(ranks)
	slices.SortFunc(ranks, func(a, b Rank) int { return a.Rank - b.Rank })
	r := &Report{World: world, Files: len(ranks)}
	have := map[int]bool{}
	for _, x := range ranks {
		have[x.Rank] = true
		if strings.HasPrefix(x.State, "D") {
			r.DState = append(r.DState, x.Rank)
		}
	}
	for i := 0; i < world; i++ {
		if !have[i] {
			r.Missing = append(r.Missing, i)
		}
	}
	r.comms(ranks)
	r.kernels(ranks)
	r.hosts(ranks)
	if len(r.DState) > 0 {
		r.add(KindDState, r.DState, fmt.Sprintf("%s in state D (uninterruptible sleep: stuck in the kernel or on I/O; not attached, only the state recorded)", ranksWord(r.DState)))
	}
	if len(r.Missing) > 0 {
		r.add(KindMissing, r.Missing, fmt.Sprintf("%s left no dump (a rank stuck on the CPU never detects a hang; or its node is gone)", ranksWord(r.Missing)))
	}
	r.groups(ranks)
	r.outliers(ranks)
	for _, k := range kindOrder {
		var set []int
		var why []string
		for _, f := range r.Findings {
			if f.Kind == k {
				set = append(set, f.Ranks...)
				why = append(why, f.Text)
			}
		}
		if len(set) > 0 {
			r.Culprits = sortDistinct(set)
			r.Why = strings.Join(why, "; ")
			break
		}
	}
	return r
}

func (r *Report) add(kind string, ranks []int, text string) {
	r.Findings = append(r.Findings, Finding{Kind: kind, Ranks: slices.Clone(ranks), Text: text})
}

// comms gathers the communicators and names the ranks behind on each.
func (r *Report) comms(ranks []Rank) {
	byID := map[string]*Comm{}
	for _, x := range ranks {
		seen := map[string]bool{}
		states := x.Comms
		if x.Hang != nil {
			states = append(slices.Clone(states), x.Hang.Comms...)
		}
		for _, c := range states {
			if seen[c.ID] {
				continue
			}
			seen[c.ID] = true
			cm := byID[c.ID]
			if cm == nil {
				cm = &Comm{ID: c.ID, Issued: map[int]uint64{}, Completed: map[int]uint64{}, LastOp: map[int]string{}}
				byID[c.ID] = cm
			}
			cm.NRanks = max(cm.NRanks, int(c.NRanks))
			cm.Members = append(cm.Members, x.Rank)
			cm.Issued[x.Rank] = c.Issued
			cm.Completed[x.Rank] = c.Completed
			cm.LastOp[x.Rank] = c.LastOp
		}
	}
	mergeWorld(byID, r.World)
	r.Comms = slices.SortedFunc(maps.Values(byID), func(a, b *Comm) int {
		return cmp.Or(b.NRanks-a.NRanks, strings.Compare(a.ID, b.ID))
	})
	for _, c := range r.Comms {
		top := slices.Max(slices.Collect(maps.Values(c.Issued)))
		levels := map[uint64][]int{} // issued -> ranks behind at that level
		for _, m := range c.Members {
			if v := c.Issued[m]; v < top {
				levels[v] = append(levels[v], m)
			}
		}
		for _, v := range slices.Sorted(maps.Keys(levels)) {
			next := v + 1
			var waiting []int
			for _, m := range c.Members {
				if c.Issued[m] >= next && c.Completed[m] < next {
					waiting = append(waiting, m)
				}
			}
			op := majority(c, next)
			if op == "collective" {
				op = majority(c, top)
			}
			text := fmt.Sprintf("%s never issued %s #%d on comm %s", ranksWord(levels[v]), op, next, Short(c.ID))
			if len(waiting) > 0 {
				text += fmt.Sprintf(", %s wait in it", ranksWord(waiting))
			}
			r.add(KindBehind, levels[v], text)
		}
	}
}

// mergeWorld joins communicators of the whole world whose ids disagree
// between ranks: only one communicator can hold every rank, so disjoint
// world-sized ones are the same, seen through ids captured differently.
func mergeWorld(byID map[string]*Comm, world int) {
	var parts []*Comm
	members := 0
	for _, c := range byID {
		if c.NRanks == world {
			parts = append(parts, c)
			members += len(c.Members)
		}
	}
	if len(parts) < 2 || members > world {
		return
	}
	slices.SortFunc(parts, func(a, b *Comm) int { return strings.Compare(a.ID, b.ID) })
	m := &Comm{NRanks: world, Issued: map[int]uint64{}, Completed: map[int]uint64{}, LastOp: map[int]string{}}
	var ids []string
	for _, c := range parts {
		for _, x := range c.Members {
			if _, dup := m.Issued[x]; dup {
				return // not disjoint: leave them apart
			}
			m.Issued[x], m.Completed[x], m.LastOp[x] = c.Issued[x], c.Completed[x], c.LastOp[x]
		}
		m.Members = append(m.Members, c.Members...)
		ids = append(ids, Short(c.ID))
	}
	slices.Sort(m.Members)
	m.ID = "world (ids disagree between ranks: " + strings.Join(ids, ", ") + ")"
	for _, c := range parts {
		delete(byID, c.ID)
	}
	byID[m.ID] = m
}

// majority is the op name most ranks that issued seq call it.
func majority(c *Comm, seq uint64) string {
	count := map[string]int{}
	for m, s := range c.Issued {
		if s == seq && c.LastOp[m] != "" {
			count[c.LastOp[m]]++
		}
	}
	best := "collective"
	for op, n := range count {
		if n > count[best] || (n == count[best] && op < best) {
			best = op
		}
	}
	return best
}

// kernels names ranks whose oldest outstanding op is a kernel (or copy)
// that a clear majority of the hung ranks is not stuck on: a kernel-hang
// fault, while the others wait in a collective or behind it.
func (r *Report) kernels(ranks []Rank) {
	desc := func(op *timer.Op) string {
		if op.Kind == "collective" {
			return fmt.Sprintf("%s #%d on comm %s", op.Op, op.Seq, Short(op.Comm))
		}
		if op.Kernel != "" {
			return op.Kind + " " + op.Kernel
		}
		return op.Kind
	}
	by := map[string][]int{}
	ops := map[string]*timer.Op{}
	n := 0
	for _, x := range ranks {
		if x.Hang == nil || x.Hang.Oldest == nil {
			continue
		}
		d := desc(x.Hang.Oldest)
		by[d] = append(by[d], x.Rank)
		ops[d] = x.Hang.Oldest
		n++
	}
	if len(by) < 2 {
		return
	}
	top := ""
	for d, rs := range by {
		if top == "" || len(rs) > len(by[top]) || (len(rs) == len(by[top]) && d < top) {
			top = d
		}
	}
	for _, d := range slices.Sorted(maps.Keys(by)) {
		op, rs := ops[d], by[d]
		if d == top || op.Kind == "collective" || len(rs) > max(1, n/4) {
			continue
		}
		for _, rank := range rs {
			r.add(KindKernel, []int{rank}, fmt.Sprintf("rank %d hangs in %s (stream %#x, not a collective), while %s wait in %s",
				rank, d, op.Stream, ranksWord(by[top]), top))
		}
	}
}

// hosts names ranks the engine found silent on the host.
func (r *Report) hosts(ranks []Rank) {
	for _, x := range ranks {
		if x.Hang != nil && x.Hang.Kind == "host" {
			r.add(KindHost, []int{x.Rank}, fmt.Sprintf("rank %d made no GPU call for %.0fs while its peers wait (stuck on the host)",
				x.Rank, float64(x.Hang.AgeNs)/1e9))
		}
	}
}

// Short abbreviates a communicator id for reading.
func Short(id string) string {
	if len(id) > 8 && !strings.HasPrefix(id, "local:") && !strings.HasPrefix(id, "world ") {
		return id[:8] + "…"
	}
	return id
}

// ranksWord phrases a set: "rank 5", "ranks 0-4/6-7".
func ranksWord(ranks []int) string {
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %d", ranks[0])
	}
	return "ranks " + rankset.Fold(ranks)
}

func sortDistinct(s []int) []int {
	slices.Sort(s)
	return slices.Compact(s)
}

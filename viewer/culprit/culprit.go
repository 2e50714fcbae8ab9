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

	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
	"github.com/xpu-timer/xpu-timer/timer"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// Rank is what the report needs of one rank's dump.
type Rank struct {
	Rank    int
	File    string // dump file name
	State   string // "S (sleeping)", ...
	Reason  dumpfile.Reason
	Hang    *timer.Hang
	Comms   []timer.CommState
	Threads []Thread
}

// Role says what a thread's stack is worth as evidence.
type Role int

const (
	// App is an application thread: its native stack is evidence.
	App Role = iota
	// Driver is the thread that drives training: the main thread, or the
	// GIL holder when the main thread runs no Python. Its Python stack is
	// the best evidence the stacks hold.
	Driver
	// Background is a helper thread of a communication or runtime library
	// (gloo, NCCL proxy and progress, CUDA driver and callback, pin-memory,
	// queue feeders, watchdogs): caught at any point of its loop, it never
	// alone makes a culprit.
	Background
)

// Thread is one thread of a rank, reduced to the identity of its stack.
type Thread struct {
	TID    int
	Name   string
	State  string // one-letter kernel state; "R" for a thread caught running
	Role   Role
	Helper string // for Background: what it helps ("gloo", "NCCL watchdog", ...)
	Main   bool   // the process's main thread
	// Process is the helper process (a forked DataLoader worker) the
	// thread runs in, 0 for the rank's own threads; Name then names the
	// process too. Threads of helpers are compared across ranks by their
	// own name, not their process.
	Process int
	Stack   int // equal for threads with identical stacks, across ranks
	// PyStack is equal for threads with identical Python stacks, across
	// ranks; 0 for a thread without Python frames.
	PyStack int
	Where   string // the innermost frames, for people
	Py      string // the innermost Python frame: "func (file.py:line)"; "" without one
	Wait    string // the native frame it waits (or runs) in, past the C library and the interpreter
	Coll    bool   // the stack runs through the collective library (NCCL, MCCL)
	// Frames returns the stack, outermost first, without the C library
	// frames at its tip; the report calls it only for the threads it names.
	Frames func() []string
}

// Kinds of findings, in the order the culprit is taken from.
const (
	KindBehind     = "behind"     // issued fewer collectives than the others on a communicator
	KindKernel     = "kernel"     // hung in a kernel while others wait in a collective
	KindHost       = "host"       // no GPU call while peers wait
	KindDState     = "dstate"     // uninterruptible sleep
	KindPython     = "python"     // the driving thread's Python stack differs from the majority's
	KindStack      = "stack"      // an application thread in the collective library differs from the majority's
	KindOdd        = "odd"        // another application thread with Python frames differs, or only a few ranks have it
	KindNative     = "native"     // an application thread without Python frames (a stream executor) differs
	KindMissing    = "missing"    // no dump
	KindBackground = "background" // a library's helper thread differs: never a culprit by itself
)

// kindOrder ranks the kinds: a rank behind on a communicator is the surest
// sign; then what the engine decided (a kernel, a silent host, state D);
// then the Python stack of the thread that drives training, then native
// stacks of application threads; a stack that differs from a clear
// majority comes before ranks with no dump, which may be missing for
// mundane reasons (node lost, unreadable). Background threads are not in
// it: caught at different points of their loops, they are noise.
var kindOrder = []string{KindBehind, KindKernel, KindHost, KindDState, KindPython, KindStack, KindOdd, KindNative, KindMissing}

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
	// Weak says why no rank is named although some differ (only
	// background threads differ, or no clear majority); "" otherwise.
	Weak string
	// Stalls describes where each culprit's driving thread stands: its
	// innermost Python frame and native wait site.
	Stalls map[int]string
	// Majority is the largest group of identical stacks when it holds more
	// than half the dumped ranks; nil when there is no such majority.
	Majority []int
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
	r.drivers(ranks)
	r.outliers(ranks, App)
	r.outliers(ranks, Background)
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
	if len(r.Culprits) == 0 {
		r.weak()
	}
	r.stalls(ranks)
	return r
}

// weak says why no rank is named when stacks differ all the same.
func (r *Report) weak() {
	var helpers []int
	for _, f := range r.Findings {
		if f.Kind == KindBackground {
			helpers = append(helpers, f.Ranks...)
		}
	}
	switch {
	case len(helpers) > 0:
		r.Weak = fmt.Sprintf("only background threads differ (%s): library helpers caught at different points of their loops, not enough to name a rank",
			ranksWord(sortDistinct(helpers)))
	case len(r.Groups) > 1 && r.Majority == nil:
		r.Weak = fmt.Sprintf("the ranks' stacks fall into %d groups with no majority: not enough to name a rank", len(r.Groups))
	}
}

// stalls describes where each culprit's driving thread stands.
func (r *Report) stalls(ranks []Rank) {
	for _, x := range ranks {
		if !slices.Contains(r.Culprits, x.Rank) {
			continue
		}
		for _, t := range x.Threads {
			if t.Role == Driver {
				if r.Stalls == nil {
					r.Stalls = map[int]string{}
				}
				r.Stalls[x.Rank] = fmt.Sprintf("rank %d's %s %s", x.Rank, threadWord(t), stall(t))
			}
		}
	}
}

// stall phrases where a thread stands: "is in f (x.py:3), waiting in
// clock_nanosleep@libc.so.6".
func stall(t Thread) string {
	var b strings.Builder
	if t.Py != "" {
		b.WriteString("is in " + t.Py)
	} else {
		b.WriteString("is in " + t.Where)
	}
	if t.Wait != "" {
		if t.State == "R" {
			b.WriteString(", running in " + t.Wait)
		} else {
			b.WriteString(", waiting in " + t.Wait)
		}
	} else if t.State == "R" {
		b.WriteString(", running")
	}
	return b.String()
}

// threadWord names a thread for reading: "main thread", "thread "x" (GIL holder)".
func threadWord(t Thread) string {
	if t.Main {
		return "main thread"
	}
	if t.Role == Driver {
		return fmt.Sprintf("thread %q (%d, holds the GIL)", t.Name, t.TID)
	}
	return fmt.Sprintf("thread %q", t.Name)
}

func (r *Report) add(kind string, ranks []int, text string) {
	for _, f := range r.Findings {
		if f.Kind == kind && f.Text == text {
			return // two threads alike
		}
	}
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
			switch len(waiting) {
			case 0:
			case 1:
				text += fmt.Sprintf(", %s waits in it", ranksWord(waiting))
			default:
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
		if op.Kind == timer.OpCollective {
			return fmt.Sprintf("%s #%d on comm %s", op.Op, op.Seq, Short(op.Comm))
		}
		if op.Kernel != "" {
			return string(op.Kind) + " " + op.Kernel
		}
		return string(op.Kind)
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
		if d == top || op.Kind == timer.OpCollective || len(rs) > max(1, n/4) {
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
		if x.Hang != nil && x.Hang.Kind == timer.HangHost {
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

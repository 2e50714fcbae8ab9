// Package culprit reads every rank's dump and says which ranks are behind
// the rest, in the words of NCCL's RAS service: per communicator the
// collective sequence numbers each rank issued and completed, the ranks that
// never issued what the others wait in, ranks hung in a kernel while the
// others wait, ranks silent on the host, ranks in state D, ranks with no
// dump, and ranks whose stacks differ from the majority.
//
// Every finding says what it stands on (Finding.Evidence). The culprit is
// taken from the findings whose evidence shows the others wait on the
// rank (sequence numbers, GPU work past the timeout, a main thread
// spinning, state D, a driving or collective thread unlike a clear
// majority) before those whose evidence is thin (no GPU call alone, no
// dump, another thread unlike the majority), and the report says when it
// had to use thin evidence. A rank the engine decided "host" on silence
// alone whose stack is inside a wait (a gloo or NCCL collective, a c10d
// wait, a CUDA synchronize) is a waiter, never a culprit: the probes do
// not see what it waits for, its stack does.
//
// Findings alike on many ranks are one finding with one rank set, and
// the report stays under 100 lines at any scale: long rank sets are
// shortened to their first runs and a count (rankset.AppendShort).
package culprit

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// Rank is what the report needs of one rank's dump.
type Rank struct {
	Rank    int
	File    string // dump file name
	State   string // "S (sleeping)", ...
	Reason  dumpfile.Reason
	Hang    *dumpfile.Hang
	Comms   []dumpfile.CommState
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
	// Waits says what the thread waits in when its stack is inside a
	// collective or a wait ("gloo collective", "c10d wait", "CUDA
	// synchronize", ...); "" otherwise.
	Waits string
	// Frames returns the stack, outermost first, without the C library
	// frames at its tip; the report calls it only for the threads it names.
	Frames func() []string
}

// Finding is one observation that points at ranks. Observations alike on
// several ranks (same kind, same words, same evidence) are one finding.
type Finding struct {
	Kind  Kind
	Ranks []int
	// Text is the observation, beginning with the ranks it names: "rank 2
	// hangs in ...", "ranks 0-1/3's main thread is in ...".
	Text string
	// What is Text without the ranks it names.
	What string
	// Evidence says what the finding stands on: "sequence numbers", "a
	// kernel outstanding 11s, past the 10s timeout", "no GPU call", ...
	Evidence string
	// Thin is set when the evidence alone does not show that the others
	// wait on these ranks.
	Thin bool

	merged bool // seen on several ranks one by one: Text says "each of"
}

// Evidence of findings whose words do not carry numbers.
const (
	EvidenceSeq       = "sequence numbers"
	EvidenceNoGPUCall = "no GPU call"
	EvidenceSpinning  = "its main thread spinning in the same Python frames"
	EvidenceOutOfColl = "no GPU work in flight while peers are stuck in a collective"
	EvidenceDState    = "scheduler state D"
	EvidenceNoDump    = "no dump"
	EvidenceStack     = "a stack unlike the majority's"
	EvidenceHelper    = "a helper thread's stack unlike the majority's"
)

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
	// Thin is set when the culprit stands on thin evidence only.
	Thin bool
	// Waiters are the ranks the engine decided "host" on silence alone,
	// or "stalled", whose stack is inside a wait, and what each waits in.
	Waiters map[int]string

	index map[string]int // Findings by kind, words and evidence
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
		r.add(KindDState, r.DState, " in state D (uninterruptible sleep: stuck in the kernel or on I/O; not attached, only the state recorded)", EvidenceDState, false)
	}
	if len(r.Missing) > 0 {
		r.add(KindMissing, r.Missing, " left no dump (a rank stuck on the CPU never detects a hang; or its node is gone)", EvidenceNoDump, true)
	}
	r.groups(ranks)
	r.drivers(ranks)
	r.outliers(ranks, App)
	r.outliers(ranks, Background)
	for i := range r.Findings {
		f := &r.Findings[i]
		f.Ranks = sortDistinct(f.Ranks)
		f.Text = ranksWord(f.Ranks) + f.What
		if f.merged && len(f.Ranks) > 1 {
			f.Text = "each of " + f.Text
		}
	}
	r.index = nil
	r.choose()
	if len(r.Culprits) == 0 {
		r.weak()
	}
	r.stalls(ranks)
	return r
}

// maxWhy bounds the findings the culprit line quotes.
const maxWhy = 3

// choose takes the culprits from the first kind in kindOrder with a
// finding of strong evidence, else from the first with a thin one.
func (r *Report) choose() {
	for _, thin := range []bool{false, true} {
		for _, k := range kindOrder {
			var set []int
			var why []string
			n := 0
			for _, f := range r.Findings {
				if f.Kind != k || f.Thin != thin {
					continue
				}
				set = append(set, f.Ranks...)
				if n++; n <= maxWhy {
					why = append(why, f.Text+" ["+f.Evidence+"]")
				}
			}
			if len(set) == 0 {
				continue
			}
			if n > maxWhy {
				why = append(why, fmt.Sprintf("and %d more findings of this kind", n-maxWhy))
			}
			r.Culprits, r.Why, r.Thin = sortDistinct(set), strings.Join(why, "; "), thin
			return
		}
	}
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
		if _, in := slices.BinarySearch(r.Culprits, x.Rank); !in {
			continue
		}
		for _, t := range x.Threads {
			if t.Role == Driver {
				if r.Stalls == nil {
					r.Stalls = map[int]string{}
				}
				r.Stalls[x.Rank] = fmt.Sprintf("%s %s", threadWord(t), stall(t))
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

// add records that ranks (a rank set phrased in front of what) are seen as
// what says, on evidence; the same words on the same evidence join one
// finding. thin marks evidence that alone does not show the others wait
// on these ranks.
func (r *Report) add(kind Kind, ranks []int, what, evidence string, thin bool) {
	key := kind.String() + "\x00" + what + "\x00" + evidence
	if i, ok := r.index[key]; ok {
		r.Findings[i].Ranks = append(r.Findings[i].Ranks, ranks...)
		r.Findings[i].merged = true
		return
	}
	if r.index == nil {
		r.index = map[string]int{}
	}
	r.index[key] = len(r.Findings)
	r.Findings = append(r.Findings, Finding{Kind: kind, Ranks: slices.Clone(ranks), What: what, Evidence: evidence, Thin: thin})
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
			text := fmt.Sprintf(" never issued %s #%d on comm %s", op, next, Short(c.ID))
			switch len(waiting) {
			case 0:
			case 1:
				text += fmt.Sprintf(", %s waits in it", ranksWord(waiting))
			default:
				text += fmt.Sprintf(", %s wait in it", ranksWord(waiting))
			}
			r.add(KindBehind, levels[v], text, fmt.Sprintf("%s: issued #%d, the others #%d", EvidenceSeq, v, top), false)
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

// kernels names ranks hung ("gpu") on GPU work that is not a collective (a
// kernel, a copy) while the others are not: a kernel-hang fault. Where
// several ranks are hung on GPU work, those whose oldest op is not the one most
// are stuck on, and few (at most a quarter of them), are named, while the
// others wait in a collective or behind it; where only a few ranks (at
// most a quarter of the dumped ones, or a lone rank) are hung on GPU work
// at all, they are named, while the others have none in flight. Ranks
// stuck in a collective count as one group whatever the communicator id
// they know it by: a rank whose communicator creation the probes missed
// knows it as "local:<handle>", its own.
func (r *Report) kernels(ranks []Rank) {
	desc := func(op *dumpfile.Op) string {
		if op.Kind == dumpfile.OpCollective {
			return fmt.Sprintf("%s #%d on comm %s", op.Op, op.Seq, Short(op.Comm))
		}
		switch {
		case op.Kernel != "":
			return string(op.Kind) + " " + op.Kernel
		case op.Func != 0:
			// its name lookup came before the probes: the handle names it
			return fmt.Sprintf("%s %#x", op.Kind, op.Func)
		}
		return string(op.Kind)
	}
	by := map[string][]int{}
	ops := map[string]*dumpfile.Op{}
	hangs := map[int]*dumpfile.Hang{}
	var colls []*dumpfile.Op // the collectives ranks are stuck on
	var inColl []int         // and those ranks
	var stackWaits []int     // ranks decided on a GPU wait seen on their stacks alone
	n := 0
	for _, x := range ranks {
		if h := x.Hang; h != nil && h.Kind == dumpfile.HangGPU && h.Oldest == nil && h.StackWait != nil {
			stackWaits = append(stackWaits, x.Rank)
			hangs[x.Rank] = h
			continue
		}
		if x.Hang == nil || x.Hang.Kind != dumpfile.HangGPU || x.Hang.Oldest == nil {
			continue // a host decision's oldest op is not what it waits on
		}
		op := x.Hang.Oldest
		hangs[x.Rank] = x.Hang
		n++
		if op.Kind == dumpfile.OpCollective {
			colls = append(colls, op)
			inColl = append(inColl, x.Rank)
			continue
		}
		d := desc(op)
		by[d] = append(by[d], x.Rank)
		ops[d] = op
	}
	evidence := func(rank int, op *dumpfile.Op) string {
		h := hangs[rank]
		return fmt.Sprintf("a %s outstanding %.0fs, past the %.0fs timeout", op.Kind, float64(h.AgeNs)/1e9, float64(h.Timeout)/1e9)
	}
	if len(by) == 0 && len(inColl) == 0 && len(stackWaits) > 0 && len(stackWaits) <= max(1, len(ranks)/4) {
		// Attached after the hang, the probes saw no op: the decision
		// stands on a thread seen in one GPU wait past the timeout. The
		// few ranks so, while the others are not hung on GPU work, are
		// the odd ones out (a kernel that never ends holds their GPU).
		for _, rank := range stackWaits {
			h := hangs[rank]
			w := h.StackWait
			call := w.Call
			if w.Kernel != "" {
				call += " of " + w.Kernel // a launch: its stub frame names the kernel
			}
			what := fmt.Sprintf(" waits on the GPU in %s (thread %d, seen on its stack)", call, w.TID) + othersWait(ranks, stackWaits)
			r.add(KindKernel, []int{rank}, what, fmt.Sprintf("a GPU wait of %.0fs on its native stacks, past the %.0fs timeout",
				float64(h.AgeNs)/1e9, float64(h.Timeout)/1e9), false)
		}
		return
	}
	if len(by) == 1 && len(inColl) == 0 {
		for d, rs := range by {
			op := ops[d]
			if len(rs) > max(1, len(ranks)/4) {
				return
			}
			what := fmt.Sprintf(" hangs in %s (stream %#x, not a collective)", d, op.Stream) + othersWait(ranks, rs)
			for _, rank := range rs {
				r.add(KindKernel, []int{rank}, what, evidence(rank, op), false)
			}
		}
		return
	}
	if len(by) == 0 {
		return
	}
	// The group most ranks are stuck on: the collective ones, or the
	// largest group of ranks stuck on one non-collective op.
	top, topRanks := "", inColl
	if len(inColl) > 0 {
		top = collWords(colls, desc)
	}
	for _, d := range slices.Sorted(maps.Keys(by)) {
		if rs := by[d]; len(rs) > len(topRanks) {
			top, topRanks = d, rs
		}
	}
	for _, d := range slices.Sorted(maps.Keys(by)) {
		op, rs := ops[d], by[d]
		if d == top || len(rs) > max(1, n/4) {
			continue
		}
		for _, rank := range rs {
			r.add(KindKernel, []int{rank}, fmt.Sprintf(" hangs in %s (stream %#x, not a collective), while %s wait in %s",
				d, op.Stream, ranksWord(sortDistinct(slices.Clone(topRanks))), top), evidence(rank, op), false)
		}
	}
}

// collWords phrases the collectives ranks are stuck on: "AllReduce #10 on
// comm 3f2a0b1c…" when they are one, "AllReduce #10 on comms 3f2a0b1c…,
// local:0x5647e1007c90" when one op and sequence number on communicators
// known by different ids, else "collectives (AllReduce, Broadcast)".
func collWords(colls []*dumpfile.Op, desc func(*dumpfile.Op) string) string {
	var ids, names []string
	same := true
	for _, c := range colls {
		if c.Op != colls[0].Op || c.Seq != colls[0].Seq {
			same = false
		}
		if id := Short(c.Comm); !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		if !slices.Contains(names, c.Op) {
			names = append(names, c.Op)
		}
	}
	switch {
	case len(ids) == 1 && same:
		return desc(colls[0])
	case same:
		slices.Sort(ids)
		if len(ids) > maxWhy {
			ids = append(ids[:maxWhy], fmt.Sprintf("and %d more", len(ids)-maxWhy))
		}
		return fmt.Sprintf("%s #%d on comms %s", colls[0].Op, colls[0].Seq, strings.Join(ids, ", "))
	}
	slices.Sort(names)
	return "collectives (" + strings.Join(names, ", ") + ")"
}

// othersWait phrases, after a finding on the ranks in some (sorted), that
// the other ranks are not hung on GPU work and what their threads wait in:
// ", while ranks 0-1/3 are not hung on GPU work and wait in gloo
// collective" ("gloo collective or c10d wait" for several); without the
// wait where none waits, "" where no rank is left.
func othersWait(ranks []Rank, some []int) string {
	var others []int
	var kinds []string
	for _, x := range ranks {
		if _, in := slices.BinarySearch(some, x.Rank); in {
			continue
		}
		others = append(others, x.Rank)
		if w := waits(x); w != "" && !slices.Contains(kinds, w) {
			kinds = append(kinds, w)
		}
	}
	if len(others) == 0 {
		return ""
	}
	out := fmt.Sprintf(", while %s are not hung on GPU work", ranksWord(others))
	if len(kinds) > 0 {
		out += " and wait in " + strings.Join(kinds, " or ")
	}
	return out
}

// waits is what a rank's first thread inside a collective or a wait
// waits in; "" when none is.
func waits(x Rank) string {
	for _, t := range x.Threads {
		if t.Waits != "" {
			return t.Waits
		}
	}
	return ""
}

// waiter lists x among the ranks that wait, with what its stack waits in.
func (r *Report) waiter(x Rank) {
	if r.Waiters == nil {
		r.Waiters = map[int]string{}
	}
	r.Waiters[x.Rank] = waits(x)
}

// hosts names ranks the engine decided "host", each on its evidence: the
// sequence numbers of a communicator it is behind on, a main thread
// spinning, no GPU work in flight while peers are stuck in a collective,
// or, thinly, silence alone. A rank silent alone whose stack is
// inside a collective or a wait is a waiter (Report.Waiters), not named;
// so is a rank decided "stalled" whose stack is.
func (r *Report) hosts(ranks []Rank) {
	inColl := false // a rank is stuck on the GPU in a collective
	for _, x := range ranks {
		if h := x.Hang; h != nil && h.Kind == dumpfile.HangGPU && (h.Collective != nil || h.Oldest != nil && h.Oldest.Kind == dumpfile.OpCollective) {
			inColl = true
			break
		}
	}
	for _, x := range ranks {
		h := x.Hang
		if h != nil && h.Kind == dumpfile.HangStalled && waits(x) != "" {
			r.waiter(x) // no progress, and its stack shows on what
		}
		if h == nil || h.Kind != dumpfile.HangHost {
			continue
		}
		silent := float64(h.AgeNs) / 1e9
		switch {
		case h.Lagging != nil:
			l := h.Lagging
			peer := "a peer"
			if l.PeerRank >= 0 {
				peer = fmt.Sprintf("rank %d", l.PeerRank)
			}
			r.add(KindHost, []int{x.Rank}, fmt.Sprintf(" made no GPU call for %.0fs while its peers wait, behind on comm %s: %s waits in collective #%d there",
				silent, Short(l.Comm), peer, l.Awaited),
				fmt.Sprintf("%s: issued #%d, awaited #%d", EvidenceSeq, l.Issued, l.Awaited), false)
		case h.Stall != nil && h.Stall.Spinning:
			r.add(KindHost, []int{x.Rank}, fmt.Sprintf(" made no GPU call for %.0fs while its peers wait, and spins on the host", silent),
				EvidenceSpinning, false)
		case waits(x) != "":
			r.waiter(x)
		case inColl && h.Pending == 0:
			// Not a member of the stuck collective as far as sequence
			// numbers tell (its communicator's creation unseen), but out
			// of every collective: it never joined the one they wait in.
			r.add(KindHost, []int{x.Rank}, fmt.Sprintf(" made no GPU call for %.0fs while its peers wait (stuck on the host)", silent),
				EvidenceOutOfColl, false)
		default:
			r.add(KindHost, []int{x.Rank}, fmt.Sprintf(" made no GPU call for %.0fs while its peers wait (stuck on the host)", silent),
				EvidenceNoGPUCall, true)
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

// shortRuns is how many runs of a rank set the report shows.
const shortRuns = 8

// ranksWord phrases a set: "rank 5", "ranks 0-4/6-7"; a set of more than
// shortRuns runs is shortened, "ranks 0/4/8/12/16/20/24/28+4088".
func ranksWord(ranks []int) string {
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %d", ranks[0])
	}
	return "ranks " + rankset.Short(ranks, shortRuns)
}

func sortDistinct(s []int) []int {
	slices.Sort(s)
	return slices.Compact(s)
}

package culprit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// signature of a rank: the multiset of the stacks of its application
// threads (background threads left out: their loops make noise).
func signature(x Rank) string {
	ids := make([]int, 0, len(x.Threads))
	for _, t := range x.Threads {
		if t.Role != Background {
			ids = append(ids, t.Stack)
		}
	}
	slices.Sort(ids)
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(strconv.Itoa(id))
		b.WriteByte(',')
	}
	return b.String()
}

// groups sorts ranks into sets of identical stacks, largest first, and says
// what each smaller set has that the largest lacks.
func (r *Report) groups(ranks []Rank) {
	if len(ranks) == 0 {
		return
	}
	idx := map[string]int{}
	rep := []Rank{}
	for _, x := range ranks {
		sig := signature(x)
		i, ok := idx[sig]
		if !ok {
			i = len(r.Groups)
			idx[sig] = i
			r.Groups = append(r.Groups, Group{})
			rep = append(rep, x)
		}
		r.Groups[i].Ranks = append(r.Groups[i].Ranks, x.Rank)
	}
	order := make([]int, len(r.Groups))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(r.Groups[b].Ranks) - len(r.Groups[a].Ranks) })
	groups := make([]Group, len(order))
	reps := make([]Rank, len(order))
	for i, o := range order {
		groups[i], reps[i] = r.Groups[o], rep[o]
	}
	r.Groups = groups
	if len(groups[0].Ranks)*2 > len(ranks) {
		r.Majority = groups[0].Ranks
	}
	base := map[int]int{}
	for _, t := range reps[0].Threads {
		if t.Role != Background {
			base[t.Stack]++
		}
	}
	for i := 1; i < len(groups); i++ {
		left := clone(base)
		for _, t := range reps[i].Threads {
			if t.Role == Background {
				continue
			}
			if left[t.Stack] > 0 {
				left[t.Stack]--
				continue
			}
			r.Groups[i].Diff = append(r.Groups[i].Diff, fmt.Sprintf("thread %d %q in %s", t.TID, t.Name, t.Where))
		}
	}
}

func clone(m map[int]int) map[int]int {
	c := make(map[int]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// clearMajority reports whether counts (stack id -> ranks) show a clear majority
// among n ranks: more than half share one stack and at most a quarter (at
// least one) differ. It returns the majority's stack id.
func clearMajority(count map[int]int, n int) (int, bool) {
	if len(count) < 2 {
		return 0, false
	}
	best, bestN := 0, -1
	for id, c := range count {
		if c > bestN || (c == bestN && id < best) {
			best, bestN = id, c
		}
	}
	return best, bestN*2 > n && n-bestN <= max(1, n/4)
}

// drivers compares the Python stacks of the threads that drive training
// (one a rank): where a clear majority shares one and a few ranks do not,
// those few are named, with their innermost Python frame and wait site.
func (r *Report) drivers(ranks []Rank) {
	type drv struct {
		rank  int
		t     Thread
		id    int
		waits string // what a thread of the rank waits in
	}
	var ds []drv
	count := map[int]int{}
	for _, x := range ranks {
		for _, t := range x.Threads {
			if t.Role != Driver {
				continue
			}
			id := t.PyStack
			if id == 0 {
				id = -t.Stack // no Python frames: compare the native stack
			}
			ds = append(ds, drv{x.Rank, t, id, waits(x)})
			count[id]++
			break
		}
	}
	best, ok := clearMajority(count, len(ds))
	if !ok {
		return
	}
	var majority []int
	var rep Thread
	repWaits := ""
	for _, d := range ds {
		if d.id == best {
			majority = append(majority, d.rank)
			rep, repWaits = d.t, d.waits
		}
	}
	for _, d := range ds {
		if d.id != best {
			evidence := EvidenceStack
			if repWaits != "" && d.waits == "" {
				// The others' stacks show what they wait in; its own, that
				// it is not there.
				evidence += fmt.Sprintf("; no thread in the %s the others' stacks wait in", repWaits)
			}
			r.add(KindPython, []int{d.rank}, fmt.Sprintf("'s %s %s, while %s are in %s",
				threadWord(d.t), stall(d.t), ranksWord(majority), strings.TrimPrefix(stall(rep), "is in ")), evidence, false)
		}
	}
}

// outliers compares the threads of one role (by name and order among
// threads of that name) across ranks: where a clear majority shares one
// stack and a few ranks do not, those few are named; so are the few ranks
// with a thread the others lack.
func (r *Report) outliers(ranks []Rank, role Role) {
	type slotRank struct {
		rank int
		t    Thread
	}
	slots := map[string][]slotRank{}
	var names []string
	for _, x := range ranks {
		var threads []Thread
		for _, t := range x.Threads {
			if t.Role == role {
				threads = append(threads, t)
			}
		}
		slices.SortStableFunc(threads, func(a, b Thread) int { return a.TID - b.TID })
		ord := map[string]int{}
		for _, t := range threads {
			// Helpers of different libraries often share the process's name
			// ("python3"): tell them apart by what they help.
			key := t.Name + "\x00" + t.Helper
			if t.Process != 0 {
				// The rank's helper processes: their threads line up
				// across ranks by name and order, whatever their pids.
				key = "helper " + strings.TrimPrefix(t.Name, fmt.Sprintf("helper %d: ", t.Process)) + "\x00" + t.Helper
			}
			slot := fmt.Sprintf("%s#%d", key, ord[key])
			ord[key]++
			if _, ok := slots[slot]; !ok {
				names = append(names, slot)
			}
			slots[slot] = append(slots[slot], slotRank{x.Rank, t})
		}
	}
	n := len(ranks)
	for _, slot := range names {
		members := slots[slot]
		kind := func(t Thread) Kind {
			switch {
			case role == Background:
				return KindBackground
			case t.Coll:
				return KindStack
			case t.PyStack != 0:
				return KindOdd
			}
			return KindNative
		}
		if len(members) <= max(1, n/4) && (n-len(members))*2 > n {
			// A thread only a few ranks have.
			var have, lack []int
			for _, m := range members {
				have = append(have, m.rank)
			}
			for _, x := range ranks {
				if _, in := slices.BinarySearch(have, x.Rank); !in {
					lack = append(lack, x.Rank)
				}
			}
			for _, m := range members {
				where := m.t.Where
				if m.t.Py != "" {
					where = m.t.Py
				}
				k := kind(m.t)
				r.add(k, []int{m.rank}, fmt.Sprintf(" has a thread %q in %s that %s lack",
					m.t.Name, where, ranksWord(lack)), evidenceOf(k), thinKind(k))
			}
			continue
		}
		count := map[int]int{}
		for _, m := range members {
			count[m.t.Stack]++
		}
		best, ok := clearMajority(count, len(members))
		if !ok {
			continue
		}
		var majority []int
		var rep Thread
		k := KindNative
		for _, m := range members {
			if m.t.Stack == best {
				majority = append(majority, m.rank)
				rep = m.t
			}
			if kk := kind(m.t); kk == KindBackground || kk == KindStack || (kk == KindOdd && k == KindNative) {
				k = kk
			}
		}
		for _, m := range members {
			if m.t.Stack != best {
				what := fmt.Sprintf("thread %q", m.t.Name)
				if role == Background && rep.Helper != "" {
					what = fmt.Sprintf("%s thread %q", rep.Helper, m.t.Name)
				}
				odd, usual := contrast(m.t.Frames, rep.Frames, m.t.Where, rep.Where)
				r.add(k, []int{m.rank}, fmt.Sprintf("'s %s is in %s, while %s are in %s",
					what, odd, ranksWord(majority), usual), evidenceOf(k), thinKind(k))
			}
		}
	}
}

// evidenceOf is what a finding of a stack kind stands on.
func evidenceOf(kind Kind) string {
	if kind == KindBackground {
		return EvidenceHelper
	}
	return EvidenceStack
}

// thinKind says whether a stack finding's evidence is thin: another
// application thread or a helper unlike the majority's says little of
// what the others wait on; the driving thread (KindPython, not here) and
// a thread in the collective library (KindStack) say more.
func thinKind(kind Kind) bool { return kind != KindStack }

// contrast describes two stacks by where they differ: the innermost frames
// of each, and the first frame that differs when it lies further out.
func contrast(a, b func() []string, whereA, whereB string) (string, string) {
	if a == nil || b == nil {
		return whereA, whereB
	}
	fa, fb := a(), b()
	i := 0
	for i < len(fa) && i < len(fb) && fa[i] == fb[i] {
		i++
	}
	return describe(fa, i), describe(fb, i)
}

// describe shows the innermost frames of a stack (outermost first) and, if
// it lies further out, the frame at div where it parts from the other.
func describe(frames []string, div int) string {
	if len(frames) == 0 {
		return "(no frames)"
	}
	var parts []string
	for j := len(frames) - 1; j >= 0 && j >= len(frames)-3; j-- {
		parts = append(parts, Brief(frames[j]))
	}
	s := strings.Join(parts, " <- ")
	if div < len(frames)-3 {
		s += " via " + Brief(frames[div])
	}
	return s
}

// Brief shortens a func@file frame for reading: the file's directory goes.
func Brief(frame string) string {
	at := strings.LastIndexByte(frame, '@')
	if at < 0 {
		return frame
	}
	file := frame[at+1:]
	if i := strings.LastIndexByte(file, '/'); i >= 0 {
		file = file[i+1:]
	}
	return frame[:at+1] + file
}

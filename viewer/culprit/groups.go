package culprit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// signature of a rank: the multiset of its thread stacks.
func signature(x Rank) string {
	ids := make([]int, len(x.Threads))
	for i, t := range x.Threads {
		ids[i] = t.Stack
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
	base := map[int]int{}
	for _, t := range reps[0].Threads {
		base[t.Stack]++
	}
	for i := 1; i < len(groups); i++ {
		left := clone(base)
		for _, t := range reps[i].Threads {
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

// outliers compares each thread (by name and order among threads of that
// name) across ranks: where a clear majority shares one stack and a few
// ranks do not, those few are named.
func (r *Report) outliers(ranks []Rank) {
	type slotRank struct {
		rank   int
		stack  int
		where  string
		coll   bool
		py     bool
		frames func() []string
	}
	slots := map[string][]slotRank{}
	var names []string
	for _, x := range ranks {
		threads := slices.Clone(x.Threads)
		slices.SortStableFunc(threads, func(a, b Thread) int { return a.TID - b.TID })
		ord := map[string]int{}
		for _, t := range threads {
			slot := fmt.Sprintf("%s#%d", t.Name, ord[t.Name])
			ord[t.Name]++
			if _, ok := slots[slot]; !ok {
				names = append(names, slot)
			}
			slots[slot] = append(slots[slot], slotRank{x.Rank, t.Stack, t.Where, t.Coll, t.Py, t.Frames})
		}
	}
	for _, slot := range names {
		members := slots[slot]
		n := len(members)
		count := map[int]int{}
		for _, m := range members {
			count[m.stack]++
		}
		if len(count) < 2 {
			continue
		}
		best, bestN := 0, -1
		for id, c := range count {
			if c > bestN || (c == bestN && id < best) {
				best, bestN = id, c
			}
		}
		odd := n - bestN
		if bestN*2 <= n || odd > max(1, n/4) {
			continue
		}
		var majority []int
		var rep slotRank
		kind := KindNative
		for _, m := range members {
			if m.py && kind == KindNative {
				kind = KindOdd
			}
			if m.stack == best {
				majority = append(majority, m.rank)
				rep = m
			}
			if m.coll {
				kind = KindStack
			}
		}
		name, _, _ := strings.Cut(slot, "#")
		for _, m := range members {
			if m.stack != best {
				odd, usual := contrast(m.frames, rep.frames, m.where, rep.where)
				r.add(kind, []int{m.rank}, fmt.Sprintf("rank %d's thread %q is in %s, while %s are in %s",
					m.rank, name, odd, ranksWord(majority), usual))
			}
		}
	}
}

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

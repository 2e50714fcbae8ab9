package culprit

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// Bounds that keep the report under 100 lines at any scale.
const (
	maxStallLines   = 4
	maxWaiterLines  = 3
	maxFindingLines = 20
	maxComms        = 4
	maxGroups       = 5
	maxGroupDiff    = 4
)

// Text renders the report for a person (summary.txt): under 100 lines
// whatever the number of ranks, with long rank sets shortened.
func (r *Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "xpu-timer hang report: world size %d, %d dumps", r.World, r.Files)
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, ", missing ranks %s", short(r.Missing))
	}
	b.WriteString("\n\n")
	switch {
	case len(r.Culprits) > 0:
		fmt.Fprintf(&b, "Likely culprit: %s\n  %s\n", ranksWord(r.Culprits), r.Why)
		if r.Thin {
			b.WriteString("  The evidence is thin: it alone does not show that the others wait on these ranks; read the stacks below before acting on it\n")
		}
		r.stallLines(&b)
	case r.Weak != "":
		fmt.Fprintf(&b, "Likely culprit: none named, the evidence is weak: %s\n", r.Weak)
	default:
		b.WriteString("Likely culprit: none found (every rank is in the same place)\n")
	}
	if len(r.Waiters) > 0 {
		by := map[string][]int{}
		for rank, w := range r.Waiters {
			by[w] = append(by[w], rank)
		}
		for i, w := range slices.Sorted(maps.Keys(by)) {
			if i == maxWaiterLines {
				fmt.Fprintf(&b, "  ... and %d more kinds of waits\n", len(by)-i)
				break
			}
			fmt.Fprintf(&b, "Waiting, not blamed: %s, their stacks inside a %s\n", ranksWord(sortDistinct(by[w])), w)
		}
	}

	b.WriteString("\nFindings (kind, ranks, what, [evidence]):\n")
	if len(r.Findings) == 0 {
		b.WriteString("  none\n")
	}
	for i, f := range r.Findings {
		if i == maxFindingLines {
			var n int
			for _, g := range r.Findings[i:] {
				n += len(g.Ranks)
			}
			fmt.Fprintf(&b, "  ... %d more findings on %d ranks\n", len(r.Findings)-i, n)
			break
		}
		count := ""
		if len(f.Ranks) > 1 {
			count = fmt.Sprintf(" (%d ranks)", len(f.Ranks))
		}
		thin := ""
		if f.Thin {
			thin = ", thin"
		}
		fmt.Fprintf(&b, "  [%s] %s%s [%s%s]\n", f.Kind, f.Text, count, f.Evidence, thin)
	}

	b.WriteString("\nCommunicators:\n")
	if len(r.Comms) == 0 {
		b.WriteString("  none recorded\n")
	}
	for i, c := range r.Comms {
		if i == maxComms {
			fmt.Fprintf(&b, "  ... %d more communicators\n", len(r.Comms)-i)
			break
		}
		fmt.Fprintf(&b, "  comm %s: %d ranks, %d dumped (ranks %s)\n", c.ID, c.NRanks, len(c.Members), short(c.Members))
		fmt.Fprintf(&b, "    issued:    %s\n", seqGroups(c.Issued, "launched"))
		fmt.Fprintf(&b, "    completed: %s\n", seqGroups(c.Completed, "completed"))
	}

	fmt.Fprintf(&b, "\nRanks with no dump: %s\n", orNone(r.Missing))
	fmt.Fprintf(&b, "Ranks in state D: %s\n", orNone(r.DState))

	b.WriteString("\nGroups of identical stacks (largest first; background threads left out):\n")
	for i, g := range r.Groups {
		if i == maxGroups {
			fmt.Fprintf(&b, "  ... %d more groups\n", len(r.Groups)-i)
			break
		}
		fmt.Fprintf(&b, "  %d. %d %s: %s\n", i+1, len(g.Ranks), plural(len(g.Ranks), "rank"), short(g.Ranks))
		for j, d := range g.Diff {
			if j == maxGroupDiff {
				fmt.Fprintf(&b, "     ... %d more threads\n", len(g.Diff)-j)
				break
			}
			fmt.Fprintf(&b, "     unlike group 1: %s\n", d)
		}
	}
	switch {
	case len(r.Groups) > 1 && r.Majority != nil:
		var odd []int
		for _, g := range r.Groups[1:] {
			odd = append(odd, g.Ranks...)
		}
		slices.Sort(odd)
		fmt.Fprintf(&b, "Ranks whose stacks differ from the majority (%s): %s\n", short(r.Majority), short(odd))
	case len(r.Groups) > 1:
		fmt.Fprintf(&b, "No majority: the largest group holds %d of %d ranks\n", len(r.Groups[0].Ranks), r.Files)
	}
	return b.String()
}

// stallLines says where the culprits' driving threads stand, ranks alike
// on one line, at most maxStallLines lines.
func (r *Report) stallLines(b *strings.Builder) {
	by := map[string][]int{}
	var order []string
	for _, rank := range r.Culprits {
		s, ok := r.Stalls[rank]
		if !ok {
			continue
		}
		if _, seen := by[s]; !seen {
			order = append(order, s)
		}
		by[s] = append(by[s], rank)
	}
	for i, s := range order {
		if i == maxStallLines {
			fmt.Fprintf(b, "  ... and %d more places\n", len(order)-i)
			break
		}
		line := ranksWord(by[s]) + "'s " + s
		if !strings.Contains(r.Why, line) {
			fmt.Fprintf(b, "  Stalled: %s\n", line)
		}
	}
}

// short folds a rank set, shortened past shortRuns runs.
func short(ranks []int) string { return rankset.Short(ranks, shortRuns) }

// seqGroups phrases sequence numbers as NCCL's RAS does: "26 ranks launched
// up to op 6650, 6 ranks up to 6649 (ranks 3/9-13)".
func seqGroups(seq map[int]uint64, verb string) string {
	by := map[uint64][]int{}
	for rank, s := range seq {
		by[s] = append(by[s], rank)
	}
	keys := make([]uint64, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	var parts []string
	for i, k := range keys {
		ranks := by[k]
		slices.Sort(ranks)
		var p string
		if i == 0 {
			p = fmt.Sprintf("%d %s %s up to op %d", len(ranks), plural(len(ranks), "rank"), verb, k)
		} else {
			p = fmt.Sprintf("%d %s up to op %d", len(ranks), plural(len(ranks), "rank"), k)
		}
		if len(keys) > 1 {
			p += " (" + ranksWord(ranks) + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func orNone(ranks []int) string {
	if len(ranks) == 0 {
		return "none"
	}
	return short(ranks)
}

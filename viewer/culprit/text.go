package culprit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// Text renders the report for a person (summary.txt).
func (r *Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "xpu-timer hang report: world size %d, %d dumps", r.World, r.Files)
	if len(r.Missing) > 0 {
		fmt.Fprintf(&b, ", missing ranks %s", rankset.Fold(r.Missing))
	}
	b.WriteString("\n\n")
	switch {
	case len(r.Culprits) > 0:
		fmt.Fprintf(&b, "Likely culprit: %s\n  %s\n", ranksWord(r.Culprits), r.Why)
		for _, rank := range r.Culprits {
			if s, ok := r.Stalls[rank]; ok && !strings.Contains(r.Why, s) {
				fmt.Fprintf(&b, "  Stalled: %s\n", s)
			}
		}
	case r.Weak != "":
		fmt.Fprintf(&b, "Likely culprit: none named, the evidence is weak: %s\n", r.Weak)
	default:
		b.WriteString("Likely culprit: none found (every rank is in the same place)\n")
	}

	b.WriteString("\nFindings:\n")
	if len(r.Findings) == 0 {
		b.WriteString("  none\n")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "  [%s] %s\n", f.Kind, f.Text)
	}

	b.WriteString("\nCommunicators:\n")
	if len(r.Comms) == 0 {
		b.WriteString("  none recorded\n")
	}
	for _, c := range r.Comms {
		fmt.Fprintf(&b, "  comm %s: %d ranks, %d dumped (ranks %s)\n", c.ID, c.NRanks, len(c.Members), rankset.Fold(c.Members))
		fmt.Fprintf(&b, "    issued:    %s\n", seqGroups(c.Issued, "launched"))
		fmt.Fprintf(&b, "    completed: %s\n", seqGroups(c.Completed, "completed"))
	}

	fmt.Fprintf(&b, "\nRanks with no dump: %s\n", orNone(r.Missing))
	fmt.Fprintf(&b, "Ranks in state D: %s\n", orNone(r.DState))

	b.WriteString("\nGroups of identical stacks (largest first; background threads left out):\n")
	for i, g := range r.Groups {
		if i == 8 {
			fmt.Fprintf(&b, "  ... %d more groups\n", len(r.Groups)-i)
			break
		}
		fmt.Fprintf(&b, "  %d. %d %s: %s\n", i+1, len(g.Ranks), plural(len(g.Ranks), "rank"), rankset.Fold(g.Ranks))
		for j, d := range g.Diff {
			if j == 6 {
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
		fmt.Fprintf(&b, "Ranks whose stacks differ from the majority (%s): %s\n", rankset.Fold(r.Majority), rankset.Fold(odd))
	case len(r.Groups) > 1:
		fmt.Fprintf(&b, "No majority: the largest group holds %d of %d ranks\n", len(r.Groups[0].Ranks), r.Files)
	}
	return b.String()
}

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
	return rankset.Fold(ranks)
}

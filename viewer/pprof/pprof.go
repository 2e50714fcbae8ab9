// Package pprof converts a merged stack trie into a pprof profile, so the
// merged stacks open in `go tool pprof` and every pprof front end. Each
// distinct stack becomes one sample, valued by the stacks and ranks it
// stands for and labelled with its rank sets.
package pprof

import (
	"io"

	"github.com/google/pprof/profile"

	"github.com/xpu-timer/xpu-timer/viewer/flame"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

// Build makes the profile of t. Sample values are [stacks, ranks]: 1 and
// the number of ranks whose stack it is. Labels: "ranks" (the folded ranks
// with this exact stack), "stuck" and "leak" (the leaf frame's sets), and
// "view" (the given name, e.g. "mixed").
func Build(t *flame.Tree, view string) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "stacks", Unit: "count"},
			{Type: "ranks", Unit: "count"},
		},
		DefaultSampleType: t.Weight.String(),
		PeriodType:        &profile.ValueType{Type: "stacks", Unit: "count"},
		Period:            1,
	}
	funcs := map[[2]string]*profile.Function{}
	locs := map[*flame.Node]*profile.Location{}
	location := func(n *flame.Node) *profile.Location {
		if l := locs[n]; l != nil {
			return l
		}
		fk := [2]string{n.Key.Func, n.Key.File}
		fn := funcs[fk]
		if fn == nil {
			fn = &profile.Function{ID: uint64(len(p.Function) + 1), Name: n.Key.Func, SystemName: n.Key.Func, Filename: n.Key.File}
			funcs[fk] = fn
			p.Function = append(p.Function, fn)
		}
		l := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: fn, Line: int64(n.Key.Line)}}}
		locs[n] = l
		p.Location = append(p.Location, l)
		return l
	}
	t.Walk(func(n *flame.Node) bool {
		if len(n.Ends) == 0 {
			return true
		}
		var stack []*profile.Location
		for m := n; m.Depth > 0; m = m.Parent {
			stack = append(stack, location(m)) // leaf first, as pprof wants
		}
		labels := map[string][]string{"view": {view}}
		for k, v := range map[string]string{"ranks": rankset.Fold(n.Ends), "stuck": t.Stuck(n), "leak": t.Leak(n)} {
			if v != "" {
				labels[k] = []string{v}
			}
		}
		p.Sample = append(p.Sample, &profile.Sample{
			Location: stack,
			Value:    []int64{1, int64(len(n.Ends))},
			Label:    labels,
		})
		return true
	})
	return p
}

// Write writes the gzipped profile of t to w.
func Write(w io.Writer, t *flame.Tree, view string) error {
	return Build(t, view).Write(w)
}

package ebpf

import (
	"slices"
	"testing"
)

// nextLookup's rules (lookups.go), one row each, run in both orders: no
// row depends on another.
func TestNextLookup(t *testing.T) {
	const w = 2000
	learning := func(last int64) lookupState { return lookupState{lookupLearning, last} }
	quiet := func(since int64) lookupState { return lookupState{lookupQuiet, since} }
	rows := []struct {
		name string
		s    lookupState
		now  int64
		n    lookupNews
		want lookupState
	}{
		{"learning, a name learned: the window starts again", learning(100), 1500, lookupNews{learned: true}, learning(1500)},
		{"learning, a handle never named: the window starts again", learning(100), 1500, lookupNews{unnamed: true}, learning(1500)},
		{"learning, both", learning(100), 5000, lookupNews{learned: true, unnamed: true}, learning(5000)},
		{"learning, nothing new, within the window", learning(100), 100 + w - 1, lookupNews{}, learning(100)},
		{"learning, nothing new, a handle pending, the window passed", learning(100), 100 + 10*w, lookupNews{pending: 1}, learning(100)},
		{"learning, nothing new, the window passed: quiet", learning(100), 100 + w, lookupNews{}, quiet(100 + w)},
		{"learning, nothing new long after: quiet", learning(100), 100 + 10*w, lookupNews{}, quiet(100 + 10*w)},
		{"quiet, a handle never named: learning", quiet(100), 9000, lookupNews{unnamed: true}, learning(9000)},
		{"quiet, a name learned elsewhere: quiet", quiet(100), 9000, lookupNews{learned: true}, quiet(100)},
		{"quiet, nothing new: quiet", quiet(100), 9000, lookupNews{}, quiet(100)},
	}
	for _, order := range []string{"forward", "backward"} {
		rs := slices.Clone(rows)
		if order == "backward" {
			slices.Reverse(rs)
		}
		for _, r := range rs {
			if got := nextLookup(r.s, r.now, r.n, w); got != r.want {
				t.Errorf("%s: %s: nextLookup(%+v, %d, %+v) = %+v, want %+v", order, r.name, r.s, r.now, r.n, got, r.want)
			}
		}
	}
}

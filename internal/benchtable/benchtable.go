// Package benchtable prints the rows that scripts/bench.sh gathers into
// the one table `make bench` ends with: a figure, the anchor it is judged
// against (measured in the same run, or a target), and their ratio.
//
// A row is one log line holding, tab-separated,
//
//	BENCH-TABLE  name  figure  anchor  ratio
//
// where figure and anchor are "value unit (what)" and ratio is
// figure/anchor with three significant digits, or "-" when there is no
// number to divide.
package benchtable

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// Prefix starts every row.
const Prefix = "BENCH-TABLE"

// Row logs one row. A ratio that is not a number (no anchor) prints "-".
func Row(tb testing.TB, name, figure, anchor string, ratio float64) {
	tb.Helper()
	r := "-"
	if !math.IsNaN(ratio) && !math.IsInf(ratio, 0) {
		r = fmt.Sprintf("%.3g", ratio)
	}
	clean := func(s string) string { return strings.ReplaceAll(s, "\t", " ") }
	tb.Logf("%s\t%s\t%s\t%s\t%s", Prefix, clean(name), clean(figure), clean(anchor), r)
}

// Quantile is the q-quantile of v by nearest rank (0.5 the median, 1 the
// maximum); NaN when v is empty.
func Quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(len(s)-1, i))]
}

// Package rankset folds sets of ranks into xpu_timer's compact text form
// and back: sorted, consecutive runs collapsed to "a-b", runs joined with
// "/", so [0,1,2,5,6,7] is "0-2/5-7" and the empty set is "".
//
// A set of many runs (every 4th rank of 16,384 folds to 40 KB) is shortened
// for reading by AppendShort: its first runs and "+N", the count of ranks
// left out, so "0/4/8+4093" is every 4th rank of 16,384. Only pictures and
// the report shorten; the folded file and the pprof profile keep sets
// whole.
package rankset

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrSyntax is wrapped by Parse errors.
var ErrSyntax = errors.New("invalid rank set")

// Fold renders ranks (any order, duplicates allowed) in folded form.
func Fold(ranks []int) string {
	if len(ranks) == 0 {
		return ""
	}
	if !slices.IsSorted(ranks) {
		ranks = slices.Sorted(slices.Values(ranks))
	}
	return string(AppendFold(nil, ranks))
}

// AppendFold appends the folded form of ranks, which must be sorted
// (duplicates allowed), to dst.
func AppendFold(dst []byte, ranks []int) []byte { return AppendShort(dst, ranks, -1) }

// AppendShort appends the folded form of ranks (sorted, duplicates
// allowed) to dst, keeping at most runs runs (all when runs < 0): when
// there are more, the first runs are followed by "+N", N the number of
// distinct ranks left out.
func AppendShort(dst []byte, ranks []int, runs int) []byte {
	n := 0
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && (ranks[j+1] == ranks[j]+1 || ranks[j+1] == ranks[j]) {
			j++
		}
		if n == runs {
			return strconv.AppendInt(append(dst, '+'), int64(distinct(ranks[i:])), 10)
		}
		if n > 0 {
			dst = append(dst, '/')
		}
		dst = strconv.AppendInt(dst, int64(ranks[i]), 10)
		if ranks[j] != ranks[i] {
			dst = append(dst, '-')
			dst = strconv.AppendInt(dst, int64(ranks[j]), 10)
		}
		n++
		i = j + 1
	}
	return dst
}

// Short is AppendShort of ranks in any order.
func Short(ranks []int, runs int) string {
	if !slices.IsSorted(ranks) {
		ranks = slices.Sorted(slices.Values(ranks))
	}
	return string(AppendShort(nil, ranks, runs))
}

func distinct(sorted []int) int {
	n := 0
	for i := range sorted {
		if i == 0 || sorted[i] != sorted[i-1] {
			n++
		}
	}
	return n
}

// maxRank bounds what Parse accepts, so a hostile "0-999999999" cannot
// allocate gigabytes.
const maxRank = 1 << 20

// Parse reads a folded set back into sorted, distinct ranks.
func Parse(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, "/") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := num(lo)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrSyntax, s, err)
		}
		b := a
		if isRange {
			if b, err = num(hi); err != nil {
				return nil, fmt.Errorf("%w %q: %w", ErrSyntax, s, err)
			}
			if b < a {
				return nil, fmt.Errorf("%w %q: range %d-%d runs backwards", ErrSyntax, s, a, b)
			}
		}
		if len(out) > 0 && a <= out[len(out)-1] {
			return nil, fmt.Errorf("%w %q: %d is not above %d", ErrSyntax, s, a, out[len(out)-1])
		}
		for r := a; r <= b; r++ {
			out = append(out, r)
		}
	}
	return out, nil
}

func num(s string) (int, error) {
	if s == "" || len(s) > 7 {
		return 0, fmt.Errorf("bad number %q", s)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad number %q", s)
		}
	}
	n, _ := strconv.Atoi(s)
	if n > maxRank {
		return 0, fmt.Errorf("rank %d above %d", n, maxRank)
	}
	return n, nil
}

package rankset

import (
	"errors"
	"slices"
	"testing"
)

func TestFold(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{}, ""},
		{[]int{3}, "3"},
		{[]int{0, 1, 2, 5, 6, 7}, "0-2/5-7"},
		{[]int{7, 6, 5, 2, 1, 0}, "0-2/5-7"},
		{[]int{0, 2, 4}, "0/2/4"},
		{[]int{0, 1}, "0-1"},
		{[]int{1, 1, 2, 2, 3, 9}, "1-3/9"},
		{[]int{0, 1, 2, 3, 6}, "0-3/6"},
		{[]int{4095}, "4095"},
	} {
		if got := Fold(tc.in); got != tc.want {
			t.Errorf("Fold(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"0-2/5-7", []int{0, 1, 2, 5, 6, 7}, false},
		{"3", []int{3}, false},
		{"0/2/4", []int{0, 2, 4}, false},
		{"2-1", nil, true},
		{"1/1", nil, true},
		{"5/3", nil, true},
		{"a", nil, true},
		{"1-", nil, true},
		{"-1", nil, true},
		{"1//2", nil, true},
		{"0-99999999", nil, true},
	} {
		got, err := Parse(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("Parse(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err != nil && !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) error %v does not wrap ErrSyntax", tc.in, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzFold checks that Parse inverts Fold, and that Fold inverts Parse on
// every string Parse accepts.
func FuzzFold(f *testing.F) {
	for _, s := range []string{"", "0-2/5-7", "3", "0/2/4", "1-1", "0-0/2", "9-3", "1/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ranks, err := Parse(s)
		if err != nil {
			return
		}
		folded := Fold(ranks)
		back, err := Parse(folded)
		if err != nil {
			t.Fatalf("Parse(Fold(%v)) = %q: %v", ranks, folded, err)
		}
		if !slices.Equal(back, ranks) {
			t.Fatalf("round trip of %q: %v then %v", s, ranks, back)
		}
		if !slices.IsSorted(ranks) {
			t.Fatalf("Parse(%q) not sorted: %v", s, ranks)
		}
	})
}

func TestShort(t *testing.T) {
	every4 := make([]int, 0, 4096)
	for r := 0; r < 16384; r += 4 {
		every4 = append(every4, r)
	}
	for _, tc := range []struct {
		in   []int
		runs int
		want string
	}{
		{nil, 3, ""},
		{[]int{0, 1, 2, 5, 6, 7}, 3, "0-2/5-7"},
		{[]int{0, 1, 2, 5, 6, 7}, 2, "0-2/5-7"},
		{[]int{0, 1, 2, 5, 6, 7}, 1, "0-2+3"},
		{[]int{9, 0, 2, 4, 4, 6}, 2, "0/2+3"},
		{every4, 3, "0/4/8+4093"},
	} {
		if got := Short(tc.in, tc.runs); got != tc.want {
			t.Errorf("Short(%v, %d) = %q, want %q", tc.in, tc.runs, got, tc.want)
		}
	}
}

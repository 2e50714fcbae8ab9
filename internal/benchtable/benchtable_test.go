package benchtable

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestQuantile(t *testing.T) {
	v := []float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.5, 5}, {0.9, 9}, {1, 10}} {
		if got := Quantile(v, c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if v[0] != 10 {
		t.Error("Quantile sorted its argument")
	}
	if got := Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("Quantile of nothing = %v, want NaN", got)
	}
}

// logger keeps what Row logs.
type logger struct {
	testing.TB
	lines []string
}

func (l *logger) Helper() {}
func (l *logger) Logf(format string, args ...any) {
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func TestRow(t *testing.T) {
	l := &logger{TB: t}
	Row(l, "probe\tcost", "3055 ns", "2318 ns (empty uprobe)", 3055.0/2318)
	Row(l, "caught", "0 of 8", "-", math.Inf(1))
	want := []string{
		"BENCH-TABLE\tprobe cost\t3055 ns\t2318 ns (empty uprobe)\t1.32",
		"BENCH-TABLE\tcaught\t0 of 8\t-\t-",
	}
	if strings.Join(l.lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%q\nwant\n%q", l.lines, want)
	}
}

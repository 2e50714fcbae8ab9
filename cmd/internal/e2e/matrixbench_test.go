package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/benchtable"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

// benchMatrixRuns is how many times BenchmarkFaultMatrix runs each cell
// (make test runs each once: matrixRuns).
const benchMatrixRuns = 2

// BenchmarkFaultMatrix runs TestFaultMatrix (in a child of this test
// binary, so that its runs keep their own subtests and parallelism) and
// prints its detection table: fault kind x fault step x runs detected,
// latency past the timeout (median, max) and attach latency. It fails
// when any run was not detected. Each cell runs benchMatrixRuns times;
// XPU_TIMER_MATRIX_RUNS and XPU_TIMER_MATRIX_CELLS pass through.
func BenchmarkFaultMatrix(b *testing.B) {
	privileged.Root(b)
	for range b.N {
		out := filepath.Join(b.TempDir(), "matrix.json")
		cmd := exec.Command(os.Args[0], "-test.run", "^TestFaultMatrix$", "-test.timeout", "80m")
		cmd.Env = append(os.Environ(), "XPU_TIMER_MATRIX_OUT="+out)
		if os.Getenv("XPU_TIMER_MATRIX_RUNS") == "" {
			cmd.Env = append(cmd.Env, fmt.Sprintf("XPU_TIMER_MATRIX_RUNS=%d", benchMatrixRuns))
		}
		log, err := cmd.CombinedOutput()
		data, rerr := os.ReadFile(out)
		if rerr != nil {
			b.Fatalf("the matrix wrote no results (%v): %v\n%s", rerr, err, tail(string(log), 60))
		}
		var all []cellRuns
		if err := json.Unmarshal(data, &all); err != nil {
			b.Fatal(err)
		}
		b.Logf("fault matrix on the default path:\n%s", matrixTable(all))
		var runs, detected int
		var lat, att []float64
		for _, c := range all {
			for _, o := range c.Runs {
				runs++
				if o.Detected {
					detected++
					lat = append(lat, o.Latency)
				}
				if o.Attach >= 0 {
					att = append(att, o.Attach)
				}
			}
		}
		benchtable.Row(b, "fault matrix, runs detected", fmt.Sprintf("%d", detected), fmt.Sprintf("%d (all runs)", runs),
			float64(detected)/float64(runs))
		benchtable.Row(b, "fault matrix, latency past the timeout, max", seconds(maxOf(lat)), seconds(slack.Seconds())+" (allowed)",
			maxOf(lat)/slack.Seconds())
		benchtable.Row(b, "fault matrix, rank started -> runtime attached, median", seconds(benchtable.Quantile(att, 0.5)), "0.050s (attach target)",
			benchtable.Quantile(att, 0.5)/0.05)
		if runs == 0 {
			b.Fatal("the matrix ran nothing")
		}
		if detected < runs || err != nil {
			b.Fatalf("%d of %d runs detected (%v); the matrix's log:\n%s", detected, runs, err, tail(string(log), 80))
		}
	}
}

// maxOf is the largest of v; NaN when v is empty.
func maxOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Max(v)
}

// seconds prints a duration in seconds, "-" for NaN.
func seconds(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.3fs", v)
}

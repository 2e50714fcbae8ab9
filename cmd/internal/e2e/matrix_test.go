package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// matrixSteps are the fault steps of the matrix: the first collective, the
// second, a few steps in, and well into training.
var matrixSteps = []int{0, 1, 3, 30}

// matrixRuns is how many times each cell runs (XPU_TIMER_MATRIX_RUNS
// overrides it for longer soaks).
func matrixRuns() int {
	if n, err := strconv.Atoi(os.Getenv("XPU_TIMER_MATRIX_RUNS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// hostFaults are the faults that leave the faulty rank stuck on the host.
var hostFaults = []string{testbed.FaultPythonSleep, testbed.FaultDeadlock, testbed.FaultDataloader}

// outcome is one run of one cell.
type outcome struct {
	detected bool
	latency  float64 // worst decision age past the timeout, seconds
	why      string  // what failed
}

// TestFaultMatrix runs every testbed fault, on CUDA and on MACA, at fault
// steps 0, 1, 3 and 30, matrixRuns times each, under xpu_timer_launch on
// the default path (no library named): every run must decide every rank
// within the timeout plus the check period, dump every rank with stacks,
// and the viewer must name the faulty rank. Two jobs run at a time. It
// logs a table of detection rates and latencies.
func TestFaultMatrix(t *testing.T) {
	privileged.Root(t)
	if testing.Short() {
		t.Skip("the fault matrix is long: run without -short")
	}
	b := testbed.Build(t)
	runs := matrixRuns()
	type cell struct {
		vendor, fault string
		step          int
	}
	var cells []cell
	for _, v := range []string{"cuda", "maca"} {
		for _, f := range testbed.Faults {
			for _, s := range matrixSteps {
				cells = append(cells, cell{v, f, s})
			}
		}
	}
	var mu sync.Mutex
	results := map[cell][]outcome{}
	t.Run("runs", func(t *testing.T) {
		for i, c := range cells {
			for run := range runs {
				step := c.step
				j := job{vendor: c.vendor, fault: c.fault, rank: (i + run) % nproc, at: &step, steps: step + 30}
				t.Run(fmt.Sprintf("%s/%s/step%d/run%d", c.vendor, c.fault, c.step, run), func(t *testing.T) {
					t.Parallel()
					o := matrixRun(t, b, j)
					if !o.detected {
						t.Errorf("rank %d's %s at step %d: %s", j.rank, j.fault, step, o.why)
					}
					mu.Lock()
					results[c] = append(results[c], o)
					mu.Unlock()
				})
			}
		}
	})
	var table strings.Builder
	fmt.Fprintf(&table, "%-5s %-16s %5s %9s %14s %11s\n", "", "fault", "step", "detected", "latency med", "latency max")
	for _, c := range cells {
		outs := results[c]
		n := 0
		var lat []float64
		for _, o := range outs {
			if o.detected {
				n++
				lat = append(lat, o.latency)
			}
		}
		slices.Sort(lat)
		med, worst := 0.0, 0.0
		if len(lat) > 0 {
			med, worst = lat[len(lat)/2], lat[len(lat)-1]
		}
		fmt.Fprintf(&table, "%-5s %-16s %5d %4d of %-2d %12.2fs %10.2fs\n", c.vendor, c.fault, c.step, n, len(outs), med, worst)
	}
	t.Logf("fault matrix on the default path (latency: decision age past the %v timeout, worst rank of a run):\n%s", timeout, table.String())
}

// matrixRun runs one faulty job and says whether it was detected as a
// user needs it: a decision on every rank within the timeout plus the
// check period (the faulty rank's of the right kind), every rank dumped
// with its main thread's stacks, and the viewer naming the faulty rank.
func matrixRun(t *testing.T, b *testbed.Bed, j job) outcome {
	dir := t.TempDir()
	p := launch(t, b, j, dir, timeout)
	defer p.kill()
	fail := func(format string, args ...any) outcome {
		return outcome{why: fmt.Sprintf(format, args...) + "\n" + tail(p.output(), 40)}
	}
	deadline := time.Now().Add(45 * time.Second)
	for !dumpedAll(p) {
		if time.Now().After(deadline) || p.exited() {
			return fail("no dump of all %d ranks", nproc)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for len(decidedRanks(p)) < nproc {
		if time.Now().After(deadline.Add(2 * slack)) {
			return fail("decisions on ranks %v only", decidedRanks(p))
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantKind := "gpu"
	if slices.Contains(hostFaults, j.fault) {
		wantKind = "host"
	}
	var worst float64
	seen := map[int]bool{}
	for _, h := range hangLines(p) {
		if seen[h.rank] {
			continue
		}
		seen[h.rank] = true
		past := h.ageSeconds - timeout.Seconds()
		worst = max(worst, past)
		if past < 0 || past > slack.Seconds() {
			return fail("rank %d decided %.2fs past the timeout, want within %v", h.rank, past, slack)
		}
		if h.rank == j.rank && h.kind != wantKind {
			return fail("faulty rank %d decided %s, want %s", j.rank, h.kind, wantKind)
		}
	}
	for r := range nproc {
		f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(r, nproc)))
		if err != nil {
			return fail("rank %d: %v", r, err)
		}
		main := false
		for _, th := range f.Threads {
			main = main || th.TID == f.PID && len(th.Native) > 0 && len(th.Python) > 0
		}
		if !main {
			return fail("rank %d: no native and Python stacks of the main thread; errors %v", r, f.Errors)
		}
	}
	summary := runViewer(t, dir)
	if want := fmt.Sprintf("Likely culprit: rank %d\n", j.rank); !strings.Contains(summary, want) {
		return fail("the viewer does not say %q:\n%s", strings.TrimSpace(want), summary)
	}
	return outcome{detected: true, latency: worst}
}

// dumpedAll says whether the launcher logged the dumps of every rank.
func dumpedAll(p *proc) bool {
	for _, l := range p.matching(dumpedRe) {
		m := dumpedRe.FindStringSubmatch(l.text)
		if m[1] == strconv.Itoa(nproc) && m[2] == strconv.Itoa(nproc) {
			return true
		}
	}
	return false
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

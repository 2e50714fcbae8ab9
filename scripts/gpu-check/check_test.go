// Package gpucheck holds the test of scripts/gpu-check.sh; the script's
// helpers live beside it (probe/, workloads.py, fakeworkloads.py).
package gpucheck

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// rows are the scenarios of the table, in its order.
var rows = []string{"overhead", "paired", "rate8", "train-step", "nccl-sleep", "triton", "ddp4", "graph-late", "ddp4-watch", "ddp4-agent",
	"launch-blocking", "queue-full", "free-sync", "queue-full-nccl"}

// blockedRows are the rows of calls that block behind a kernel that never
// ends though they are no waits (issue 39): each must be ok on the
// testbed, decided within the timeout + 2 s with its kernel and its call
// named.
var blockedRows = []string{"launch-blocking", "queue-full", "free-sync", "queue-full-nccl"}

var (
	rowRe   = regexp.MustCompile(`^(\S+)\s+\| (.*?)\s+\| (.*?)\s+\|\s+([0-9.]+|-) \| (ok|FAIL)$`)
	wayRe   = regexp.MustCompile(`^(plain|empty1|empty2|launcher|nostall)\s+((?:\s*[0-9]+)+)\s+([0-9]+)\s+([+-][0-9]+)$`)
	emptyRe = regexp.MustCompile(`empty1\s+empty_0@cudaLaunchKernel\s+runs/launch\s+([0-9.]+)`)
)

// TestGPUCheckDry runs `scripts/gpu-check.sh run --dry`, the real-GPU
// check on the fake GPU testbed, and checks the script, not the product:
// every scenario has its row with a verdict and its seconds, in order;
// the exit status counts the failed rows; the launch table has a number
// for every way and round, and the kernel's statistics show the empty
// uprobe firing once per launch; the single-process kernel hang (which
// the product decides today) is ok, so a row can pass. The rows it logs
// are the product's state on the testbed. It takes 1.5 to 3 minutes on
// two loaded cores, so it runs only when XPU_TIMER_GPU_CHECK_DRY=1 (make
// gpu-check-dry runs the script itself).
func TestGPUCheckDry(t *testing.T) {
	if os.Getenv("XPU_TIMER_GPU_CHECK_DRY") != "1" {
		t.Skip("runs by hand: XPU_TIMER_GPU_CHECK_DRY=1 (1.5-3 minutes)")
	}
	privileged.Root(t)
	testbed.Build(t)
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "gpu-check.sh")
	bin, out := t.TempDir(), t.TempDir()
	build := exec.Command(script, "build")
	build.Env = append(os.Environ(), "BIN="+bin)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	run := exec.Command(script, "run", "--dry")
	run.Env = append(os.Environ(), "BIN="+bin, "OUT="+out)
	b, err := run.Output()
	status := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		status = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run: %v", err)
	}
	table := string(b)
	t.Logf("gpu-check --dry (exit %d):\n%s", status, table)

	got := map[string][]string{}
	var order []string
	for _, l := range strings.Split(table, "\n") {
		if m := rowRe.FindStringSubmatch(l); m != nil && m[1] != "scenario" {
			got[m[1]] = m
			order = append(order, m[1])
		}
	}
	if strings.Join(order, " ") != strings.Join(rows, " ") {
		t.Fatalf("rows %v, want %v", order, rows)
	}
	failed := 0
	for _, r := range rows {
		m := got[r]
		if m[5] == "FAIL" {
			failed++
		}
		limit := 120.0
		if r == "train-step" { // three workloads, each paired over its rounds
			limit = 300
		}
		if s, err := strconv.ParseFloat(m[4], 64); err != nil || s <= 0 || s > limit {
			t.Errorf("%s took %q s, want a time within its limit", r, m[4])
		}
	}
	if status != failed {
		t.Errorf("exit status %d, want %d (the failed rows)", status, failed)
	}
	if got["nccl-sleep"][5] != "ok" {
		t.Errorf("the kernel hang under the launcher: %s, want ok", got["nccl-sleep"][3])
	}
	for _, r := range blockedRows {
		if got[r][5] != "ok" || !strings.Contains(got[r][3], "call=") || !strings.Contains(got[r][3], "spin_kernel") {
			t.Errorf("%s: %s %s, want ok, the call and spin_kernel named", r, got[r][3], got[r][5])
		}
	}

	ways := 0
	for _, l := range strings.Split(table, "\n") {
		if m := wayRe.FindStringSubmatch(l); m != nil {
			ways++
			if n := len(strings.Fields(m[2])); n != 3 {
				t.Errorf("%s: %d rounds, want 3", m[1], n)
			}
		}
	}
	if ways != 5 {
		t.Errorf("launch table has %d ways with a number for every round, want 5", ways)
	}
	if m := emptyRe.FindStringSubmatch(table); m == nil {
		t.Error("no statistics of the empty uprobe on cudaLaunchKernel")
	} else if v, _ := strconv.ParseFloat(m[1], 64); v < 0.9 {
		t.Errorf("the empty uprobe ran %s times per launch, want at least 0.9", m[1])
	}
	// The training steps' tables: each workload measured, its launches a
	// step counted by the anchor's empty uprobes.
	steps := regexp.MustCompile(`(?m)^step tag=(eager|gpubound|graph) launches=([0-9.]+) `).FindAllStringSubmatch(table, -1)
	if len(steps) != 3 {
		t.Errorf("%d training step results, want eager, gpubound and graph", len(steps))
	}
	for _, m := range steps {
		// Counted by the anchor's runs over the steps its windows hold, cut
		// at their edges: a graph's one launch a step reads 0.99 or so.
		if v, _ := strconv.ParseFloat(m[2], 64); v < 0.9 {
			t.Errorf("%s: %s launches a step, want at least one", m[1], m[2])
		}
	}
	for _, f := range []string{"table.txt", "overhead.txt", "nccl-sleep.log", "ddp4.log", "train-step.txt", "queue-full.log", "free-sync/00000-00001.stacktrace"} {
		if _, err := os.Stat(filepath.Join(out, "gpu-check", f)); err != nil {
			t.Errorf("artefact %s: %v", f, err)
		}
	}
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// firstCallRuns is how many times TestFirstCallProbed starts each program:
// XPU_TIMER_FIRSTCALL_RUNS, else 10.
func firstCallRuns(t *testing.T) int {
	s := os.Getenv("XPU_TIMER_FIRSTCALL_RUNS")
	if s == "" {
		return 10
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("XPU_TIMER_FIRSTCALL_RUNS=%q: want a count of runs", s)
	}
	return n
}

// A C program that gets the driver at its start, from a directory of its
// own, and is followed as the launcher follows its child (started, then
// followed, with no handshake) is probed every time: its call 200 ms
// later is seen. The tracer is new for every start, so that no probe
// lingers from the start before: each is the first process on the node.
// It used to be probed about half the time: the loader probe attached by
// the first scan missed the dlopen (or ld.so's mapping of the linked
// driver) made between the read of the maps and its attach (scan).
func TestFirstCallProbed(t *testing.T) {
	bed := testbed.Build(t)
	dir := t.TempDir()
	for _, lib := range []string{"libcuda.so.1", "libcudart.so.12"} {
		b, err := os.ReadFile(bed.Lib(lib))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, lib), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	driver := filepath.Join(dir, "libcuda.so.1")
	loads := gcc(t, filepath.Join(dir, "firstcall-dlopen"), "testdata/firstcall.c", "-ldl")
	linked := gcc(t, filepath.Join(dir, "firstcall-linked"), "-DLINKED", "testdata/firstcall.c", driver, "-Wl,-rpath,$ORIGIN")
	runs := firstCallRuns(t)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"dlopen at start", []string{loads, "200", driver}},
		{"linked", []string{linked, "200"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var missed []int
			for i := range runs {
				if !firstCallSeen(t, c.args) {
					missed = append(missed, i)
				}
			}
			t.Logf("probed in %d of %d starts", runs-len(missed), runs)
			if len(missed) > 0 {
				t.Errorf("the driver call was not seen in starts %v of %d", missed, runs)
			}
		})
	}
}

// firstCallSeen starts args, follows it at once with a new tracer and says
// whether a GPU call of it was seen by its exit.
func firstCallSeen(t *testing.T, args []string) bool {
	t.Helper()
	tr := newTracer(t, Options{})
	defer tr.Close()
	rec := record(t, tr)
	defer rec.cancel()
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := tr.Follow(pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v", args[0], err)
	}
	rec.waitFor(t, "its exit", func(evs []timer.Event, _ []Notice) bool {
		return hasEvent(evs, pid, timer.KindProcessExit)
	})
	for _, e := range rec.of(pid) {
		if e.Kind != timer.KindProcessExec && e.Kind != timer.KindProcessExit {
			return true
		}
	}
	return false
}

// BenchmarkCommInitSeen starts a 4-rank testbed job (run.py's ranks load
// the fake NCCL and call ncclCommInitRank at once) under a new tracer
// that follows the launcher as xpu_timer_launch does, with nothing probed
// ahead: each start is the first job on the node. It reports the share
// of starts in which every rank's communicator was seen
// (whole-starts/op, 1 is every one) and of ranks seen (ranks-seen/op);
// run it with -benchtime=100x for the measurement of issue 27.
func BenchmarkCommInitSeen(b *testing.B) {
	bed := testbed.Build(b)
	const nproc = 4
	whole, seen := 0, 0
	for i := 0; i < b.N; i++ {
		n := commInitsSeen(b, bed, nproc)
		seen += n
		if n == nproc {
			whole++
		}
	}
	b.Logf("every communicator known with all %d ranks in %d of %d starts; %d of %d ranks' ncclCommInitRank seen", nproc, whole, b.N, seen, b.N*nproc)
	b.ReportMetric(float64(whole)/float64(b.N), "whole-starts/op")
	b.ReportMetric(float64(seen)/float64(b.N*nproc), "ranks-seen/op")
}

// commInitsSeen runs one job and counts its ranks whose ncclCommInitRank
// the tracer saw.
func commInitsSeen(b *testing.B, bed *testbed.Bed, nproc int) int {
	tr := newTracer(b, Options{})
	defer tr.Close()
	rec := record(b, tr)
	defer rec.cancel()
	job := bed.StartJob(b, testbed.JobOptions{NProc: nproc, Steps: 1, Args: []string{"--step-ms", "5"}})
	if err := tr.Follow(job.Cmd.Process.Pid); err != nil {
		b.Fatal(err)
	}
	pids, err := job.RankPIDs(30 * time.Second)
	if err != nil {
		b.Fatal(err)
	}
	if code, err := job.Wait(60 * time.Second); err != nil || code != 0 {
		b.Fatalf("job: code %d, %v\n%s", code, err, job.Output())
	}
	rec.waitFor(b, "every rank's exit", func(evs []timer.Event, _ []Notice) bool {
		for _, pid := range pids {
			if !hasEvent(evs, pid, timer.KindProcessExit) {
				return false
			}
		}
		return true
	})
	n := 0
	for _, pid := range pids {
		if hasEvent(rec.of(pid), pid, timer.KindCommInit) {
			n++
		}
	}
	return n
}

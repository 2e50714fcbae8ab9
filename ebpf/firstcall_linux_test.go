//go:build linux && (386 || amd64)

package ebpf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/gate"
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
// own, and is followed as the launcher follows its child (started held at
// its exec, followed, let go: internal/gate) is probed every time: its
// first call, made at once after the dlopen or first thing in main, is
// seen. The tracer is new for every start, so that no probe lingers from
// the start before: each is the first process on the node. It used to be
// probed about half the time even with the call 200 ms later: the loader
// probe attached by the first scan missed the dlopen (or ld.so's mapping
// of the linked driver) made between the read of the maps and its attach;
// then, with that fixed, a call soon after the dlopen raced the scan. Now
// the loader program holds the process until its new libraries are
// probed (hold_linux.go).
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
		{"dlopen at start", []string{loads, "0", driver}},
		{"linked", []string{linked, "0"}},
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
	cmd, g, err := gate.Start(func() *exec.Cmd { return exec.Command(args[0], args[1:]...) })
	if err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	ferr := tr.Follow(pid)
	if err := g.Open(); err != nil {
		t.Fatal(err)
	}
	if ferr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(ferr)
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

// Every rank of a 4-rank testbed job whose ranks load the fake NCCL and
// call ncclCommInitRank at once has its communicator seen, in every start
// (XPU_TIMER_FIRSTCALL_RUNS / 2 of them, at least 1), each the first job on
// the node: the loader program holds each rank until NCCL is probed. It
// was 48 of 100 starts before the holds.
func TestCommInitSeen(t *testing.T) {
	bed := testbed.Build(t)
	const nproc = 4
	runs := max(1, firstCallRuns(t)/2)
	for i := range runs {
		if n := commInitsSeen(t, bed, nproc); n != nproc {
			t.Errorf("start %d of %d: %d of %d ranks' ncclCommInitRank seen", i, runs, n, nproc)
		}
	}
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
func commInitsSeen(b testing.TB, bed *testbed.Bed, nproc int) int {
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

// BenchmarkHoldImport measures what the holds cost a process that loads
// many libraries: Debian's python3 importing torch and numpy (about a
// hundred dlopens), followed from its exec by a new tracer each time (the
// first process on the node: every library is read for symbols), with
// holds and, interleaved, without (the anchor). It reports the start-up
// time of both (hold-ms, nohold-ms), the holds made and their total
// length per start (holds/op, held-ms/op).
func BenchmarkHoldImport(b *testing.B) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, numpy").Run(); err != nil {
		b.Skipf("%s cannot import torch and numpy: %v", py, err)
	}
	var hold, nohold, held time.Duration
	var holds uint64
	for range b.N {
		for _, off := range []bool{false, true} {
			tr := newTracer(b, Options{noHold: off})
			rec := record(b, tr)
			start := time.Now()
			cmd, g, err := gate.Start(func() *exec.Cmd { return exec.Command(py, "-c", "import torch, numpy") })
			if err != nil {
				b.Fatal(err)
			}
			ferr := tr.Follow(cmd.Process.Pid)
			if err := g.Open(); err != nil || ferr != nil {
				b.Fatal(err, ferr)
			}
			if err := cmd.Wait(); err != nil {
				b.Fatal(err)
			}
			took := time.Since(start)
			st := tr.Stats()
			rec.cancel()
			tr.Close()
			if off {
				nohold += took
				if st.Holds != 0 {
					b.Fatalf("%d holds with holds off", st.Holds)
				}
				continue
			}
			hold += took
			holds += st.Holds
			held += st.Held
		}
	}
	if holds == 0 {
		b.Fatal("no hold measured")
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 / n }
	b.Logf("import torch, numpy: %.0f ms with holds, %.0f ms without; %.1f holds, %.1f ms held per start", ms(hold), ms(nohold), float64(holds)/n, ms(held))
	b.ReportMetric(ms(hold), "hold-ms")
	b.ReportMetric(ms(nohold), "nohold-ms")
	b.ReportMetric(float64(holds)/n, "holds/op")
	b.ReportMetric(ms(held), "held-ms/op")
}

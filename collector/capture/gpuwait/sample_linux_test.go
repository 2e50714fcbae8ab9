//go:build linux && amd64

package gpuwait

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/native"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/spinwait"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// startSpinwait runs spinwait with args and returns its pid once it is
// ready; the test kills it at the end.
func startSpinwait(t testing.TB, args ...string) int {
	t.Helper()
	p := spinwait.Build(t)
	cmd := exec.Command(p.Bin, args...)
	cmd.Env = append(os.Environ(), p.Env())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("spinwait: %q %v", line, err)
	}
	return cmd.Process.Pid
}

// A sample of a process whose main thread spins in the driver's
// synchronize and another thread sleeps in a stream synchronize finds
// exactly those two, with their callers, and not the thread that computes
// nor the one asleep elsewhere. A thread whose stack could not be read in
// time (a loaded machine) is reported unseen, never as not waiting.
func TestSampleSpinningAndSleeping(t *testing.T) {
	privileged.Root(t)
	pid := startSpinwait(t, "threads")
	names := map[int]string{}
	tids, err := procfs.Tasks(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
		names[tid] = strings.TrimSpace(string(b))
	}
	names[pid] = "main"
	want := map[string]string{"main": "cuCtxSynchronize_v2 from wait_device", "sleeper": "cuStreamSynchronize from wait_stream", "busy": "", "idle": ""}
	s := &Sampler{Unwinder: native.NewUnwinder(nil)}
	const n = 20
	var stops []time.Duration
	full, mainSeen := 0, 0
	for i := 0; i < n; i++ {
		time.Sleep(100 * time.Millisecond) // samples come seconds apart in the agent
		r, err := s.Take(pid)
		if err != nil {
			t.Fatal(err)
		}
		stops = append(stops, r.StoppedFor)
		if r.Threads != 4 {
			t.Fatalf("sample %d: %d threads, want 4", i, r.Threads)
		}
		got := map[string]string{}
		for _, w := range r.Waits {
			got[names[w.TID]] = w.Call + " from " + w.From
			if names[w.TID] == "main" && w.State != 'R' {
				t.Errorf("sample %d: the spinning thread in state %c", i, w.State)
			}
		}
		for _, tid := range r.Unseen {
			got[names[tid]] = "unseen"
		}
		if len(r.Unseen) == 0 {
			full++
		}
		if got["main"] != "unseen" {
			mainSeen++
		}
		for name, w := range want {
			if g := got[name]; g != w && g != "unseen" {
				t.Errorf("sample %d: thread %s: %q, want %q", i, name, g, w)
			}
		}
	}
	slices.Sort(stops)
	t.Logf("%d of %d samples read every thread, %d the spinning one; threads stopped for %v (median) to %v (longest)", full, n, mainSeen, stops[n/2], stops[n-1])
	if mainSeen == 0 {
		t.Errorf("no sample of %d read the spinning thread: the check proves nothing", n)
	}
	if stops[n/2] > DefaultMaxStop {
		t.Errorf("median stop %v, over %v", stops[n/2], DefaultMaxStop)
	}
}

// A sample puts a thread asleep in a lock to sleep twice, no more: in its
// stop, and back in its wait once let go, however often the scheduler
// preempts it on the way (the timeslices of its schedstat count those
// too). The engine takes any more sleeps between two looks for the
// thread's own progress (timer's stopSleeps).
func TestSampleSleepsTwice(t *testing.T) {
	privileged.Root(t)
	pid := testutil.StartPython(t, "import threading\nl = threading.Lock()\nl.acquire()\nprint('ready', flush=True)\nl.acquire()\n")
	// asleep in the lock, its count settled
	settled := func() uint64 {
		t.Helper()
		var last uint64
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			st, err := procfs.ReadTaskStat(pid, pid)
			if err != nil {
				t.Fatal(err)
			}
			n, err := procfs.ReadSleeps(pid, pid)
			if err != nil {
				t.Fatal(err)
			}
			if st.State == 'S' && n == last {
				return n
			}
			last = n
		}
		t.Fatal("the main thread never settled asleep")
		return 0
	}
	s := &Sampler{Unwinder: native.NewUnwinder(nil)}
	const n = 100
	for range 3 {
		before := settled()
		for range n {
			if _, err := s.Take(pid); err != nil {
				t.Fatal(err)
			}
		}
		if d := settled() - before; d != 2*n {
			t.Fatalf("%d samples put the thread to sleep %d times, want %d", n, d, 2*n)
		}
	}
}

// Sample hands the engine what it takes; a process that is gone fails.
func TestSampleGone(t *testing.T) {
	privileged.Root(t)
	s := &Sampler{Unwinder: native.NewUnwinder(nil)}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sample(cmd.Process.Pid, 1); err == nil {
		t.Error("sampled an exited process")
	}
}

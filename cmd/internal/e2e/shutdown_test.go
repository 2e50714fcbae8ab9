package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// TestLauncherExitsWithJob runs a short healthy job under the launcher five
// times while two busy loops load both CPUs: each time the launcher exits
// with the job's status within 5 s of the job's last line, although the
// job's libraries were probed (their links detach in the background).
func TestLauncherExitsWithJob(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	for range 2 {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	}
	for i := range 5 {
		p := launch(t, b, job{steps: 8, extra: []string{"--step-ms", "10"}}, t.TempDir(), timeout)
		code := p.waitExit(2 * time.Minute)
		exited := time.Now() // Done closes once it exited and its output is read
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i, code, tail(p.output(), 30))
		}
		lines := p.Lines(0)
		var last time.Time
		for _, l := range lines {
			if _, _, ok := testbed.StepDone(l.Text); ok {
				last = l.At
			}
		}
		if last.IsZero() {
			t.Fatalf("run %d: no step done\n%s", i, tail(p.output(), 30))
		}
		took := exited.Sub(last)
		t.Logf("run %d: the launcher exited %v after the job's last step", i, took.Round(time.Millisecond))
		if took > 5*time.Second {
			t.Errorf("run %d: the launcher exited %v after its job's last step, want within 5s", i, took)
		}
	}
}

// TestWatchEndedHoldsNothing ends `xpu-timer watch --pid` the way an
// operator does, with SIGTERM, while the process it watches is held at an
// exec (stopped until its new code is probed): the watch exits 0, and the
// process goes on. Killed by the signal, the watch left it stopped for
// good.
func TestWatchEndedHoldsNothing(t *testing.T) {
	w, pid := heldUnderStoppedWatch(t)
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := w.waitExit(30 * time.Second); code != 0 {
		t.Errorf("watch exited %d on SIGTERM, want 0\n%s", code, w.output())
	}
	if !stateWithin(pid, 'S', 5*time.Second) {
		t.Fatalf("pid %d still %c after the watch ended: left stopped", pid, state(pid))
	}
}

// TestWatchKilledHoldsNothing kills the watch with SIGKILL (as the OOM
// killer does) while the process it watches is held at an exec: the
// watch's Close never runs, and its guard (ebpf, holdguard_linux.go)
// resumes the process, then exits. Without the guard the process stayed
// stopped for good.
func TestWatchKilledHoldsNothing(t *testing.T) {
	w, pid := heldUnderStoppedWatch(t)
	guards := holdGuards(w.cmd.Process.Pid)
	if len(guards) != 1 {
		t.Fatalf("the watch has %d hold guards, want 1", len(guards))
	}
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.waitExit(30 * time.Second)
	if !stateWithin(pid, 'S', 5*time.Second) {
		t.Fatalf("pid %d still %c after the watch was killed: left stopped", pid, state(pid))
	}
	for end := time.Now().Add(5 * time.Second); procfs.Alive(guards[0]); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the hold guard %d still runs 5 s after it resumed the held process", guards[0])
		}
	}
}

// TestAgentEndedBySignal ends `xpu-timer agent`, following a running
// job, with each signal that ends a daemon run by hand, one agent after
// another on the same job: SIGHUP (its terminal closed), SIGINT, SIGTERM.
// Each agent exits 0 (its Close resumed what it held and detached its
// probes), and every rank trains on after it. Before, SIGHUP killed the
// agent unclosed.
func TestAgentEndedBySignal(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	ns := fmt.Sprintf("sig-%d", time.Now().UnixNano())
	jp := start(t, job{steps: 1_000_000, extra: []string{"--step-ms", "5"}}.args(b), "POD_NAMESPACE="+ns)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM} {
		a := start(t, []string{bins.xpu, "agent", "--scan-interval", "1s", "--namespaces", ns,
			"--timeline-path", t.TempDir(), "--port", "0"})
		a.until("every rank followed", 60*time.Second, func() bool { return len(a.matching(followingRe)) >= nproc })
		if err := a.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := a.waitExit(30 * time.Second); code != 0 {
			t.Fatalf("the agent exited %d on %v, want 0\n%s", code, sig, a.output())
		}
		after := allDone(jp) + 1
		jp.until(fmt.Sprintf("every rank done with step %d, after the agent ended by %v", after, sig), 30*time.Second,
			func() bool { return len(jp.stepDone(after)) == nproc })
		t.Logf("%v: the agent exited 0, the job trained on (step %d)", sig, after)
	}
}

// allDone is the last step every rank of p's job is done with (-1: none).
func allDone(p *proc) int {
	done := map[int]int{}
	for _, l := range p.Lines(0) {
		if r, n, ok := testbed.StepDone(l.Text); ok {
			done[r] = max(done[r], n)
		}
	}
	if len(done) < nproc {
		return -1
	}
	last := -1
	for _, n := range done {
		if last < 0 || n < last {
			last = n
		}
	}
	return last
}

// heldUnderStoppedWatch starts a process that waits, then execs, and
// `xpu-timer watch --pid` on it; once attached, it stops the watch
// (SIGSTOP) and lets the process exec, which the programs hold (state T)
// while nobody reads their record. It returns the watch, still stopped
// (the caller's signals decide how it ends; cleanup lets it go on), and
// the held process's pid.
func heldUnderStoppedWatch(t *testing.T) (*proc, int) {
	t.Helper()
	privileged.Root(t)
	testbed.Build(t) // the binaries
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	target := exec.Command("sh", "-c", `read x < "$0"; exec sleep 60`, fifo)
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Process.Kill(); target.Wait() })
	pid := target.Process.Pid
	w := start(t, []string{bins.xpu, "watch", "--timeout", "300s", "--pid", strconv.Itoa(pid)})
	w.waitRe(regexp.MustCompile(`"event":"attach".*"pid":`+strconv.Itoa(pid)+`\b`), 30*time.Second)
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.cmd.Process.Signal(syscall.SIGCONT) })
	if err := os.WriteFile(fifo, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !stateWithin(pid, 'T', 5*time.Second) {
		t.Fatalf("pid %d was not held at its exec (state %c): the test measured nothing", pid, state(pid))
	}
	return w, pid
}

// holdGuards are the hold guards among pid's children.
func holdGuards(pid int) []int {
	var out []int
	for _, c := range procfs.Descendants(pid) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c)); err == nil && strings.HasPrefix(string(b), "xpu-timer-holdguard\x00") {
			out = append(out, c)
		}
	}
	return out
}

// state is a process's state letter, or 0 when it cannot be read.
func state(pid int) byte {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return 0
	}
	return st.State
}

// stateWithin waits up to d for pid to be in state s.
func stateWithin(pid int, s byte, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if state(pid) == s {
			return true
		}
	}
	return false
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/gate"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// firstCallProgram builds testdata/firstcall.c (dlopen of the testbed's
// driver at its start, then one call) and returns its arguments.
func firstCallProgram(t *testing.T) []string {
	bed := testbed.Build(t)
	prog := gcc(t, filepath.Join(t.TempDir(), "firstcall-dlopen"), "testdata/firstcall.c", "-ldl")
	return []string{prog, "0", bed.Lib("libcuda.so.1")}
}

// startFollowed starts args held at its exec, follows it with tr and lets
// it go.
func startFollowed(t *testing.T, tr *Tracer, args []string) *exec.Cmd {
	t.Helper()
	cmd, g, err := gate.Start(func() *exec.Cmd { return exec.Command(args[0], args[1:]...) })
	if err != nil {
		t.Fatal(err)
	}
	ferr := tr.Follow(cmd.Process.Pid)
	if err := g.Open(); err != nil || ferr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err, ferr)
	}
	return cmd
}

// waitExit waits at most d for cmd and fails unless it exits with 0.
func waitExit(t *testing.T, cmd *exec.Cmd, d time.Duration, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		st, _ := procfs.ReadStat(cmd.Process.Pid)
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s: still running after %v, state %c", what, d, st.State)
	}
}

// A tracer nobody reads holds no process: a follower that never runs its
// loop (or stopped it) cannot stop a job.
func TestNoReaderNoHold(t *testing.T) {
	args := firstCallProgram(t)
	tr := newTracer(t, Options{})
	cmd := startFollowed(t, tr, args)
	waitExit(t, cmd, 10*time.Second, "a process followed by a tracer that does not read")
	if st := tr.Stats(); st.Holds != 0 {
		t.Fatalf("%d holds with no reader", st.Holds)
	}
}

// A process held at its load while the reader is stuck is let go when the
// tracer closes: the agent that leaves never leaves a job stopped.
func TestHeldResumedAtClose(t *testing.T) {
	args := firstCallProgram(t)
	tr := newTracer(t, Options{})
	stuck, release := make(chan int, 4), make(chan struct{})
	tr.f.onLoader = func(pid int, _ uint64) { // under f.mu, on the follower's goroutine: a stuck follower
		stuck <- pid
		<-release
	}
	defer close(release)
	record(t, tr)
	cmd := startFollowed(t, tr, args)
	select {
	case <-stuck:
	case <-time.After(10 * time.Second):
		t.Fatal("no loader record in 10 s")
	}
	// The program sent SIGSTOP before it submitted the record; the thread
	// stops as it leaves the kernel, which may be a moment after the
	// record is read.
	var st procfs.Stat
	var err error
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st, err = procfs.ReadStat(cmd.Process.Pid); err != nil || st.State == 'T' {
			break
		}
	}
	if err != nil || st.State != 'T' {
		t.Fatalf("process at its dlopen, reader stuck: state %c (%v), want T (held)", st.State, err)
	}
	go tr.Close()
	waitExit(t, cmd, 5*time.Second, "a held process after Close")
}

// A process is held once per change of its libraries, at the loader's call
// that ends it (r_state RT_CONSISTENT), not also at the one that begins
// it: a program that dlopens the driver at its start is held twice, once
// for the libraries ld.so maps before main and once for the dlopen (four
// times before). The first call into the driver is still seen
// (TestFirstCallProbed).
func TestHeldOncePerLoad(t *testing.T) {
	args := firstCallProgram(t)
	var holds []uint64
	for range 3 {
		tr := newTracer(t, Options{})
		rec := record(t, tr)
		cmd := startFollowed(t, tr, args)
		waitExit(t, cmd, 10*time.Second, "the program that dlopens the driver")
		holds = append(holds, tr.Stats().Holds)
		rec.cancel()
		tr.Close()
	}
	for _, n := range holds {
		if n != 2 {
			t.Fatalf("holds per start %v, want 2 each", holds)
		}
	}
}

// The reader goes on delivering while the follower is stuck under its
// lock (here in a loader record's hook, as in a long scan): processes the
// follower has not caught up with fork and exit, and their records come
// all the same; the follower's queue keeps them for when it is back.
func TestReaderRunsWhileFollowerStuck(t *testing.T) {
	args := firstCallProgram(t)
	tr := newTracer(t, Options{})
	stuck, release := make(chan int, 1), make(chan struct{})
	tr.f.onLoader = func(pid int, _ uint64) { // under f.mu, on the follower's goroutine
		select {
		case stuck <- pid:
		default:
		}
		<-release
	}
	defer close(release)
	rec := record(t, tr)
	sh := start(t, "/bin/sh", append([]string{"-c", `echo ready; read x; "$0" "$1" "$2" & read y; for i in 1 2 3; do ( : ); done; echo done; read z`}, args...)...)
	sh.until(t, "ready")
	if err := tr.Follow(sh.pid()); err != nil {
		t.Fatal(err)
	}
	sh.send(t, "go")
	select {
	case <-stuck:
	case <-time.After(10 * time.Second):
		t.Fatal("no loader record in 10 s")
	}
	sh.send(t, "go")
	sh.until(t, "done")
	rec.waitFor(t, "three subshells' forks and exits with the follower stuck", func(evs []timer.Event, _ []Notice) bool {
		forked := map[int]bool{}
		exited := 0
		for _, ev := range evs {
			switch {
			case ev.Kind == timer.KindProcessExec && ev.Parent == sh.pid():
				forked[ev.PID] = true
			case ev.Kind == timer.KindProcessExit && forked[ev.PID]:
				exited++
			}
		}
		return exited >= 3 // the background program's exit does not come: it is held
	})
	select {
	case <-release:
		t.Fatal("released early")
	default:
	}
}

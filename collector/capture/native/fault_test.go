//go:build linux && amd64

package native

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/monoclock"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
)

// launchers start a target as our child (stopped through the helper
// process) and as a grandchild (stopped by this process).
var launchers = map[string]func(testing.TB, string, ...string) *target{
	"child":      launch,
	"grandchild": launchGrandchild,
}

// underEachLauncher runs f as a subtest per launcher, on bin started
// with arg and settled with one thread running.
func underEachLauncher(t *testing.T, bin, arg string, f func(t *testing.T, tg *target)) {
	for name, launch := range launchers {
		t.Run(name, func(t *testing.T) {
			f(t, settled(t, launch(t, bin, arg), 1))
		})
	}
}

// TestTargetExitsMidDump kills the target while its threads are stopped:
// the dump returns what it copied or ErrExited, and leaves nothing traced,
// so the dead target is reaped.
func TestTargetExitsMidDump(t *testing.T) {
	privileged.Root(t)
	bin := build(t, "threads.c")
	underEachLauncher(t, bin, "5", func(t *testing.T, tg *target) {
		res, err := NewUnwinder(nil).Dump(tg.pid, Options{WhileStopped: func() error {
			return syscall.Kill(tg.pid, syscall.SIGKILL)
		}})
		if err != nil && !errors.Is(err, ErrExited) {
			t.Fatalf("dump: %v", err)
		}
		if err == nil && len(res.Threads) == 0 {
			t.Fatal("no threads and no error")
		}
		if !tg.waitExit(5 * time.Second) {
			t.Fatal("the killed target was not reaped: a thread was left traced")
		}
		if _, err := NewUnwinder(nil).Dump(tg.pid, Options{}); !errors.Is(err, ErrNoProcess) && !errors.Is(err, ErrExited) {
			t.Errorf("dump of an exited process: %v", err)
		}
	})
}

// TestStopBound runs a callback longer than MaxStop while the threads are
// stopped: at the bound they run again, the callback still going.
func TestStopBound(t *testing.T) {
	privileged.Root(t)
	bin := build(t, "threads.c")
	underEachLauncher(t, bin, "5", func(t *testing.T, tg *target) {
		resumed := false
		res, err := NewUnwinder(nil).Dump(tg.pid, Options{MaxStop: 200 * time.Millisecond, WhileStopped: func() error {
			resumed = running(tg.pid, 10*time.Second)
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		if !resumed {
			t.Fatal("the threads stayed stopped past MaxStop")
		}
		for _, th := range res.Threads {
			if th.Error != "" || len(th.Native) < 2 {
				t.Errorf("thread %d: %d frames, error %q", th.TID, len(th.Native), th.Error)
			}
		}
		released(t, tg.pid)
	})
}

// running waits up to d for every thread of pid to be out of its tracing
// stop and untraced.
func running(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tids, err := procfs.Tasks(pid)
		if err != nil {
			return false
		}
		free := 0
		for _, tid := range tids {
			if tracer, stopped, ok := traceState(pid, tid); ok && !stopped && tracer == "0" {
				free++
			}
		}
		if free == len(tids) {
			return true
		}
	}
	return false
}

// TestDumperKilled SIGKILLs a dumping child process while the target is
// stopped; the target must run on, traced by nobody.
func TestDumperKilled(t *testing.T) {
	if pid := os.Getenv("XPU_NATIVE_DUMP_CHILD"); pid != "" {
		p, _ := strconv.Atoi(pid)
		NewUnwinder(nil).Dump(p, Options{MaxStop: time.Hour, WhileStopped: func() error {
			fmt.Println("stopped")
			time.Sleep(time.Hour)
			return nil
		}})
		return
	}
	privileged.Root(t)
	tg := start(t, build(t, "threads.c"), 1, "5")
	before := tg.progress(t)
	child := exec.Command(os.Args[0], "-test.run=^TestDumperKilled$")
	child.Env = append(os.Environ(), "XPU_NATIVE_DUMP_CHILD="+strconv.Itoa(tg.pid))
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "stopped") {
		t.Fatalf("child said %q", buf[:n])
	}
	// Every thread of the target is in a tracing stop now.
	tids, err := procfs.Tasks(tg.pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if st, err := procfs.ReadTaskStat(tg.pid, tid); err != nil || st.State != 't' {
			t.Errorf("thread %d not stopped while the dumper holds it: state %c, %v", tid, st.State, err)
		}
	}
	child.Process.Kill()
	child.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := tg.progress(t)
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("target made no progress after the dumper died: %d -> %d", before, after)
		}
		time.Sleep(10 * time.Millisecond)
	}
	released(t, tg.pid)
}

// TestDiskSleep dumps a process in uninterruptible sleep: its state only,
// no thread stopped.
func TestDiskSleep(t *testing.T) {
	privileged.Root(t)
	tg := launch(t, build(t, "vfork.c"))
	for i := 0; ; i++ {
		if st, err := procfs.ReadStat(tg.pid); err == nil && st.State == 'D' {
			break
		}
		if i > 2000 {
			t.Fatal("the vfork parent did not enter state D")
		}
		time.Sleep(time.Millisecond)
	}
	kids, err := procfs.Children(tg.pid)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of %d: %v, %v", tg.pid, kids, err)
	}
	t.Cleanup(func() { syscall.Kill(kids[0], syscall.SIGKILL) })
	res, err := NewUnwinder(nil).Dump(tg.pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.State, "D") || len(res.Threads) != 0 || res.StoppedFor != 0 {
		t.Errorf("dump of a process in state D: %+v", res)
	}
	released(t, tg.pid)
}

// TestManyThreads dumps a process of 500 threads.
func TestManyThreads(t *testing.T) {
	privileged.Root(t)
	tg := start(t, build(t, "threads.c"), 1, "5", "494")
	res, err := NewUnwinder(nil).Dump(tg.pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Threads) != 500 {
		t.Fatalf("%d threads, want 500", len(res.Threads))
	}
	waiting := 0
	for _, th := range res.Threads {
		if th.Error != "" {
			t.Errorf("thread %d: %s", th.TID, th.Error)
		}
		for _, f := range th.Native {
			if f.Func == "cond_thread" {
				waiting++
			}
		}
	}
	if waiting != 495 {
		t.Errorf("%d threads in cond_thread, want 495", waiting)
	}
	if res.Partial {
		t.Error("partial dump")
	}
	released(t, tg.pid)
	t.Logf("500 threads stopped for %v", res.StoppedFor)
}

// TestZombieThread dumps a process whose main thread is a zombie.
func TestZombieThread(t *testing.T) {
	privileged.Root(t)
	tg := launch(t, build(t, "zombie.c"))
	pid := tg.pid
	for i := 0; ; i++ {
		st, _ := procfs.ReadTaskStat(pid, pid)
		if st.State == 'Z' {
			break
		}
		if i > 2000 {
			t.Fatal("main thread did not become a zombie")
		}
		time.Sleep(time.Millisecond)
	}
	res, err := NewUnwinder(nil).Dump(pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var zombie, worker bool
	for _, th := range res.Threads {
		if th.TID == pid {
			zombie = strings.Contains(th.Error, "zombie")
		} else {
			for _, f := range th.Native {
				worker = worker || f.Func == "worker"
			}
		}
	}
	if !zombie || !worker {
		t.Errorf("zombie marked %v, worker unwound %v: %+v", zombie, worker, res.Threads)
	}
	released(t, pid)
}

// TestUnreadableMemory unwinds registers that point nowhere: an error per
// thread, no panic.
func TestUnreadableMemory(t *testing.T) {
	privileged.Root(t)
	tg := start(t, build(t, "threads.c"), 1, "5")
	proc, err := symbols.NewCache().Process(tg.pid)
	if err != nil {
		t.Fatal(err)
	}
	live := func(b []byte, addr uint64) (int, error) { return readMem(tg.pid, b, addr) }
	for _, s := range []*snapshot{
		{tid: tg.pid}, // all zero
		{tid: tg.pid, stack: []byte{1, 2, 3}, stackLo: 0x1000},
	} {
		s.regs.Rip = 0xdead0000
		s.regs.Rsp = 0x10
		s.regs.Rbp = 0x20
		frames, err := unwind(proc, s, live, nil, true)
		if err == nil || len(frames) != 1 || frames[0].Func != "??" {
			t.Errorf("unwind of garbage: %v, %+v", err, frames)
		}
	}
}

// TestWaitedChild dumps our own child while a goroutine waits for it, as
// the launcher does: the wait must not return, and the dumps are whole.
func TestWaitedChild(t *testing.T) {
	privileged.Root(t)
	tg := start(t, build(t, "threads.c"), 1, "5")
	for i := 0; i < 3; i++ {
		res, err := NewUnwinder(nil).Dump(tg.pid, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Partial || len(res.Threads) != 6 {
			t.Errorf("dump %d: partial %v, %d threads", i, res.Partial, len(res.Threads))
		}
		for _, th := range res.Threads {
			if th.Error != "" || len(th.Native) < 2 {
				t.Errorf("dump %d, thread %d: %d frames, error %q", i, th.TID, len(th.Native), th.Error)
			}
		}
	}
	select {
	case <-tg.exited:
		t.Fatal("the wait for the child returned during the dumps")
	default:
	}
	before := tg.progress(t)
	for tg.progress(t) == before {
		time.Sleep(time.Millisecond)
	}
	released(t, tg.pid)
}

// Result.Released is stamped as the stopped threads are let go: after
// every moment they were stopped (WhileStopped runs then), before Dump
// returns, whichever way the threads were stopped.
func TestReleasedStamp(t *testing.T) {
	privileged.Root(t)
	bin := build(t, "threads.c")
	underEachLauncher(t, bin, "3", func(t *testing.T, tg *target) {
		var stopped int64
		res, err := NewUnwinder(nil).Dump(tg.pid, Options{WhileStopped: func() error {
			stopped = monoclock.Now()
			return nil
		}})
		end := monoclock.Now()
		if err != nil {
			t.Fatal(err)
		}
		if stopped == 0 || res.Released <= stopped || res.Released > end {
			t.Fatalf("released at %d, stopped at %d, returned at %d", res.Released, stopped, end)
		}
		released(t, tg.pid)
	})
}

// TestStragglers: with a bound too short for the threads of a 20-thread
// process to stop (2 µs), some do not stop in it; Options.Stragglers
// copies each of those as it stops, under both launchers (the stop helper
// carries the option). Without it they are not read. (Threads that
// stopped in time but could not be copied within the bound stay unread
// either way; so a dump in which every thread happened to stop in time,
// the stopper slow to look at the clock on a busy machine, reads none:
// the dumps with stragglers' wait are repeated until one had stragglers,
// and none may leave a straggler unread.)
func TestStragglers(t *testing.T) {
	privileged.Root(t)
	for name, launch := range launchers {
		t.Run(name, func(t *testing.T) {
			tg := settled(t, launch(t, build(t, "threads.c"), "5", "14"), 1)
			dump := func(late time.Duration) (read, unstopped int) {
				res, err := NewUnwinder(nil).Dump(tg.pid, Options{MaxStop: 2 * time.Microsecond, Stragglers: late})
				if err != nil {
					t.Fatal(err)
				}
				for _, th := range res.Threads {
					switch {
					case len(th.Native) > 0:
						read++
					case strings.Contains(th.Error, "did not stop"):
						unstopped++
					}
				}
				t.Logf("stragglers' wait %v: %d of %d threads read, %d not stopped", late, read, len(res.Threads), unstopped)
				if !running(tg.pid, 10*time.Second) { // those not read are let go as they stop
					t.Fatal("threads left stopped or traced")
				}
				released(t, tg.pid)
				return read, unstopped
			}
			made := false
			for range 20 {
				if _, unstopped := dump(0); unstopped > 0 {
					made = true
					break
				}
			}
			if !made {
				t.Fatal("every thread stopped within the bound in 20 dumps: the test makes no straggler")
			}
			for i := 0; ; i++ {
				read, unstopped := dump(2 * time.Second)
				if unstopped > 0 {
					t.Fatalf("stragglers' wait 2s: %d threads not stopped, want every straggler read", unstopped)
				}
				if read > 0 {
					break
				}
				if i == 20 {
					t.Fatal("no dump with stragglers' wait had a straggler in 20")
				}
			}
		})
	}
}

// TestEarlierHold: a thread an earlier stop still holds (seized, not
// stopped yet, left to its settle) cannot be seized again. A dump waits,
// at most half of MaxStop, for that stop to let go of it: past the bound, the
// thread's error names the earlier stop; let go meanwhile, it is read.
// (A capture retried after a straggler used to get "ptrace seize:
// operation not permitted" for it, its stacks lost.)
func TestEarlierHold(t *testing.T) {
	privileged.Root(t)
	tg := settled(t, launchGrandchild(t, build(t, "threads.c"), "5"), 1)
	tid := tg.pid // the main thread, asleep in pthread_join
	let, done := make(chan struct{}), make(chan struct{})
	seized := make(chan error, 1)
	go func() {
		// The earlier stop's tracer: a thread of its own, as Dump's; its
		// seize ends with it, should the test fail first.
		runtime.LockOSThread()
		defer close(done)
		err := unix.PtraceSeize(tid)
		seized <- err
		if err != nil {
			return
		}
		<-let
		// Let go as settle does: once stopped.
		if err := unix.PtraceInterrupt(tid); err == nil {
			var ws unix.WaitStatus
			unix.Wait4(tid, &ws, unix.WALL, nil)
			unix.PtraceDetach(tid)
		}
	}()
	if err := <-seized; err != nil {
		t.Fatal(err)
	}
	h := hold(tg.pid, []*tracee{{snapshot: &snapshot{tid: tid}, seized: true}})
	main := func(res Result) stack.Thread {
		for _, th := range res.Threads {
			if th.TID == tid {
				return th
			}
		}
		t.Fatalf("no main thread %d in the dump", tid)
		return stack.Thread{}
	}

	res, err := NewUnwinder(nil).Dump(tg.pid, Options{MaxStop: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if th := main(res); len(th.Native) > 0 || !strings.Contains(th.Error, "earlier stop") {
		t.Errorf("main thread held by an earlier stop: %d frames, error %q, want none and the earlier stop named", len(th.Native), th.Error)
	}

	go func() {
		time.Sleep(50 * time.Millisecond) // the dump is waiting by then
		close(let)
		<-done
		h.release()
	}()
	res, err = NewUnwinder(nil).Dump(tg.pid, Options{MaxStop: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if th := main(res); len(th.Native) == 0 || th.Error != "" {
		t.Errorf("main thread let go while the dump waited: %d frames, error %q, want it read", len(th.Native), th.Error)
	}
	released(t, tg.pid)
}

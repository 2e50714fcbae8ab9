//go:build linux && (386 || amd64)

package ebpf

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

func launches(evs []timer.Event, pid int) int {
	n := 0
	for _, e := range evs {
		if e.PID == pid && e.Kind == timer.KindLaunch {
			n++
		}
	}
	return n
}

// A library dlopen'ed after Follow is found and probed; kernels of a
// library loaded after the first launches are named; the process's exit
// releases the probes.
func TestLateLibraryAndExit(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) { lateLibraryAndExit(t, single) })
	}
}

func lateLibraryAndExit(t *testing.T, single bool) {
	privileged.Root(t)
	s := buildStubs(t)
	tr := newTracer(t, Options{SingleProbes: single, Linger: 200 * time.Millisecond})
	if want := !single && features.HaveBPFLinkUprobeMulti() == nil; tr.multi != want {
		t.Fatalf("uprobe_multi links used: %v, want %v", tr.multi, want)
	}
	rec := record(t, tr)
	bed := testbed.Build(t)
	p := start(t, s.Calls, "late", bed.Lib("libcudart.so.12"), "cuda", bed.Lib("libfakekernels.so"))
	p.until(t, "ready")
	if err := tr.Follow(p.pid()); err != nil {
		t.Fatal(err)
	}
	// Before the dlopen only the loader probe (ld.so's _dl_debug_state).
	if st := tr.Stats(); st.Probes != 1 || st.Processes != 1 {
		t.Fatalf("before dlopen: %+v, want the loader probe only", st)
	}
	p.send(t, "go") // dlopen the runtime, which loads the driver
	p.until(t, "loaded")
	// A runtime launch is recorded in the driver, named by the lookup the
	// runtime makes at a kernel's first launch: launch once it is probed.
	rec.waitFor(t, "the driver probed", func(_ []timer.Event, ns []Notice) bool {
		for _, n := range ns {
			if n.PID == p.pid() && n.Kind == "attach" && strings.HasSuffix(n.Library, "/libcuda.so.1") {
				return true
			}
		}
		return false
	})
	p.send(t, "launch") // then launch every 10 ms
	rec.waitFor(t, "launches from the late library", func(evs []timer.Event, _ []Notice) bool {
		return launches(evs, p.pid()) >= 3
	})
	if st := tr.Stats(); st.Probes <= 1 {
		t.Fatalf("no probes after dlopen: %+v", st)
	}
	p.send(t, "kernels")
	p.until(t, "kernels")
	rec.waitFor(t, "a named launch from the kernel library", func(evs []timer.Event, _ []Notice) bool {
		for _, e := range evs {
			if e.PID == p.pid() && e.Kind == timer.KindLaunch && e.Kernel == "noop_kernel" {
				return true
			}
		}
		return false
	})
	p.send(t, "stop")
	if err := p.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "the exit", func(evs []timer.Event, _ []Notice) bool {
		return hasEvent(evs, p.pid(), timer.KindProcessExit)
	})
	if st := tr.Stats(); st.Probes != 0 || st.Processes != 0 {
		t.Errorf("after exit: %+v, want no probes and no processes", st)
	}
	// Nobody maps the libraries now: their probes go after Options.Linger.
	waitStats(t, tr, "idle probes detached", func(st Stats) bool { return st.Idle == 0 && st.Probes == 0 })
	for _, e := range rec.of(p.pid()) {
		if e.Kind == timer.KindLaunch && (e.Grid[1] != 1 || e.Kernel != "xpu::test::vector_add" && e.Kernel != "noop_kernel") {
			t.Errorf("launch %+v", e)
		}
	}
}

// A child forked after Follow is followed; so is its own dlopen.
func TestFollowChild(t *testing.T) {
	privileged.Root(t)
	s := buildStubs(t)
	tr := newTracer(t, Options{})
	rec := record(t, tr)
	// sh forks calls (the "; true" keeps sh from exec'ing it in place).
	p := start(t, "/bin/sh", "-c", `read x; "$0" late "$1" mc; true`, s.Calls, testbed.Build(t).Lib("libmcruntime.so.2"))
	if err := tr.Follow(p.pid()); err != nil {
		t.Fatal(err)
	}
	p.send(t, "fork")
	p.until(t, "ready")
	var child, parent int
	rec.waitFor(t, "the child's fork", func(evs []timer.Event, _ []Notice) bool {
		for _, e := range evs {
			if e.Kind == timer.KindProcessExec && e.PID != p.pid() {
				child, parent = e.PID, e.Parent
				return true
			}
		}
		return false
	})
	if parent != p.pid() {
		t.Errorf("the child's fork names parent %d, want %d", parent, p.pid())
	}
	if !tr.followed.has(child) {
		t.Errorf("the kernel did not add the child %d to the followed set at its fork", child)
	}
	p.send(t, "go")
	p.until(t, "loaded")
	p.send(t, "launch")
	rec.waitFor(t, "the child's launches", func(evs []timer.Event, _ []Notice) bool {
		return launches(evs, child) >= 2
	})
	p.send(t, "stop")
	if err := p.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "both exits", func(evs []timer.Event, _ []Notice) bool {
		return hasEvent(evs, child, timer.KindProcessExit) && hasEvent(evs, p.pid(), timer.KindProcessExit)
	})
	if st := tr.Stats(); st.Probes != 0 || st.Processes != 0 {
		t.Errorf("after exit: %+v", st)
	}
	for _, pid := range []int{child, p.pid()} {
		if tr.followed.has(pid) {
			t.Errorf("process %d is still in the followed set after its exit", pid)
		}
	}
}

// A renamed, stripped library is found by its symbols; the symbols it
// lacks are reported (an optional one, EventElapsedTime, is not), and the
// rest is probed.
func TestRenamedLibraryMissingSymbol(t *testing.T) {
	privileged.Root(t)
	s := buildStubs(t)
	tr := newTracer(t, Options{})
	rec := record(t, tr)
	p := start(t, s.Calls, "cuda", s.Renamed, "-", "-", "-", "0", "1")
	p.followed(t, tr)
	rec.waitFor(t, "a device synchronize", func(evs []timer.Event, _ []Notice) bool {
		return hasEvent(evs, p.pid(), timer.KindDeviceSynchronize)
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var attach, missing *Notice
	for i, n := range rec.notices {
		if n.Library == s.Renamed && n.Kind == "attach" {
			attach = &rec.notices[i]
		}
		if n.Library == s.Renamed && n.Kind == "missing" {
			missing = &rec.notices[i]
		}
	}
	if attach == nil || !slices.Contains(attach.Attached, "cuStreamSynchronize") || !slices.Contains(attach.Attached, "cuLaunchKernel") {
		t.Errorf("attach notice %+v", attach)
	}
	if missing == nil || !slices.Contains(missing.Missing, "cuMemcpyHtoD_v2") || slices.Contains(missing.Missing, "cuStreamSynchronize") {
		t.Errorf("missing notice %+v", missing)
	}
	if hasEvent(rec.events, p.pid(), timer.KindEventElapsed) {
		t.Error("an elapsed-time event from a library without the call")
	}
}

// Call rings nobody reads fill up; what they overwrote is counted.
func TestLostEventsCounted(t *testing.T) {
	privileged.Root(t)
	s := buildStubs(t)
	tr := newTracer(t, Options{RingBufferBytes: 1024, slotsPerRing: 8})
	// About 45 call records; a CPU's ring holds 8.
	bed := testbed.Build(t)
	p := start(t, s.Calls, "cuda", bed.Lib("libcudart.so.12"), bed.Lib("libnccl.so.2"), "-", "-", "0", "1")
	p.followed(t, tr)
	deadline := time.Now().Add(10 * time.Second)
	for tr.Stats().Lost == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("nothing lost: %+v", tr.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What was not overwritten (the last records) is still delivered.
	rec := record(t, tr)
	rec.waitFor(t, "the last calls", func(evs []timer.Event, _ []Notice) bool {
		for _, ev := range evs {
			if ev.PID == p.pid() && ev.Kind < timer.KindProcessExec {
				return true
			}
		}
		return false
	})
}

func TestFollowMissingProcess(t *testing.T) {
	privileged.Root(t)
	tr := newTracer(t, Options{})
	if err := tr.Follow(1 << 30); err == nil {
		t.Fatal("followed a process that does not exist")
	}
}

func TestNotPermittedIsSentinel(t *testing.T) {
	err := loadError(fmt.Errorf("load: %w", unix.EPERM))
	if !errors.Is(err, ErrNotPermitted) {
		t.Fatalf("%v is not ErrNotPermitted", err)
	}
}

// A library named by path is probed before any process loads it; one that
// cannot be is a notice, not a failure.
func TestPreloadLibraries(t *testing.T) {
	privileged.Root(t)
	bed := testbed.Build(t)
	driver, cudart := bed.Lib("libcuda.so.1"), bed.Lib("libcudart.so.12")
	// The CUDA runtime exports no probed call: it is probed in the driver.
	tr := newTracer(t, Options{Libraries: []string{driver, "/nonexistent/libcuda.so.1", "/bin/true", cudart, "libnccl.so.2"}})
	if st := tr.Stats(); st.Probes == 0 {
		t.Fatalf("nothing probed ahead: %+v", st)
	}
	rec := record(t, tr)
	rec.waitFor(t, "the notices", func(_ []timer.Event, ns []Notice) bool { return len(ns) >= 4 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var attached, missingFile, noSyms, runtimeNoSyms bool
	for _, n := range rec.notices {
		switch {
		case n.Kind == "attach" && n.Library == driver && n.PID == 0:
			attached = slices.Contains(n.Attached, "cuStreamSynchronize")
		case n.Kind == "error" && n.Library == "/nonexistent/libcuda.so.1":
			missingFile = errors.Is(n.Err, unix.ENOENT)
		case n.Kind == "error" && n.Library == "/bin/true":
			noSyms = errors.Is(n.Err, ErrNoProbedSymbols)
		case n.Kind == "error" && n.Library == cudart:
			runtimeNoSyms = errors.Is(n.Err, ErrNoProbedSymbols)
		}
	}
	if !attached || !missingFile || !noSyms || !runtimeNoSyms {
		t.Errorf("attached %v, missing file %v, no symbols %v (the CUDA runtime %v): %+v", attached, missingFile, noSyms, runtimeNoSyms, rec.notices)
	}
}

// waitStats polls the tracer's stats (its housekeeping runs on the reader's
// poll interval) until ok holds, or fails after 5 s.
func waitStats(t *testing.T, tr *Tracer, what string, ok func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok(tr.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: stats %+v", what, tr.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

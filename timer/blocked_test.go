package timer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// input is one thing handed to the engine at a time: an event, or a
// native sample of one process.
type input struct {
	ev     *Event
	sample *Sample
}

func ev(e Event) input { return input{ev: &e} }

// seen is a sample of pid at t (seconds) in which tids are inside a GPU
// call that no frame names (a launch through a stub as NVIDIA's 535
// driver's, called from ctypes).
func seen(t float64, pid int, tids ...int) input {
	s := Sample{PID: pid, Time: at(t)}
	for _, tid := range tids {
		s.Waits = append(s.Waits, ThreadWait{TID: tid, Library: "libcuda.so.1", From: "ffi_call", State: 'R'})
	}
	return input{sample: &s}
}

// seenIn is a sample of pid at t in which tid is inside call, named on its
// stack.
func seenIn(t float64, pid int, call string, tid int) input {
	return input{sample: &Sample{PID: pid, Time: at(t), Waits: []ThreadWait{{TID: tid, Call: call, From: "step", State: 'R'}}}}
}

func started(t float64, pid int) input {
	return ev(Event{Time: at(t), PID: pid, TID: pid, Kind: KindProcessExec})
}

func gpuCall(t float64, pid, tid int, name string, phase Phase) input {
	return ev(Event{Time: at(t), PID: pid, TID: tid, Kind: KindCall, Phase: phase, CallName: name})
}

func pidOf(in input) int {
	if in.ev != nil {
		return in.ev.PID
	}
	return in.sample.PID
}

// TestBlockedCalls: a thread blocked in a call that is no wait of its own
// (a launch behind a full queue or under CUDA_LAUNCH_BLOCKING, a free, a
// collective) is a GPU wait when its process has GPU work not known
// complete: known from the probes alone for a call whose return is
// probed, from the probes and a native sample past the timeout for one
// whose return is not. The decisions must not turn on the order the
// processes' inputs come in (each process's in time order).
func TestBlockedCalls(t *testing.T) {
	const a, b = 1, 2
	hangKernel := launch(100, a, a, 0, "spin_kernel")
	queueFull := []input{ // spin_kernel, then launches until one waits for a slot at 100.5
		started(99, a), ev(enter(99.9, a, a, KindDeviceSynchronize, 0, 0)), ev(exit(99.95, a, a, KindDeviceSynchronize, 0, 0, 0)),
		ev(hangKernel), ev(launch(100.2, a, a, 0, "noop_kernel")), ev(launch(100.5, a, a, 0, "noop_kernel")),
	}
	type want struct {
		kind           HangKind // "" for none
		call           string   // the first waiter's
		oldest, newest string   // kernels
		stackWait      bool
	}
	for _, c := range []struct {
		name    string
		samples bool // Config.Samples
		in      []input
		check   float64
		want    map[int]want
		entered map[int]float64 // EnteredSince at check
	}{
		{
			name:    "queue full: a sample past the timeout sees the launch blocked",
			samples: true, in: append(slices.Clone(queueFull), seen(110.6, a, a)), check: 110.7,
			want: map[int]want{a: {kind: HangGPU, call: "cuLaunchKernel", oldest: "spin_kernel", newest: "noop_kernel"}},
		},
		{
			name:    "queue full: the stack names the entry point (the runtime's, here)",
			samples: true, in: append(slices.Clone(queueFull), seenIn(110.6, a, "cudaLaunchKernel", a)), check: 110.7,
			want: map[int]want{a: {kind: HangGPU, call: "cudaLaunchKernel", oldest: "spin_kernel", newest: "noop_kernel"}},
		},
		{
			name:    "queue full, no sample yet: undecided, a sample is due",
			samples: true, in: queueFull, check: 110.7,
			entered: map[int]float64{a: 100.5},
		},
		{
			name:    "queue full, seen inside before the timeout only: a sample past it is still due",
			samples: true, in: append(slices.Clone(queueFull), seen(105, a, a)), check: 110.7,
			entered: map[int]float64{a: 100.5},
		},
		{
			name:    "launched, then seen outside every GPU call: returned, nothing awaited of it",
			samples: true, in: append(slices.Clone(queueFull), seen(110.6, a)), check: 110.7,
		},
		{
			name:    "launched, then a call: the launch returned, a later sample says nothing of it",
			samples: true, in: append(slices.Clone(queueFull), ev(query(101, a, a, 7, RetNotReady)), seen(111.5, a, a)), check: 111.6,
		},
		{
			name: "a free waits for the device behind a kernel that never ends: its return is probed",
			in:   []input{started(99, a), ev(hangKernel), gpuCall(100.1, a, a, "cuMemFree_v2", PhaseEnter)}, check: 110.2,
			want: map[int]want{a: {kind: HangGPU, call: "cuMemFree_v2", oldest: "spin_kernel"}},
		},
		{
			name: "a free that returns in time",
			in:   []input{started(99, a), ev(hangKernel), gpuCall(100.1, a, a, "cuMemFree_v2", PhaseEnter), gpuCall(109, a, a, "cuMemFree_v2", PhaseExit)}, check: 110.2,
		},
		{
			name:    "a module compiled for long with no GPU work outstanding, its stack sampled twice: no wait",
			samples: true,
			in: []input{started(99, a), ev(launch(99.5, a, a, 0, "gemm")), ev(enter(99.6, a, a, KindDeviceSynchronize, 0, 0)),
				ev(exit(99.7, a, a, KindDeviceSynchronize, 0, 0, 0)), gpuCall(100, a, a, "cuModuleLoadData", PhaseEnter),
				seen(105, a, a), seen(116, a, a)},
			check: 116.1,
		},
		{
			name:    "the same followed while it ran: its stack alone judges (it may wait on work issued before the probes came)",
			samples: true,
			in: []input{ev(launch(99.5, a, a, 0, "gemm")), ev(enter(99.6, a, a, KindDeviceSynchronize, 0, 0)),
				ev(exit(99.7, a, a, KindDeviceSynchronize, 0, 0, 0)), gpuCall(100, a, a, "cuModuleLoadData", PhaseEnter),
				seen(105, a, a), seen(116, a, a)},
			check: 116.1,
			want:  map[int]want{a: {kind: HangGPU, call: "a call into libcuda.so.1 from ffi_call (seen on its stack)", stackWait: true}},
		},
		{
			name:    "a synchronize that lasts with nothing outstanding the probes saw (events lost): its stack judges",
			samples: true,
			in: []input{started(99, a), ev(enter(100, a, a, KindDeviceSynchronize, 0, 0)),
				seenIn(105, a, "cuCtxSynchronize_v2", a), seenIn(116, a, "cuCtxSynchronize_v2", a)},
			check: 116.1,
			want:  map[int]want{a: {kind: HangGPU, call: "cuCtxSynchronize_v2 from step (seen on its stack)", stackWait: true}},
		},
		{
			name:    "CUDA_LAUNCH_BLOCKING with kernels of 3 s: every launch returns in time",
			samples: true,
			in: []input{started(99, a), ev(launch(100, a, a, 0, "slow")), ev(launch(103, a, a, 0, "slow")), ev(launch(106, a, a, 0, "slow")),
				ev(launch(109, a, a, 0, "slow")), seen(110.5, a, a), ev(launch(112, a, a, 0, "slow")), seen(115, a, a)},
			check:   115.1,
			entered: map[int]float64{a: 112},
		},
		{
			name:    "peers in an all-reduce under CUDA_LAUNCH_BLOCKING, the faulty rank in its launch: every one sampled",
			samples: true,
			in: []input{started(99, a), started(99, b), ev(commInit(99.1, a, 0xc, 1, 0, 2)), ev(commInit(99.1, b, 0xc, 1, 1, 2)),
				ev(hangKernel), ev(allReduce(100.2, b, 0xc, 5, 64)), seen(110.6, a, a), seenIn(110.6, b, "ncclAllReduce", b)},
			check: 110.7,
			want: map[int]want{a: {kind: HangGPU, call: "cuLaunchKernel", oldest: "spin_kernel"},
				b: {kind: HangGPU, call: "ncclAllReduce"}},
		},
		{
			name:    "a rank blocked in a launch whose peer waits on a collective it owes: not host before a sample tells",
			samples: true,
			in: []input{started(99, a), started(99, b), ev(commInit(99.1, a, 0xc, 1, 0, 2)), ev(commInit(99.1, b, 0xc, 1, 1, 2)),
				ev(hangKernel), ev(allReduce(100.2, b, 0xc, 5, 64)), ev(enter(100.3, b, b, KindStreamSynchronize, 5, 0))},
			check:   110.7,
			want:    map[int]want{b: {kind: HangGPU, call: "cuStreamSynchronize"}},
			entered: map[int]float64{a: 100},
		},
		{
			name:    "the same, a sample saw the rank outside every GPU call (asleep in Python): host",
			samples: true,
			in: []input{started(99, a), started(99, b), ev(commInit(99.1, a, 0xc, 1, 0, 2)), ev(commInit(99.1, b, 0xc, 1, 1, 2)),
				ev(hangKernel), ev(allReduce(100.2, b, 0xc, 5, 64)), ev(enter(100.3, b, b, KindStreamSynchronize, 5, 0)), seen(110.6, a)},
			check: 110.7,
			want:  map[int]want{a: {kind: HangHost}, b: {kind: HangGPU, call: "cuStreamSynchronize"}},
		},
		{
			name: "the same without samples: host, as the probes alone tell",
			in: []input{started(99, a), started(99, b), ev(commInit(99.1, a, 0xc, 1, 0, 2)), ev(commInit(99.1, b, 0xc, 1, 1, 2)),
				ev(hangKernel), ev(allReduce(100.2, b, 0xc, 5, 64)), ev(enter(100.3, b, b, KindStreamSynchronize, 5, 0))},
			check: 110.7,
			want:  map[int]want{a: {kind: HangHost}, b: {kind: HangGPU, call: "cuStreamSynchronize"}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var pids []int
			for _, in := range c.in {
				if p := pidOf(in); !slices.Contains(pids, p) {
					pids = append(pids, p)
				}
			}
			slices.Sort(pids)
			for _, order := range [][]int{pids, reversedPIDs(pids)} {
				e := NewEngine(Config{HangTimeout: 10 * time.Second, Samples: c.samples})
				for _, p := range order {
					for _, in := range c.in {
						switch {
						case pidOf(in) != p:
						case in.ev != nil:
							e.Handle(*in.ev)
						default:
							e.ObserveSample(*in.sample)
						}
					}
				}
				got := map[int]want{}
				for _, h := range e.Check(at(c.check)) {
					w := c.want[h.PID]
					g := want{kind: h.Kind, stackWait: h.StackWait != nil}
					if len(h.Waiters) > 0 && h.Kind == HangGPU {
						g.call = h.Waiters[0].Call
					}
					if w.oldest != "" && h.Oldest != nil {
						g.oldest = h.Oldest.Kernel
					}
					if w.newest != "" && h.Newest != nil {
						g.newest = h.Newest.Kernel
					}
					got[h.PID] = g
				}
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Errorf("pids in order %v: decisions %v, want %v", order, got, c.want)
				}
				for _, p := range pids {
					if !c.samples {
						break // no caller without samples asks
					}
					if g, w := e.EnteredSince(p), at(c.entered[p]); g != w && (c.entered[p] != 0 || g != 0) {
						t.Errorf("pids in order %v: EnteredSince(%d) = %v, want %v", order, p, time.Duration(g), time.Duration(w))
					}
				}
			}
		})
	}
}

// A decision on a blocked launch clears when the thread makes a call
// again (the kernel ended, a slot freed), and when a sample sees the
// thread outside every GPU call; it names the launch's stream and age.
func TestBlockedLaunchRecovers(t *testing.T) {
	for _, how := range []string{"a call", "a sample"} {
		t.Run(how, func(t *testing.T) {
			e := NewEngine(Config{HangTimeout: 10 * time.Second, Samples: true})
			feed(e, Event{Time: at(99), PID: 1, TID: 1, Kind: KindProcessExec}, launch(100, 1, 1, 7, "spin_kernel"),
				launch(100.5, 1, 1, 7, "noop_kernel"))
			e.ObserveSample(Sample{PID: 1, Time: at(110.6), Waits: []ThreadWait{{TID: 1, Call: "cuLaunchKernel"}}})
			hs := e.Check(at(110.7))
			if len(hs) != 1 {
				t.Fatalf("decisions %+v", hs)
			}
			h := hs[0]
			if w := h.Waiters; len(w) != 1 || w[0].Call != "cuLaunchKernel" || w[0].Stream != 7 || w[0].Since != at(100.5) {
				t.Errorf("waiters %+v", w)
			}
			if h.AgeNs != at(110.7)-at(100) || h.Awaited != 2 {
				t.Errorf("age %v, awaited %d: want from spin_kernel's launch, 2 ops", time.Duration(h.AgeNs), h.Awaited)
			}
			if how == "a call" {
				feed(e, launch(111, 1, 1, 7, "noop_kernel"))
			} else {
				e.ObserveSample(Sample{PID: 1, Time: at(111)})
			}
			if r := e.Recovered(at(111.1)); !slices.Equal(r, []int{1}) {
				t.Errorf("recovered %v, want [1]", r)
			}
		})
	}
}

// The call a thread is in is named in the vendor's spelling.
func TestInCallNames(t *testing.T) {
	for _, c := range []struct {
		in   inCall
		want string
	}{
		{inCall{kind: KindLaunch}, "cuLaunchKernel"},
		{inCall{kind: KindLaunch, vendor: VendorMACA}, "mcLaunchKernel"},
		{inCall{kind: KindGraphLaunch}, "cuGraphLaunch"},
		{inCall{kind: KindMemcpyAsync}, "cuMemcpyAsync"},
		{inCall{kind: KindEventRecord, vendor: VendorMACA}, "mcEventRecord"},
		{inCall{kind: KindStreamWaitEvent}, "cuStreamWaitEvent"},
		{inCall{kind: KindCollective, op: OpReduceScatter}, "ncclReduceScatter"},
		{inCall{kind: KindCollective, op: OpAllReduce, vendor: VendorMACA}, "mcclAllReduce"},
		{inCall{kind: KindGroupEnd}, "ncclGroupEnd"},
		{inCall{kind: KindCommDestroy}, "ncclCommDestroy"},
		{inCall{kind: KindCall, name: "cuMemFree_v2"}, "cuMemFree_v2"},
		{inCall{kind: KindDeviceSynchronize}, "cuCtxSynchronize"},
		{inCall{kind: KindMemcpy, vendor: VendorMACA}, "mcMemcpy"},
	} {
		if got := c.in.callName(); got != c.want || strings.Contains(got, "unknown") {
			t.Errorf("%v of %v: %q, want %q", c.in.kind, c.in.vendor, got, c.want)
		}
	}
}

func reversedPIDs(pids []int) []int {
	out := slices.Clone(pids)
	slices.Reverse(out)
	return out
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
	"github.com/xpu-timer/xpu-timer/timer"
)

func mkdirTemp() (string, error) { return os.MkdirTemp("", "xpu-ebpf-test-") }

// TestMain fails the package when its tests leave goroutines behind: a
// tracer's reader, follower, collector or detaching links that outlive
// Close and Run.
func TestMain(m *testing.M) {
	testutil.MainNoLeaks(m, func() {
		if stubDir != "" {
			os.RemoveAll(stubDir)
		}
	})
}

// callLine is one "call=NAME k=v ..." line of testdata/calls.c.
type callLine struct {
	Name string
	KV   map[string]string
}

func parseCalls(t testing.TB, lines []string) []callLine {
	var out []callLine
	for _, l := range lines {
		if !strings.HasPrefix(l, "call=") {
			continue
		}
		c := callLine{KV: map[string]string{}}
		for i, f := range strings.Fields(l) {
			k, v, _ := strings.Cut(f, "=")
			if i == 0 {
				c.Name = v
				continue
			}
			c.KV[k] = v
		}
		out = append(out, c)
	}
	return out
}

// expected kinds and phases of each printed call.
var callKinds = map[string]struct {
	kind     timer.Kind
	blocking bool // an Enter and an Exit event
	atExit   bool // one event, at return
}{
	"LaunchKernel": {kind: timer.KindLaunch}, "LaunchKernelExC": {kind: timer.KindLaunch}, "cuLaunchKernel": {kind: timer.KindLaunch},
	"cuLaunchKernelEx": {kind: timer.KindLaunch}, "cuLaunchCooperativeKernel": {kind: timer.KindLaunch},
	"cuLaunchHostFunc": {kind: timer.KindLaunch}, "cuGraphLaunch": {kind: timer.KindGraphLaunch},
	"cuMemcpyHtoDAsync_v2": {kind: timer.KindMemcpyAsync}, "cuMemcpyDtoH_v2": {kind: timer.KindMemcpy, blocking: true},
	"cuEventRecordWithFlags": {kind: timer.KindEventRecord}, "cuEventQuery": {kind: timer.KindEventQuery, atExit: true},
	"cuStreamWaitEvent": {kind: timer.KindStreamWaitEvent}, "cuEventSynchronize": {kind: timer.KindEventSynchronize, blocking: true},
	"cuStreamSynchronize": {kind: timer.KindStreamSynchronize, blocking: true},
	"cuStreamQuery":       {kind: timer.KindStreamQuery, atExit: true},
	"cuCtxSynchronize_v2": {kind: timer.KindDeviceSynchronize, blocking: true},
	"GraphLaunch":         {kind: timer.KindGraphLaunch}, "MemcpyAsync": {kind: timer.KindMemcpyAsync},
	"Memcpy": {kind: timer.KindMemcpy, blocking: true}, "EventRecord": {kind: timer.KindEventRecord},
	"EventQuery": {kind: timer.KindEventQuery, atExit: true}, "StreamWaitEvent": {kind: timer.KindStreamWaitEvent},
	"EventSynchronize":  {kind: timer.KindEventSynchronize, blocking: true},
	"StreamSynchronize": {kind: timer.KindStreamSynchronize, blocking: true},
	"StreamQuery":       {kind: timer.KindStreamQuery, atExit: true},
	"DeviceSynchronize": {kind: timer.KindDeviceSynchronize, blocking: true},
	"EventElapsedTime":  {kind: timer.KindEventElapsed, atExit: true},
	"CommInitRank":      {kind: timer.KindCommInit, atExit: true}, "CommInitRankConfig": {kind: timer.KindCommInit, atExit: true},
	"CommSplit":   {kind: timer.KindCommInit, atExit: true},
	"CommDestroy": {kind: timer.KindCommDestroy}, "CommAbort": {kind: timer.KindCommDestroy},
	"AllReduce": {kind: timer.KindCollective}, "AllGather": {kind: timer.KindCollective}, "ReduceScatter": {kind: timer.KindCollective},
	"Broadcast": {kind: timer.KindCollective}, "Reduce": {kind: timer.KindCollective},
	"Send": {kind: timer.KindCollective}, "Recv": {kind: timer.KindCollective},
	"GroupStart": {kind: timer.KindGroupStart}, "GroupEnd": {kind: timer.KindGroupEnd},
	"Malloc": {kind: timer.KindCall, blocking: true}, "Free": {kind: timer.KindCall, blocking: true},
	"StreamDestroy": {kind: timer.KindCall, blocking: true},
}

var collOps = map[string]timer.CollOp{"AllReduce": timer.OpAllReduce, "AllGather": timer.OpAllGather,
	"ReduceScatter": timer.OpReduceScatter, "Broadcast": timer.OpBroadcast, "Reduce": timer.OpReduce,
	"Send": timer.OpSend, "Recv": timer.OpRecv}

// matchCalls finds, in order, the event(s) of every printed call and
// checks each decoded field against what the program printed. It returns
// the events by call name (the last one of each name).
func matchCalls(t *testing.T, calls []callLine, evs []timer.Event, vendor timer.Vendor) map[string]timer.Event {
	t.Helper()
	byName := map[string]timer.Event{}
	i := 0
	next := func(name string, k timer.Kind, ph timer.Phase) (timer.Event, bool) {
		for ; i < len(evs); i++ {
			if evs[i].Kind == k && evs[i].Phase == ph {
				i++
				return evs[i-1], true
			}
		}
		t.Errorf("%s: no %s event (phase %d) in order", name, k, ph)
		return timer.Event{}, false
	}
	for _, c := range calls {
		want, ok := callKinds[c.Name]
		if !ok {
			continue
		}
		var ev timer.Event
		switch {
		case want.blocking:
			enter, ok1 := next(c.Name, want.kind, timer.PhaseEnter)
			ev, ok = next(c.Name, want.kind, timer.PhaseExit)
			if ok1 && ok && enter.TID != ev.TID {
				t.Errorf("%s: enter on tid %d, exit on %d", c.Name, enter.TID, ev.TID)
			}
			checkFields(t, c, enter, vendor, false)
		case want.atExit:
			ev, ok = next(c.Name, want.kind, timer.PhaseExit)
		default:
			ev, ok = next(c.Name, want.kind, timer.PhaseEnter)
		}
		if !ok {
			continue
		}
		checkFields(t, c, ev, vendor, want.blocking || want.atExit)
		byName[c.Name] = ev
	}
	return byName
}

// checkOnce checks that each call of the runtime and the driver made one
// record, however it was made: the runtime's forwards to the driver (the
// testbed's runtime, as NVIDIA's, makes every call through the driver) are
// neither lost nor recorded twice. Every such call calls.c makes is printed.
func checkOnce(t *testing.T, calls []callLine, evs []timer.Event) {
	t.Helper()
	type key struct {
		kind  timer.Kind
		phase timer.Phase
	}
	want, got := map[key]int{}, map[key]int{}
	for _, c := range calls {
		k, ok := callKinds[c.Name]
		if !ok || k.kind >= timer.KindCommInit {
			continue
		}
		ph := timer.PhaseEnter
		if k.atExit {
			ph = timer.PhaseExit
		}
		want[key{k.kind, ph}]++
	}
	for _, e := range evs {
		got[key{e.Kind, e.Phase}]++
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s (phase %d): %d records of %d calls", k.kind, k.phase, got[k], n)
		}
	}
}

func checkFields(t *testing.T, c callLine, ev timer.Event, vendor timer.Vendor, exit bool) {
	t.Helper()
	u := func(k string) uint64 {
		v, err := strconv.ParseUint(c.KV[k], 10, 64)
		if err != nil {
			t.Fatalf("%s: bad %s=%q", c.Name, k, c.KV[k])
		}
		return v
	}
	i32 := func(k string) int32 {
		v, err := strconv.ParseInt(c.KV[k], 10, 32)
		if err != nil {
			t.Fatalf("%s: bad %s=%q", c.Name, k, c.KV[k])
		}
		return int32(v)
	}
	dims := func(k string) [3]uint32 {
		var d [3]uint32
		fmt.Sscanf(c.KV[k], "%d,%d,%d", &d[0], &d[1], &d[2])
		return d
	}
	check := func(field string, got, want any) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %s = %v, want %v", c.Name, field, got, want)
		}
	}
	check("vendor", ev.Vendor, vendor)
	if ev.Time <= 0 || ev.TID <= 0 {
		t.Errorf("%s: time %d tid %d", c.Name, ev.Time, ev.TID)
	}
	for k := range c.KV {
		switch k {
		case "func":
			// A CUDA runtime launch is recorded in the driver it
			// calls, with the driver's opaque handle of the kernel
			// (as NVIDIA's runtime passes it), not the host stub the
			// program printed; the kernel's name, from the lookup
			// the runtime made, says which it is.
			if vendor == timer.VendorCUDA && (c.Name == "LaunchKernel" || c.Name == "LaunchKernelExC") {
				if ev.Func == 0 || ev.Func == u(k) {
					t.Errorf("%s: func = %#x, want the driver's handle, not the stub %#x", c.Name, ev.Func, u(k))
				}
				break
			}
			check("func", ev.Func, u(k))
		case "kernel":
			check("kernel", ev.Kernel, c.KV[k])
		case "fn":
			check("call", ev.CallName, c.KV[k])
		case "grid":
			check("grid", ev.Grid, dims(k))
		case "block":
			check("block", ev.Block, dims(k))
		case "shmem":
			check("shmem", ev.Shmem, u(k))
		case "stream":
			check("stream", ev.Stream, u(k))
		case "handle":
			check("handle", ev.Handle, u(k))
		case "handle2":
			check("handle2", ev.Handle2, u(k))
		case "bytes":
			check("bytes", ev.Bytes, u(k))
		case "kind":
			check("copy kind", ev.CopyKind, i32(k))
		case "count":
			check("count", ev.Count, u(k))
		case "dtype":
			check("dtype", ev.Dtype, i32(k))
		case "redop":
			check("redop", ev.RedOp, i32(k))
		case "peer":
			check("peer", ev.Peer, i32(k))
		case "comm":
			check("comm", ev.Comm, u(k))
		case "ret":
			if exit {
				check("ret", ev.Ret, i32(k))
			}
		case "ms":
			// %.9g round-trips a float32: the decoded bits must be the
			// very float the library wrote.
			want, err := strconv.ParseFloat(c.KV[k], 32)
			if err != nil {
				t.Fatalf("%s: bad ms=%q", c.Name, c.KV[k])
			}
			if want == 0 {
				t.Errorf("%s: the library handed back 0 ms, which tells nothing of the decoding", c.Name)
			}
			if exit && math.Float32bits(ev.ElapsedMs) != math.Float32bits(float32(want)) {
				t.Errorf("%s: elapsed ms = %.9g, want %.9g", c.Name, ev.ElapsedMs, want)
			}
		case "nranks":
			if exit {
				check("nranks", ev.NRanks, i32(k))
			}
		case "rank":
			if exit {
				check("rank", ev.Rank, i32(k))
			}
		}
	}
	if op, ok := collOps[c.Name]; ok {
		check("op", ev.Op, op)
		if _, hasPeer := c.KV["peer"]; !hasPeer {
			check("peer", ev.Peer, -1)
		}
	}
}

// runCalls runs two ranks of testdata/calls.c under a tracer and checks
// every decoded call of both.
func runCalls(t *testing.T, vendor string, runtime, nccl, driver, kernels string) {
	s := buildStubs(t)
	tr := newTracer(t, Options{})
	rec := record(t, tr)
	p0 := start(t, s.Calls, vendor, runtime, nccl, driver, kernels, "0", "2")
	head := p0.until(t, "ready")
	idHex := strings.TrimPrefix(head[len(head)-1], "id=")
	p1 := start(t, s.Calls, vendor, runtime, nccl, driver, kernels, "1", "2", idHex)
	p1.until(t, "ready")
	for _, p := range []*proc{p0, p1} {
		if err := tr.Follow(p.pid()); err != nil {
			t.Fatal(err)
		}
	}
	p0.send(t, "go")
	p1.send(t, "go")
	out0, out1 := p0.until(t, "done"), p1.until(t, "done")
	last := func(pid int) func([]timer.Event, []Notice) bool {
		return func(evs []timer.Event, _ []Notice) bool {
			n := 0
			for _, e := range evs {
				if e.PID == pid && e.Kind == timer.KindCommDestroy {
					n++
				}
			}
			return n == 2
		}
	}
	rec.waitFor(t, "rank 0's last call", last(p0.pid()))
	rec.waitFor(t, "rank 1's last call", last(p1.pid()))

	want := timer.VendorCUDA
	if vendor == "maca" {
		want = timer.VendorMACA
	}
	ev0 := matchCalls(t, parseCalls(t, out0), rec.of(p0.pid()), want)
	ev1 := matchCalls(t, parseCalls(t, out1), rec.of(p1.pid()), want)
	checkOnce(t, parseCalls(t, out0), rec.of(p0.pid()))

	// The last driver launch is of an opaque CUkernel, named only by the
	// cuLibraryGetKernel that returned it.
	if ev, ok := ev0["cuLaunchKernel"]; driver != "-" && (!ok || ev.Kernel != "fake::attention::softmax_kernel<float>") {
		t.Errorf("launch of a library kernel: %+v", ev)
	}
	// One communicator, the same id on both ranks: the hash of the unique id.
	raw, err := hex.DecodeString(idHex)
	if err != nil || len(raw) != 128 {
		t.Fatalf("id %q: %v", idHex, err)
	}
	wantID := idHash([128]byte(raw))
	for name, evs := range map[string]map[string]timer.Event{"rank 0": ev0, "rank 1": ev1} {
		if evs["CommInitRank"].CommID != wantID || evs["CommInitRankConfig"].CommID != wantID {
			t.Errorf("%s: comm ids %x %x, want %x", name, evs["CommInitRank"].CommID, evs["CommInitRankConfig"].CommID, wantID)
		}
	}
	if _, ok := ev0["CommSplit"]; ok {
		split0, split1 := ev0["CommSplit"].CommID, ev1["CommSplit"].CommID
		if split0 != split1 || split0 == wantID || split0 == ([16]byte{}) {
			t.Errorf("split comm ids %x and %x (parent %x)", split0, split1, wantID)
		}
	}
}

// Every probed call of the testbed's CUDA runtime, driver and NCCL, on two
// ranks of one communicator.
func TestDecodeCUDA(t *testing.T) {
	privileged.Root(t)
	bed := testbed.Build(t)
	runCalls(t, "cuda", bed.Lib("libcudart.so.12"), bed.Lib("libnccl.so.2"), bed.Lib("libcuda.so.1"), bed.Lib("libfakekernels.so"))
}

// The same on the testbed's MACA runtime and MCCL.
func TestDecodeMACA(t *testing.T) {
	privileged.Root(t)
	bed := testbed.Build(t)
	runCalls(t, "maca", bed.Lib("libmcruntime.so.2"), bed.Lib("libmccl.so.2"), "-", bed.Lib("libfakekernels.so"))
}

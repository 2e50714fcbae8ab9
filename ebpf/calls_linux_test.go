//go:build linux && (386 || amd64)

package ebpf

import (
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/xpu-timer/xpu-timer/ebpf/internal/ring"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// fakeRings writes call records into rings a ring.Rings reads (the rings
// themselves are tested in internal/ring).
type fakeRings struct{ *ring.Fake }

func newFakeRings(ncpu, n int) (*fakeRings, *ring.Rings) {
	f, r := ring.NewFake(ncpu, n)
	return &fakeRings{f}, r
}

// reserve takes the next slot of cpu and marks it.
func (f *fakeRings) reserve(cpu int) (uint64, *probesCall) {
	pos, c := f.Reserve(cpu)
	return pos, (*probesCall)(unsafe.Pointer(c))
}

// write reserves, fills and publishes a record of tid with time and
// handle (the check value) on cpu.
func (f *fakeRings) write(cpu, tid int, time, handle uint64) {
	pos, c := f.reserve(cpu)
	fill(c, tid, time, handle)
	c.Seq = pos + 1
}

func fill(c *probesCall, tid int, time, handle uint64) {
	c.Time, c.Pid, c.Tid = time, 1, uint32(tid)
	c.Kind = uint8(timer.KindEventRecord)
	c.Handle = handle
}

// A thread that moves between CPUs has its records delivered in its own
// order, and a record from after the cut waits for the next drain.
func TestDeliverCallsInTimeOrder(t *testing.T) {
	f, r := newFakeRings(2, 16)
	tr := &reader{rings: r, batch: make([]timer.Event, deliverBatch)}
	f.write(1, 7, 10, 1)
	f.write(0, 7, 20, 2)
	f.write(1, 7, 30, 3)
	f.write(0, 7, 40, 4)
	var got []uint64
	deliver := func(evs []timer.Event) {
		for _, ev := range evs {
			got = append(got, ev.Handle)
		}
	}
	r.Collect() // as Run does, before it delivers
	tr.deliverCalls(35, deliver)
	if !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("before 35: %v, want [1 2 3]", got)
	}
	f.write(1, 7, 50, 5)
	r.Collect()
	tr.deliverCalls(60, deliver)
	if !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Errorf("before 60: %v, want [1 2 3 4 5]", got)
	}
	if n := tr.events.Load(); n != 5 {
		t.Errorf("%d events counted, want 5", n)
	}
}

// hop runs testdata/hop.c followed by a tracer: n launches from one thread
// that moves to the next CPU every chunk launches. Every launch must come,
// in order, before the process's exit record, and none be lost.
func hop(t *testing.T, opts Options, n, chunk int) {
	bed := testbed.Build(t)
	bin := gcc(t, filepath.Join(t.TempDir(), "hop"), "testdata/hop.c", "-ldl")
	opts.Libraries = []string{bed.Lib("libcuda.so.1")} // the driver the runtime loads, probed ahead
	tr := newTracer(t, opts)
	rec := record(t, tr)
	p := start(t, bin, bed.Lib("libcudart.so.12"), bed.Lib("libfakekernels.so"), strconv.Itoa(n), strconv.Itoa(chunk))
	p.followed(t, tr)
	rec.waitFor(t, "the exit record", func(evs []timer.Event, _ []Notice) bool {
		return hasEvent(evs, p.pid(), timer.KindProcessExit)
	})
	st := tr.Stats()
	if st.Lost != 0 {
		t.Errorf("%d records lost", st.Lost)
	}
	last, got, exited := uint32(0), 0, false
	for _, ev := range rec.of(p.pid()) {
		switch {
		case ev.Kind == timer.KindProcessExit:
			exited = true
		case ev.Kind != timer.KindLaunch:
		case exited:
			t.Fatalf("launch %d after the exit record", ev.Grid[0])
		case ev.Grid[0] <= last:
			t.Fatalf("launch %d after launch %d", ev.Grid[0], last)
		case ev.Grid[0] != last+1 && st.Lost == 0:
			t.Fatalf("launch %d where %d was due, and nothing counted lost", ev.Grid[0], last+1)
		default:
			last = ev.Grid[0]
			got++
		}
	}
	if got+int(st.Lost) != n {
		t.Errorf("%d of %d launches delivered, %d lost", got, n, st.Lost)
	}
}

// The records of a thread moving between CPUs every few calls are
// delivered in its order, all before its process's exit.
func TestCallsInOrderAcrossCPUs(t *testing.T) {
	hop(t, Options{}, 20_000, 7)
}

// At a sustained rate, as fast as a thread can make probed calls, with
// the default rings, the reader keeps up: nothing is lost. (On this
// project's 2-CPU VM, shared with other work, the collector goroutine was
// seen off CPU for up to 460 ms: rings of the floor size, 74 ms of
// this rate, then overflow, and the overflow is counted.)
func TestCallsNothingLostAtSustainedRate(t *testing.T) {
	start := time.Now()
	hop(t, Options{}, 200_000, 5_000)
	t.Logf("200,000 launches in %v", time.Since(start))
}

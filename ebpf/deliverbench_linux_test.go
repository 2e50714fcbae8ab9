//go:build linux && (386 || amd64)

package ebpf

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/flight"
	"github.com/xpu-timer/xpu-timer/ebpf/internal/ring"
	"github.com/xpu-timer/xpu-timer/internal/benchtable"
	"github.com/xpu-timer/xpu-timer/timer"
)

// BenchmarkReader measures the reader's CPU per launch record, the part of
// issue 30's launcher bound (2 % of a core per 100,000 launches a second:
// 200 ns a record, everything included) that the Go side spends on each:
// collecting the records from the call rings, merging them in time order,
// decoding and naming them, and handing them to the engine and the flight
// recorder, as the agent does. The rings are written as probes.bpf.c
// writes them: ranks launch-bound processes, one on each CPU (ring), each
// cycling through four kernels on one stream, their records interleaved
// finely in time (the merge's worst case), a quarter of a ring between two
// drains. Beside it, the same records copied out of the rings alone: the
// floor of reading them at all.
func BenchmarkReader(b *testing.B) {
	for _, ranks := range []int{2, 8} {
		b.Run(fmt.Sprintf("ranks=%d", ranks), func(b *testing.B) {
			perRec, floor := readerRun(b, ranks)
			b.ReportMetric(perRec, "ns/record")
			b.ReportMetric(floor, "copy-ns/record")
			benchtable.Row(b, fmt.Sprintf("reader CPU per launch record, %d launch-bound ranks (rings to engine and recorder)", ranks),
				fmt.Sprintf("%.0f ns", perRec), "200 ns (issue 30's launcher bound, all included)", perRec/200)
			benchtable.Row(b, fmt.Sprintf("reader CPU per launch record over copying it out of the rings, %d ranks", ranks),
				fmt.Sprintf("%.0f ns", perRec), fmt.Sprintf("%.1f ns (a copy of the records alone)", floor), perRec/floor)
		})
	}
}

// readerRun returns the ns a record of the whole reader and of a plain
// copy, over timed records each.
func readerRun(b *testing.B, ranks int) (perRec, floor float64) {
	const warm, timed = 1 << 20, 1 << 21
	const slots = 4096 // a ring of a 16-CPU node (ring.MinSlots)
	const perDrain = slots / ring.WakeFraction
	f, r := newFakeRings(ranks, slots)
	tr := &reader{rings: r, batch: make([]timer.Event, deliverBatch), names: newKernelNames(nil)}
	kernels := [4]uint64{0x7f0000001000, 0x7f0000002000, 0x7f0000003000, 0x7f0000004000}
	for i := range ranks {
		tr.names.procs[1000+i] = &procNames{names: map[uint64]string{
			kernels[0]: "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
			kernels[1]: "ampere_sgemm_128x64_tn",
			kernels[2]: "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
			kernels[3]: "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
		}}
	}
	eng := timer.NewEngine(timer.Config{})
	for i := range ranks {
		eng.SetIdentity(1000+i, i, ranks)
	}
	rec := flight.New(0)
	handled := 0
	onEvents := func(evs []timer.Event) {
		rec.AddAll(evs)
		eng.HandleAll(evs)
		handled += len(evs)
	}
	write := func(now *uint64, k int) {
		for j := range perDrain * ranks {
			ring := j % ranks
			pos, c := f.reserve(ring)
			*now += 50
			c.Time, c.Pid, c.Tid = *now, uint32(1000+ring), uint32(1000+ring)
			c.Kind = uint8(timer.KindLaunch)
			c.Handle = kernels[(k+j/ranks)%len(kernels)]
			c.Stream = 0x5000
			c.Handle2, c.Ret = 108|1<<32|1<<48, 256|1<<11|1<<22
			c.Seq = pos + 1
		}
	}
	// Untimed first: the engine's stream queues fill up to their bound
	// (nothing retires a launch-bound loop's work), after which each
	// launch forgets the oldest, as in a long run.
	var now uint64
	var el time.Duration
	n, k := 0, 0
	for ; n < warm; k++ {
		write(&now, k)
		r.Collect()
		tr.deliverCalls(now+1, onEvents)
		n += perDrain * ranks
	}
	for ; n < warm+timed; k++ {
		write(&now, k)
		start := time.Now()
		r.Collect()
		tr.deliverCalls(now+1, onEvents)
		el += time.Since(start)
		n += perDrain * ranks
	}
	if handled != n || r.Lost() != 0 {
		b.Fatalf("%d records handled of %d, %d lost", handled, n, r.Lost())
	}
	perRec = float64(el.Nanoseconds()) / float64(n-warm)

	// The floor: the same records copied out of the rings, nothing more
	// (the tails kept here, the heads read as the reader reads them).
	dst := make([]ring.Record, 0, perDrain*ranks)
	tails := make([]uint64, ranks)
	el, n = 0, 0
	for k := 0; n < timed; k++ {
		write(&now, k)
		start := time.Now()
		dst = dst[:0]
		for ring := range ranks {
			head := atomic.LoadUint64(&f.Head(ring).Seq)
			for pos := tails[ring]; pos < head; pos++ {
				dst = append(dst, *f.Slot(ring, pos))
			}
			tails[ring] = head
		}
		el += time.Since(start)
		n += len(dst)
	}
	if n == 0 {
		b.Fatal("copied nothing")
	}
	return perRec, float64(el.Nanoseconds()) / float64(n)
}

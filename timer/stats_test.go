package timer

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestBandwidthConvention(t *testing.T) {
	const s = 1e9 // per-rank buffer bytes
	cases := []struct {
		op       string
		n        int32
		alg, bus float64 // Gbit/s over one second
	}{
		{"AllReduce", 8, 8, 14},
		{"AllReduce", 2, 8, 8},
		{"AllGather", 4, 32, 24},
		{"ReduceScatter", 4, 32, 24},
		{"Broadcast", 8, 8, 8},
		{"Reduce", 8, 8, 8},
		{"Send", 2, 8, 8},
		{"Recv", 2, 8, 8},
		{"AllReduce", 0, 8, 0}, // ranks unknown
	}
	for _, c := range cases {
		alg := Gbps(AlgBytes(c.op, s, c.n), sec)
		bus := Gbps(BusBytes(c.op, s, c.n), sec)
		if !near(alg, c.alg) || !near(bus, c.bus) {
			t.Errorf("%s n=%d: algbw %v busbw %v, want %v %v", c.op, c.n, alg, bus, c.alg, c.bus)
		}
	}
}

func TestSizeClass(t *testing.T) {
	for _, c := range []struct{ in, out uint64 }{{0, 0}, {1, 1}, {2, 2}, {3, 4}, {1024, 1024}, {1025, 2048}, {1<<63 + 1, 1 << 63}} {
		if got := SizeClass(c.in); got != c.out {
			t.Errorf("SizeClass(%d) = %d, want %d", c.in, got, c.out)
		}
	}
}

func TestExactCollectiveTiming(t *testing.T) {
	e := newTestEngine()
	const pid, h, s = 1, 0xa, 4
	el := Event{Time: at(3), PID: pid, TID: pid, Kind: KindEventElapsed, Phase: PhaseExit, Handle: 1, Handle2: 2, ElapsedMs: 1000}
	feed(e, commInit(0, pid, h, 7, 0, 8), record(1, pid, pid, 1, s), allReduce(1, pid, h, s, 1<<29), record(1, pid, pid, 2, s),
		query(2, pid, pid, 2, 0), el)
	st := e.ProcStats(pid)
	if len(st.Collectives) != 1 {
		t.Fatalf("collectives %+v", st.Collectives)
	}
	c := st.Collectives[0]
	want := CollKey{Op: "AllReduce", Dtype: "bfloat16", SizeClass: 1 << 30, NRanks: 8}
	if c.Key != want || c.Exact.Count != 1 || c.Exact.SumNs != sec || c.Observed.Count != 1 || c.Observed.SumNs != sec {
		t.Fatalf("stat %+v", c)
	}
	alg := float64(1<<30) * 8 / 1e9
	if !near(c.AlgBWGbps, alg) || !near(c.BusBWGbps, alg*2*7/8) {
		t.Fatalf("algbw %v busbw %v", c.AlgBWGbps, c.BusBWGbps)
	}
	if c.Best() != c.Exact {
		t.Fatal("Best is not the exact summary")
	}
}

func TestExactKernelTimingAndSpans(t *testing.T) {
	e := newTestEngine()
	elapsed := func(tm float64, a, b uint64, msv float32) Event {
		return Event{Time: at(tm), PID: 1, TID: 1, Kind: KindEventElapsed, Phase: PhaseExit, Handle: a, Handle2: b, ElapsedMs: msv}
	}
	feed(e,
		record(0, 1, 1, 1, 3), launch(0, 1, 1, 3, "one"), record(0, 1, 1, 2, 3), // exactly one op
		launch(0.1, 1, 1, 3, "two"), launch(0.1, 1, 1, 3, "two"), record(0.1, 1, 1, 3, 3), // two ops: a span
		record(0.2, 1, 1, 4, 4), // another stream: a span
		elapsed(1, 1, 2, 2.5), elapsed(1, 2, 3, 7), elapsed(1, 1, 4, 1),
		elapsed(1, 1, 2, 1).withRet(1), // failed: ignored
	)
	st := e.ProcStats(1)
	var one KernelStat
	for _, k := range st.Kernels {
		if k.Name == "one" {
			one = k
		}
	}
	if one.Exact.Count != 1 || one.Exact.SumNs != int64(2.5*float64(ms)) {
		t.Fatalf("kernel one %+v", one)
	}
	if st.Spans.Count != 2 || st.Spans.MaxNs != 7*ms {
		t.Fatalf("spans %+v", st.Spans)
	}
}

func (ev Event) withRet(r int32) Event { ev.Ret = r; return ev }

func TestObservedDurations(t *testing.T) {
	e := newTestEngine()
	feed(e,
		launch(1.0, 1, 1, 3, "a"), record(1.0, 1, 1, 9, 3), launch(1.1, 1, 1, 3, "b"),
		query(1.5, 1, 1, 9, 0), // a: 1.0 -> 1.5
		Event{Time: at(2.0), PID: 1, TID: 1, Kind: KindStreamQuery, Phase: PhaseExit, Stream: 3}, // b: max(1.1, 1.5) -> 2.0
	)
	st := e.ProcStats(1)
	if len(st.Kernels) != 2 {
		t.Fatalf("kernels %+v", st.Kernels)
	}
	for _, k := range st.Kernels {
		if k.Observed.Count != 1 || k.Observed.SumNs != at(0.5) {
			t.Errorf("%s observed %+v, want one of 0.5 s", k.Name, k.Observed)
		}
	}
}

func TestDistQuantile(t *testing.T) {
	var d dist
	for v := int64(1); v <= 100000; v++ {
		d.add(v)
	}
	s := d.summary()
	if s.Count != 100000 || s.MinNs != 1 || s.MaxNs != 100000 || s.SumNs != 100000*100001/2 {
		t.Fatalf("summary %+v", s)
	}
	for _, c := range []struct {
		got  int64
		want float64
	}{{s.P99Ns, 99000}, {s.P50Ns, 50000}} {
		if math.Abs(float64(c.got)-c.want)/c.want > 0.0625 {
			t.Errorf("quantile %d, want %v within 6.25%%", c.got, c.want)
		}
	}
	for b := 0; b < nBuckets; b++ {
		if got := bucketOf(bucketMid(b)); got != b {
			t.Fatalf("bucketOf(bucketMid(%d)) = %d", b, got)
		}
	}
	if bucketOf(math.MaxInt64) >= nBuckets {
		t.Fatal("bucket out of range")
	}
}

func TestStatsBounded(t *testing.T) {
	e := newTestEngine()
	for i := 0; i < 3000; i++ {
		feed(e, launch(float64(i)*0.001, 1, 1, 3, fmt.Sprintf("k%d", i)))
	}
	for i := 0; i < 3000; i++ {
		feed(e, Event{Time: at(3 + float64(i)*0.001), PID: 1, TID: 1, Kind: KindCollective, Op: OpAllReduce, Count: uint64(i), Dtype: 7,
			Comm: uint64(i % 7), Stream: 3})
	}
	feed(e, Event{Time: at(10), PID: 1, TID: 1, Kind: KindStreamQuery, Phase: PhaseExit, Stream: 3})
	st := e.ProcStats(1)
	if len(st.Kernels) > maxStatKeys+1 || len(st.Collectives) > maxStatKeys+1 {
		t.Fatalf("%d kernel and %d collective keys", len(st.Kernels), len(st.Collectives))
	}
	var total uint64
	var other bool
	for _, k := range st.Kernels {
		total += k.Observed.Count
		other = other || k.Name == otherKernel
	}
	if total != 3000 || !other {
		t.Fatalf("kernel count %d, other %v", total, other)
	}
}

func TestStatsMergeProcesses(t *testing.T) {
	e := newTestEngine()
	for pid := 1; pid <= 3; pid++ {
		feed(e, launch(0, pid, pid, 3, "k"), Event{Time: at(float64(pid)), PID: pid, TID: pid, Kind: KindStreamQuery, Phase: PhaseExit, Stream: 3})
	}
	st := e.Stats()
	if len(st.Kernels) != 1 || st.Kernels[0].Observed.Count != 3 || st.Kernels[0].Observed.MinNs != sec || st.Kernels[0].Observed.MaxNs != 3*sec {
		t.Fatalf("merged %+v", st.Kernels)
	}
}

// A kernel's completions go to the accumulator of its name (or, unnamed,
// its handle) however the recent-kernel slots fall: handles that share a
// slot, one handle completed both unnamed and named, and more kernels
// than slots, in a random order, count as a map of them does.
func TestKernelAccRecentSlots(t *testing.T) {
	p := &proc{}
	want := map[string]uint64{}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		fn := uint64(r.IntN(4 * kernelSlots)) // 4 handles a slot
		name := ""
		if r.IntN(3) > 0 {
			name = "k" + strconv.Itoa(int(fn%7))
		}
		p.kernelAcc(name, fn).observed.add(1)
		want[p.kernelName(name, fn)]++
	}
	got := map[string]uint64{}
	for name, k := range p.stats.kernels {
		got[name] = k.observed.count
	}
	if !maps.Equal(got, want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
}

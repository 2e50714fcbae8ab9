package timer

import (
	"testing"
	"time"
)

// BenchmarkHandleLaunch feeds a training-like stream: kernel launches on
// two streams of one process among four, with an event record and a
// successful query every 32 launches (as a watchdog or a synchronising
// loop would retire them). It reports ns and allocations per event.
func BenchmarkHandleLaunch(b *testing.B) {
	e := NewEngine(Config{})
	for pid := 1; pid <= 4; pid++ {
		e.SetIdentity(pid, pid-1, 4)
	}
	ev := Event{PID: 1, TID: 1, Kind: KindLaunch, Stream: 7, Kernel: "gemm_bf16_kernel", Func: 0x1000,
		Grid: [3]uint32{108, 1, 1}, Block: [3]uint32{256, 1, 1}}
	rec := Event{PID: 1, TID: 1, Kind: KindEventRecord, Stream: 7, Handle: 0xe0}
	qry := Event{PID: 1, TID: 2, Kind: KindEventQuery, Phase: PhaseExit, Handle: 0xe0}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	events := 0
	t := int64(0)
	// make bench runs one iteration: measure a fixed minimum of launches.
	n := max(b.N, 1<<18)
	for i := 0; i < n; i++ {
		t += 1000
		ev.Time = t
		e.Handle(ev)
		events++
		if i%32 == 31 {
			rec.Time, qry.Time = t, t+500
			e.Handle(rec)
			e.Handle(qry)
			events += 2
		}
	}
	el := time.Since(start)
	if events > 0 {
		b.ReportMetric(float64(el.Nanoseconds())/float64(events), "ns/event")
	}
	if st, _ := e.State(1, t); st.Pending > 32 {
		b.Fatalf("pending %d: launches not retired", st.Pending)
	}
}

// BenchmarkHandleCollective is the same for NCCL collectives with their
// communicator bookkeeping.
func BenchmarkHandleCollective(b *testing.B) {
	e := NewEngine(Config{})
	init := Event{PID: 1, TID: 1, Kind: KindCommInit, Phase: PhaseExit, Comm: 0xc, NRanks: 8}
	e.Handle(init)
	ev := Event{PID: 1, TID: 1, Kind: KindCollective, Op: OpAllReduce, Count: 1 << 20, Dtype: 9, Comm: 0xc, Stream: 9}
	rec := Event{PID: 1, TID: 1, Kind: KindEventRecord, Stream: 9, Handle: 0xe1}
	qry := Event{PID: 1, TID: 2, Kind: KindEventQuery, Phase: PhaseExit, Handle: 0xe1}
	b.ReportAllocs()
	b.ResetTimer()
	t := int64(0)
	n := max(b.N, 1<<16)
	start := time.Now()
	for i := 0; i < n; i++ {
		t += 1000
		ev.Time, rec.Time, qry.Time = t, t, t+500
		e.Handle(ev)
		e.Handle(rec)
		e.Handle(qry)
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(3*n), "ns/event")
}

// BenchmarkHandleStep feeds the testbed twin's training step as a late
// attach sees it: 405 launches a step of 32 kernels known by handle only
// (their lookups came before the attach), on one stream, retired by the
// step's stream synchronize. It reports ns and allocations per event: a
// step's ops fill the stream's queue and drain at its synchronize, and
// every completed kernel is counted under its handle's name.
func BenchmarkHandleStep(b *testing.B) {
	e := NewEngine(Config{})
	e.SetIdentity(1, 0, 1)
	const launches = 405
	ev := Event{PID: 1, TID: 1, Kind: KindLaunch, Stream: 7, Grid: [3]uint32{108, 1, 1}, Block: [3]uint32{256, 1, 1}}
	sync := Event{PID: 1, TID: 1, Kind: KindStreamSynchronize, Stream: 7}
	t := int64(0)
	step := func() {
		for i := range launches {
			t += 1000
			ev.Time, ev.Func = t, 0x7f0000001000+uint64(i%32)*0x40
			e.Handle(ev)
		}
		t += 1000
		sync.Time, sync.Phase = t, PhaseEnter
		e.Handle(sync)
		t += 50000
		sync.Time, sync.Phase = t, PhaseExit
		e.Handle(sync)
	}
	step()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	// make bench runs one iteration: measure a fixed minimum of steps.
	n := max(b.N, 512)
	for range n {
		step()
	}
	el := time.Since(start)
	b.ReportMetric(float64(el.Nanoseconds())/float64(n*(launches+2)), "ns/event")
	if st, _ := e.State(1, t); st.Pending != 0 {
		b.Fatalf("pending %d: the synchronize retired nothing", st.Pending)
	}
}

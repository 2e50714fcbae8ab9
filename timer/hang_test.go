package timer

import (
	"testing"
)

func TestWaiterKinds(t *testing.T) {
	const pid, main, dog, s1, s2, ev = 10, 10, 11, 21, 22, 0xe0
	stuck := []Event{launch(1, pid, main, s1, "gemm_bf16_kernel"), record(1.1, pid, main, ev, s1)}
	seq := func(evs ...Event) []Event { return append(append([]Event{}, stuck...), evs...) }
	cases := []struct {
		name   string
		evs    []Event
		now    float64
		call   string // "" when no hang is expected
		stream uint64
	}{
		{"stream synchronize past the timeout", seq(enter(2, pid, main, KindStreamSynchronize, s1, 0)), 12.5, "cuStreamSynchronize", s1},
		{"stream synchronize not yet past the timeout", seq(enter(2, pid, main, KindStreamSynchronize, s1, 0)), 11.5, "", 0},
		{"event synchronize", seq(enter(2, pid, main, KindEventSynchronize, 0, ev)), 12.5, "cuEventSynchronize", s1},
		{"device synchronize", seq(enter(2, pid, main, KindDeviceSynchronize, 0, 0)), 12.5, "cuCtxSynchronize", 0},
		{"synchronous copy", seq(enter(2, pid, main, KindMemcpy, 0, 0)), 12.5, "cuMemcpy", 0},
		{"polling waiter since its first not-ready poll",
			seq(query(2, pid, dog, ev, RetNotReady), query(2.1, pid, dog, ev, RetNotReady), query(2.2, pid, dog, ev, RetNotReady)),
			12.5, "cuEventQuery (polling)", s1},
		{"two polls are not a waiter",
			seq(query(2, pid, dog, ev, RetNotReady), query(2.1, pid, dog, ev, RetNotReady)), 30, "", 0},
		{"polling ends when the event reports ready",
			seq(query(2, pid, dog, ev, RetNotReady), query(2.1, pid, dog, ev, RetNotReady), query(2.2, pid, dog, ev, RetNotReady),
				query(2.3, pid, dog, ev, 0)), 30, "", 0},
		{"a re-recorded event restarts the streak",
			seq(query(2, pid, dog, ev, RetNotReady), query(2.1, pid, dog, ev, RetNotReady), record(2.15, pid, main, ev, s2),
				query(2.2, pid, dog, ev, RetNotReady)), 30, "", 0},
		{"waiting on a stream that waits on another stream",
			seq(Event{Time: at(1.2), PID: pid, TID: main, Kind: KindStreamWaitEvent, Stream: s2, Handle: ev},
				enter(2, pid, main, KindStreamSynchronize, s2, 0)), 12.5, "cuStreamSynchronize", s2},
		{"waiting on an idle stream", seq(enter(2, pid, main, KindStreamSynchronize, s2, 0)), 30, "", 0},
		{"a blocking call that returned", seq(enter(2, pid, main, KindStreamSynchronize, s1, 0),
			exit(2.5, pid, main, KindStreamSynchronize, s1, 0, 1)), 30, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEngine()
			feed(e, c.evs...)
			hs := e.Check(at(c.now))
			if c.call == "" {
				if len(hs) != 0 {
					t.Fatalf("unexpected hang %+v", hs[0])
				}
				return
			}
			if len(hs) != 1 {
				t.Fatalf("hangs = %+v, want one", hs)
			}
			h := hs[0]
			if h.Kind != "gpu" || h.PID != pid || len(h.Waiters) != 1 || h.Waiters[0].Call != c.call || h.Waiters[0].Stream != c.stream {
				t.Fatalf("hang %+v waiters %+v, want %s on stream %d", h, h.Waiters, c.call, c.stream)
			}
			o := h.Oldest
			if o == nil || o.Kernel != "gemm_bf16_kernel" || o.Grid != [3]uint32{108, 1, 1} || o.Block != [3]uint32{256, 1, 1} || o.Stream != s1 {
				t.Fatalf("oldest %+v", o)
			}
			if h.AgeNs != at(c.now)-at(1) {
				t.Fatalf("age %d", h.AgeNs)
			}
		})
	}
}

// A process that was busy on the CPU for longer than the timeout and then
// synchronises quickly, one whose work all completed and that computes,
// sleeps or checkpoints, and one that never synchronises raise nothing.
func TestNoFalseHang(t *testing.T) {
	cases := []struct {
		name string
		evs  []Event
		now  []float64
	}{
		{"cpu busy then a quick synchronize",
			[]Event{launch(0, 1, 1, 3, "k"), enter(100, 1, 1, KindStreamSynchronize, 3, 0)},
			[]float64{50, 100.5}},
		{"idle after completed work",
			[]Event{launch(0, 1, 1, 3, "k"), enter(0.1, 1, 1, KindStreamSynchronize, 3, 0), exit(0.2, 1, 1, KindStreamSynchronize, 3, 0, 0)},
			[]float64{1000, 5000}},
		{"checkpointing: synchronous copies done, long write",
			[]Event{launch(0, 1, 1, 0, "k"), enter(0.1, 1, 1, KindMemcpy, 0, 0), exit(0.3, 1, 1, KindMemcpy, 0, 0, 0)},
			[]float64{600}},
		{"never synchronises",
			[]Event{launch(0, 1, 1, 3, "k"), launch(0.1, 1, 1, 3, "k")},
			[]float64{1000}},
		{"watchdog polling completed events",
			[]Event{launch(0, 1, 1, 3, "k"), record(0.1, 1, 1, 9, 3), query(0.2, 1, 2, 9, 0), query(100, 1, 2, 9, 0), query(200, 1, 2, 9, 0)},
			[]float64{300}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEngine()
			feed(e, c.evs...)
			for _, now := range c.now {
				if hs := e.Check(at(now)); len(hs) != 0 {
					t.Fatalf("at %vs: unexpected hang %+v", now, hs[0])
				}
			}
		})
	}
}

func TestRecoveryAndRefire(t *testing.T) {
	e := newTestEngine()
	feed(e, launch(0, 1, 1, 3, "k"), enter(1, 1, 1, KindStreamSynchronize, 3, 0))
	if hs := e.Check(at(12)); len(hs) != 1 {
		t.Fatalf("first check: %+v", hs)
	}
	if hs := e.Check(at(12)); len(hs) != 0 {
		t.Fatalf("check at the same time fired again: %+v", hs)
	}
	if hs := e.Check(at(13)); len(hs) != 0 {
		t.Fatalf("a hung process fired twice: %+v", hs)
	}
	if rec := e.Recovered(at(13)); len(rec) != 0 {
		t.Fatalf("recovered too early: %v", rec)
	}
	if _, ok := e.Hung(1); !ok {
		t.Fatal("Hung lost the decision")
	}
	feed(e, exit(14, 1, 1, KindStreamSynchronize, 3, 0, 0))
	if rec := e.Recovered(at(14)); len(rec) != 1 || rec[0] != 1 {
		t.Fatalf("recovered %v, want [1]", rec)
	}
	if _, ok := e.Hung(1); ok {
		t.Fatal("still hung after recovery")
	}
	feed(e, launch(15, 1, 1, 3, "k2"), enter(15.5, 1, 1, KindStreamSynchronize, 3, 0))
	hs := e.Check(at(26))
	if len(hs) != 1 || hs[0].Oldest.Kernel != "k2" {
		t.Fatalf("re-fire: %+v", hs)
	}
}

func TestMACANames(t *testing.T) {
	e := newTestEngine()
	l := launch(0, 1, 1, 3, "k")
	l.Vendor = VendorMACA
	s := enter(1, 1, 1, KindStreamSynchronize, 3, 0)
	s.Vendor = VendorMACA
	r := record(0.5, 1, 2, 4, 3)
	q := query(1, 1, 2, 4, RetNotReady)
	q.Vendor = VendorMACA
	feed(e, l, s, r, q, q, q)
	hs := e.Check(at(20))
	if len(hs) != 1 || hs[0].Oldest.Vendor != "maca" {
		t.Fatalf("hangs %+v", hs)
	}
	calls := map[string]bool{}
	for _, w := range hs[0].Waiters {
		calls[w.Call] = true
	}
	if !calls["mcStreamSynchronize"] || !calls["mcEventQuery (polling)"] || len(calls) != 2 {
		t.Fatalf("waiter calls %v", calls)
	}
}

func TestCommunicatorSequences(t *testing.T) {
	e := newTestEngine()
	const h0, h1, hLocal = 0xa0, 0xb0, 0xc0
	feed(e, commInit(0, 1, h0, 0x42, 0, 2), commInit(0, 2, h1, 0x42, 1, 2))
	feed(e,
		Event{Time: at(1), PID: 1, TID: 1, Kind: KindGroupStart},
		allReduce(1.1, 1, h0, 5, 1024), allReduce(1.2, 1, h0, 5, 1024),
		Event{Time: at(1.3), PID: 1, TID: 1, Kind: KindGroupEnd},
		allReduce(1.4, 1, h0, 5, 1024),
		allReduce(1.1, 2, h1, 5, 1024), allReduce(1.2, 2, h1, 5, 1024),
		allReduce(1.5, 1, hLocal, 5, 8),
	)
	c1, c2 := e.Comms(1), e.Comms(2)
	id := CommIDString([16]byte{0x42})
	if len(c1) != 2 || c1[0].ID != id || c1[0].Issued != 3 || c1[0].Rank != 0 || c1[0].NRanks != 2 || c1[0].LastOp != "AllReduce" {
		t.Fatalf("rank 0 comms %+v", c1)
	}
	if c1[1].ID != "local:c0" || c1[1].Issued != 1 {
		t.Fatalf("local comm %+v", c1[1])
	}
	if len(c2) != 1 || c2[0].ID != id || c2[0].Issued != 2 {
		t.Fatalf("rank 1 comms %+v", c2)
	}
	// Both ranks synchronise; rank 1's two collectives complete.
	feed(e, enter(2, 2, 2, KindStreamSynchronize, 5, 0), exit(2.1, 2, 2, KindStreamSynchronize, 5, 0, 0))
	if c2 := e.Comms(2); c2[0].Completed != 2 {
		t.Fatalf("completed %+v", c2)
	}
}

// Rank 0 waits on AllReduce #3 that rank 1 never issues because it is
// stuck on the CPU; rank 1's watchdog keeps polling completed events.
func TestHostStall(t *testing.T) {
	const h0, h1 = 0xa0, 0xb0
	base := func() *Engine {
		e := twoRankEngine()
		feed(e, commInit(0, 1, h0, 0x42, 0, 2), commInit(0, 2, h1, 0x42, 1, 2))
		for i := 0; i < 2; i++ {
			tt := float64(i) * 0.1
			feed(e, allReduce(1+tt, 1, h0, 5, 1024), allReduce(1+tt, 2, h1, 5, 1024))
		}
		feed(e, record(1.25, 2, 2, 0xe2, 5), enter(1.3, 2, 2, KindStreamSynchronize, 5, 0), exit(1.35, 2, 2, KindStreamSynchronize, 5, 0, 0))
		feed(e, allReduce(1.4, 1, h0, 5, 1024), enter(1.5, 1, 1, KindStreamSynchronize, 5, 0))
		return e
	}
	t.Run("stalled rank named with its lag", func(t *testing.T) {
		e := base()
		for s := 2.0; s < 30; s += 0.1 {
			feed(e, query(s, 2, 3, 0xe2, 0)) // watchdog
		}
		hs := e.Check(at(30))
		if len(hs) != 2 {
			t.Fatalf("hangs %+v", hs)
		}
		g, h := hs[0], hs[1]
		if g.Kind != "gpu" || g.Rank != 0 || g.Oldest.Op != "AllReduce" || g.Oldest.Seq != 1 || g.Oldest.Bytes != 2048 || g.Oldest.Dtype != "bfloat16" {
			t.Fatalf("gpu hang %+v oldest %+v", g, g.Oldest)
		}
		if g.Comms[0].Issued != 3 || g.Comms[0].Completed != 0 {
			t.Fatalf("gpu comms %+v", g.Comms)
		}
		if h.Kind != "host" || h.Rank != 1 || h.Lagging == nil || *h.Lagging != (Lag{Comm: CommIDString([16]byte{0x42}), Issued: 2, Awaited: 3, PeerPID: 1, PeerRank: 0}) {
			t.Fatalf("host hang %+v lag %+v", h, h.Lagging)
		}
		if h.AgeNs != at(30)-at(1.1) {
			t.Fatalf("host age %d", h.AgeNs)
		}
		// The stalled rank issues its collective: both recover.
		feed(e, allReduce(31, 2, h1, 5, 1024), exit(31.5, 1, 1, KindStreamSynchronize, 5, 0, 0))
		rec := e.Recovered(at(32))
		if len(rec) != 2 {
			t.Fatalf("recovered %v", rec)
		}
	})
	t.Run("a rank that already issued the awaited collective is not stalled", func(t *testing.T) {
		e := base()
		feed(e, allReduce(1.45, 2, h1, 5, 1024))
		hs := e.Check(at(30))
		if len(hs) != 1 || hs[0].PID != 1 {
			t.Fatalf("hangs %+v", hs)
		}
	})
	t.Run("no stall while peers are healthy", func(t *testing.T) {
		e := base()
		feed(e, exit(2, 1, 1, KindStreamSynchronize, 5, 0, 0))
		if hs := e.Check(at(30)); len(hs) != 0 {
			t.Fatalf("hangs %+v", hs)
		}
	})
	// Without communicator info nothing says what the peer waits for: a
	// silent rank may wait on it where the probes do not see (gloo, a
	// store). Only a main thread seen spinning in its own code is evidence.
	noComm := func() *Engine {
		e := newTestEngine()
		feed(e, launch(0, 1, 1, 3, "k"), enter(1, 1, 1, KindStreamSynchronize, 3, 0), launch(0, 2, 2, 3, "k"),
			enter(0.1, 2, 2, KindStreamSynchronize, 3, 0), exit(0.2, 2, 2, KindStreamSynchronize, 3, 0, 0))
		return e
	}
	t.Run("without communicator info a sleeping silent rank is a waiter", func(t *testing.T) {
		e := noComm()
		for s := 1.0; s <= 20; s++ {
			e.Observe(Look{PID: 2, Time: at(s), State: 'S', Sleeps: 5, Site: "futex", LastRan: at(0.2)})
		}
		// It is "stalled" (no progress while a peer is stuck), never "host".
		hs := e.Check(at(20))
		if len(hs) != 2 || hs[0].Kind != "gpu" || hs[0].PID != 1 || hs[1].Kind != "stalled" {
			t.Fatalf("hangs %+v, want the stuck peer gpu and the sleeper stalled", hs)
		}
	})
	// A peer stuck in a collective (its communicator's creation unseen, so
	// "local:") that this process has no collective in flight for: it
	// never joined it.
	t.Run("without communicator info a rank out of every collective is stalled", func(t *testing.T) {
		e := newTestEngine()
		feed(e, allReduce(0, 1, 0xa0, 3, 8), enter(1, 1, 1, KindStreamSynchronize, 3, 0),
			allReduce(0, 2, 0xb0, 3, 8), enter(0.1, 2, 2, KindStreamSynchronize, 3, 0), exit(0.2, 2, 2, KindStreamSynchronize, 3, 0, 0))
		hs := e.Check(at(20))
		if len(hs) != 2 || hs[1].Kind != "host" || hs[1].PID != 2 || hs[1].Lagging != nil || hs[1].Stall != nil {
			t.Fatalf("hangs %+v", hs)
		}
	})
	t.Run("without communicator info a rank with a collective in flight is not", func(t *testing.T) {
		e := newTestEngine()
		feed(e, allReduce(0, 1, 0xa0, 3, 8), enter(1, 1, 1, KindStreamSynchronize, 3, 0),
			allReduce(0, 2, 0xb0, 3, 8))
		if hs := e.Check(at(20)); len(hs) != 1 || hs[0].PID != 1 {
			t.Fatalf("hangs %+v", hs)
		}
	})
	t.Run("without communicator info a spinning silent rank is stalled", func(t *testing.T) {
		e := noComm()
		for s := 1.0; s <= 20; s++ {
			e.Observe(Look{PID: 2, Time: at(s), State: 'R', Sleeps: 5, CPU: at(s), Python: "spin@job.py"})
		}
		hs := e.Check(at(20))
		if len(hs) != 2 || hs[1].Kind != "host" || hs[1].PID != 2 || hs[1].Lagging != nil ||
			hs[1].Stall == nil || !hs[1].Stall.Spinning || hs[1].Stall.Python != "spin@job.py" {
			t.Fatalf("hangs %+v", hs)
		}
	})
}

// A rank whose kernel never finishes, and whose watchdog first polls the
// event behind it a poll period after the record, is waiting on the GPU:
// between the timeout past its last call and the timeout past the first
// poll it is decided nothing, then gpu; never host (a peer with no
// communicator linking them is stuck meanwhile).
func TestWaitingRankIsNotHostStalled(t *testing.T) {
	const s, ev = 3, 0xe0
	e := newTestEngine()
	feed(e, launch(0, 1, 1, s, "k"), enter(0.5, 1, 1, KindStreamSynchronize, s, 0), // the peer, stuck
		launch(1, 2, 2, s, "never_ends"), record(1, 2, 2, ev, s))
	for q := 1.1; q < 11.5; q += 0.1 {
		feed(e, query(q, 2, 3, ev, RetNotReady))
	}
	hs := e.Check(at(11.05)) // 10.05 s past rank 2's last call, 9.95 s past its first poll
	if len(hs) != 1 || hs[0].PID != 1 || hs[0].Kind != "gpu" {
		t.Fatalf("hangs %+v, want only the peer's gpu hang", hs)
	}
	hs = e.Check(at(11.2))
	if len(hs) != 1 || hs[0].PID != 2 || hs[0].Kind != "gpu" || hs[0].Oldest == nil || hs[0].Oldest.Kernel != "never_ends" {
		t.Fatalf("hangs %+v, want rank 2's gpu hang on its kernel", hs)
	}
}

func TestHostStallNeedsAGPUUser(t *testing.T) {
	e := newTestEngine()
	feed(e, launch(0, 1, 1, 3, "k"), enter(1, 1, 1, KindStreamSynchronize, 3, 0),
		Event{Time: 0, PID: 2, TID: 2, Kind: KindProcessExec}) // a launcher or data loader: no GPU calls
	hs := e.Check(at(20))
	if len(hs) != 1 || hs[0].PID != 1 {
		t.Fatalf("hangs %+v, want only pid 1", hs)
	}
}

func TestStateForMetrics(t *testing.T) {
	e := newTestEngine()
	e.SetIdentity(1, 3, 8)
	feed(e, launch(1, 1, 1, 3, "a"), launch(2, 1, 1, 4, "b"), query(2.5, 1, 2, 99, 0),
		enter(3, 1, 1, KindStreamSynchronize, 4, 0))
	st, ok := e.State(1, at(5))
	want := ProcState{PID: 1, Rank: 3, World: 8, Pending: 2, OldestAgeNs: at(4), LastActivity: at(3), LastWork: at(2), Waiters: 1}
	if !ok || st != want {
		t.Fatalf("state %+v, want %+v", st, want)
	}
}

func TestLegacyStreamHandle(t *testing.T) {
	e := newTestEngine()
	l := launch(0, 1, 1, 1, "k") // cudaStreamLegacy
	feed(e, l, enter(0.1, 1, 1, KindStreamSynchronize, 0, 0), exit(0.2, 1, 1, KindStreamSynchronize, 0, 0, 0))
	if got := pending(t, e, 1); got != 0 {
		t.Fatalf("pending %d", got)
	}
}

func TestManyStreamsBounded(t *testing.T) {
	e := newTestEngine()
	for i := 0; i < 3*maxStreams; i++ {
		s := uint64(100 + i)
		tm := float64(i) * 0.001
		feed(e, launch(tm, 1, 1, s, "k"), record(tm, 1, 1, s, s), query(tm, 1, 1, s, 0))
	}
	e.mu.Lock()
	n, ne := len(e.procs[1].streams), len(e.procs[1].events)
	e.mu.Unlock()
	if n > maxStreams || ne > maxStreams {
		t.Fatalf("%d streams and %d events kept", n, ne)
	}
	checkInvariants(t, e)
}

// The probes see no completion nobody waited for, so a decision says
// which awaited ops are not known complete: a fill then, seconds later
// (a JIT compile), a Triton kernel that spins and a synchronize is the
// real GPU's case (gpu-check's triton): the fill is the oldest, the Triton
// kernel the newest of two. Each op counts once, however many waiters and
// stream dependencies reach it; work a waiter does not depend on is not
// counted.
func TestHangAwaitedSpan(t *testing.T) {
	const pid, main, dog, s1, s2, s3, ev = 10, 10, 11, 21, 22, 23, 0xe0
	cases := []struct {
		name           string
		evs            []Event
		oldest, newest string // newest "" when no Newest is expected
		awaited        int
	}{
		{"one op: exact", []Event{
			launch(1, pid, main, s1, "spin"),
			enter(2, pid, main, KindStreamSynchronize, s1, 0)}, "spin", "", 1},
		{"a fill before a JIT-compiled kernel", []Event{
			launch(1, pid, main, s1, "fill"),
			launch(7, pid, main, s1, "spin_on_flag"),
			enter(7.1, pid, main, KindDeviceSynchronize, 0, 0)}, "fill", "spin_on_flag", 2},
		{"ops after the waiter's target are not awaited", []Event{
			launch(1, pid, main, s1, "a"),
			launch(1.1, pid, main, s1, "b"),
			record(1.2, pid, main, ev, s1),
			launch(1.3, pid, main, s1, "after"),
			enter(2, pid, dog, KindEventSynchronize, 0, ev)}, "a", "b", 2},
		{"two waiters on one stream count each op once", []Event{
			launch(1, pid, main, s1, "a"),
			launch(1.1, pid, main, s1, "b"),
			record(1.2, pid, main, ev, s1),
			launch(1.3, pid, main, s1, "c"),
			// the nearer target first (waiters go by thread id)
			enter(2, pid, main, KindEventSynchronize, 0, ev),
			enter(2.1, pid, dog, KindStreamSynchronize, s1, 0)}, "a", "c", 3},
		{"through a stream wait, once", []Event{
			launch(1, pid, main, s2, "other"),
			record(1.1, pid, main, ev, s2),
			Event{Time: at(1.2), PID: pid, TID: main, Kind: KindStreamWaitEvent, Stream: s1, Handle: ev},
			Event{Time: at(1.25), PID: pid, TID: main, Kind: KindStreamWaitEvent, Stream: s3, Handle: ev},
			launch(1.3, pid, main, s1, "mine"),
			launch(1.4, pid, main, s3, "third"),
			enter(2, pid, main, KindDeviceSynchronize, 0, 0)}, "other", "third", 3},
		{"work known complete is not counted", []Event{
			launch(1, pid, main, s1, "done"),
			enter(1.1, pid, main, KindStreamSynchronize, s1, 0),
			exit(1.2, pid, main, KindStreamSynchronize, s1, 0, 0),
			launch(1.3, pid, main, s1, "x"),
			launch(1.4, pid, main, s1, "y"),
			enter(2, pid, main, KindStreamSynchronize, s1, 0)}, "x", "y", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEngine()
			feed(e, c.evs...)
			hs := e.Check(at(30))
			if len(hs) != 1 || hs[0].Kind != HangGPU {
				t.Fatalf("hangs = %+v, want one gpu", hs)
			}
			h := hs[0]
			if h.Oldest == nil || h.Oldest.Kernel != c.oldest || h.Awaited != c.awaited {
				t.Fatalf("oldest %+v awaited %d, want %s of %d", h.Oldest, h.Awaited, c.oldest, c.awaited)
			}
			switch {
			case c.newest == "" && h.Newest != nil:
				t.Fatalf("newest %+v, want none", h.Newest)
			case c.newest != "" && (h.Newest == nil || h.Newest.Kernel != c.newest):
				t.Fatalf("newest %+v, want %s", h.Newest, c.newest)
			}
		})
	}
}

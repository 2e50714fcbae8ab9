package timer

import "testing"

// ddpRank feeds one PyTorch-DDP-like training step of a rank: compute on
// stream C, the NCCL stream N waits for it, an AllReduce between start and
// end events on N, then C waits for the end event and loss.item() copies
// and synchronises C. The watchdog thread (tid+1) polls the end event.
type ddpRank struct {
	pid, rank int
	comm      uint64
}

const (
	streamC, streamN = 0x100, 0x200
	evCompute        = 0x1000
	evStart          = 0x2000
	evEnd            = 0x3000
)

func (r ddpRank) step(e *Engine, step int, t float64, complete bool) {
	pid, tid := r.pid, r.pid
	ce, se, ee := uint64(evCompute+step), uint64(evStart+step), uint64(evEnd+step)
	feed(e,
		launch(t, pid, tid, streamC, "gemm_bf16_kernel"),
		launch(t+0.01, pid, tid, streamC, "layernorm_fwd_kernel"),
		record(t+0.02, pid, tid, ce, streamC),
		Event{Time: at(t + 0.02), PID: pid, TID: tid, Kind: KindStreamWaitEvent, Stream: streamN, Handle: ce},
		record(t+0.03, pid, tid, se, streamN),
		allReduce(t+0.03, pid, r.comm, streamN, 1<<20),
		record(t+0.04, pid, tid, ee, streamN),
		Event{Time: at(t + 0.04), PID: pid, TID: tid, Kind: KindStreamWaitEvent, Stream: streamC, Handle: ee},
		Event{Time: at(t + 0.05), PID: pid, TID: tid, Kind: KindMemcpyAsync, Stream: streamC, Bytes: 4},
		enter(t+0.05, pid, tid, KindStreamSynchronize, streamC, 0),
	)
	if complete {
		feed(e, query(t+0.06, pid, tid+1, ee, 0), exit(t+0.07, pid, tid, KindStreamSynchronize, streamC, 0, 0))
	}
}

// ddpJob starts world ranks on one communicator and runs steps complete
// steps of each, from t = 1 s, one a second.
func ddpJob(e *Engine, world, steps int) []ddpRank {
	ranks := make([]ddpRank, world)
	for i := range ranks {
		ranks[i] = ddpRank{pid: 1000 + i, rank: i, comm: uint64(0xc0 + i)}
		e.SetIdentity(ranks[i].pid, i, world)
		feed(e, commInit(0, ranks[i].pid, ranks[i].comm, 0x77, int32(i), int32(world)))
	}
	for step := 1; step <= steps; step++ {
		for _, r := range ranks {
			r.step(e, step, float64(step), true)
		}
	}
	return ranks
}

func TestDDPStallOfOneRank(t *testing.T) {
	e := newTestEngine()
	const world, stuck = 4, 2
	ranks := ddpJob(e, world, 4)
	// Step 5: rank 2 never reaches its AllReduce; the others block in it.
	for _, r := range ranks {
		if r.rank != stuck {
			r.step(e, 5, 5, false)
		}
	}
	// Watchdogs poll every 100 ms: the others see a not-ready end event,
	// the stuck rank its last, completed one.
	for tm := 5.1; tm < 25; tm += 0.1 {
		for _, r := range ranks {
			if r.rank == stuck {
				feed(e, query(tm, r.pid, r.pid+1, evEnd+4, 0))
			} else {
				feed(e, query(tm, r.pid, r.pid+1, evEnd+5, RetNotReady))
			}
		}
	}
	if hs := e.Check(at(14)); len(hs) != 0 {
		t.Fatalf("fired before the timeout: %+v", hs)
	}
	hs := e.Check(at(25))
	if len(hs) != world {
		t.Fatalf("hangs %+v", hs)
	}
	for i, h := range hs {
		r := ranks[i]
		if h.PID != r.pid || h.Rank != r.rank {
			t.Fatalf("hang %d: %+v", i, h)
		}
		if r.rank == stuck {
			want := Lag{Comm: CommIDString([16]byte{0x77}), Issued: 4, Awaited: 5, PeerPID: ranks[0].pid, PeerRank: 0}
			if h.Kind != "host" || h.Lagging == nil || h.Pending != 0 {
				t.Fatalf("stuck rank: %+v lag %+v", h, h.Lagging)
			}
			// The decision names the op it owes: the collective its peer,
			// decided in the same check, is stuck in.
			got := *h.Lagging
			if o := got.Op; o == nil || o.Kind != OpCollective || o.Op != "AllReduce" || o.Seq != 5 || o.Comm != want.Comm {
				t.Fatalf("stuck rank owes %+v, want AllReduce #5", o)
			}
			if got.Op = nil; got != want {
				t.Fatalf("stuck rank: lag %+v, want %+v", got, want)
			}
			if len(h.Peers) != world || h.Peers[ranks[0].pid][0].Issued != 5 {
				t.Fatalf("peers' communicators %+v", h.Peers)
			}
			continue
		}
		// The compute kernels before the AllReduce completed unobserved:
		// the oldest op not known complete is the step's first kernel,
		// and the collective it waits behind is named beside it.
		o, c := h.Oldest, h.Collective
		if h.Kind != "gpu" || o == nil || o.Kernel != "gemm_bf16_kernel" || o.Stream != streamC || h.AgeNs != at(20) {
			t.Fatalf("rank %d: %+v oldest %+v", r.rank, h, o)
		}
		if c == nil || c.Op != "AllReduce" || c.Seq != 5 || c.NRanks != world || c.Stream != streamN || c.Bytes != 2<<20 {
			t.Fatalf("rank %d: collective %+v", r.rank, c)
		}
		calls := map[string]bool{}
		for _, w := range h.Waiters {
			calls[w.Call] = true
		}
		if !calls["cuStreamSynchronize"] || !calls["cuEventQuery (polling)"] {
			t.Fatalf("rank %d waiters %+v", r.rank, h.Waiters)
		}
		if c := h.Comms[0]; c.Issued != 5 || c.Completed != 4 {
			t.Fatalf("rank %d comm %+v", r.rank, c)
		}
	}
	st := e.ProcStats(ranks[0].pid)
	if len(st.Kernels) != 2 || st.Kernels[0].Observed.Count != 4 || len(st.Collectives) != 1 || st.Collectives[0].Observed.Count != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDDPKernelHangOfOneRank: rank 1's compute kernel never ends, so the
// AllReduce behind it never starts there and never completes anywhere.
// Every rank issued the same work; what tells them apart is the
// watchdog's poll of each collective's start event: ready on the peers
// (their compute completed, retired through the stream wait), never on
// rank 1. Its oldest op is then a kernel, the peers' the collective.
func TestDDPKernelHangOfOneRank(t *testing.T) {
	e := newTestEngine()
	const world, hung = 4, 1
	ranks := ddpJob(e, world, 4)
	for _, r := range ranks {
		r.step(e, 5, 5, false)
	}
	for tm := 5.1; tm < 25; tm += 0.1 {
		for _, r := range ranks {
			started := int32(0)
			if r.rank == hung {
				started = RetNotReady
			}
			feed(e, query(tm, r.pid, r.pid+1, evStart+5, started), query(tm, r.pid, r.pid+1, evEnd+5, RetNotReady))
		}
	}
	hs := e.Check(at(25))
	if len(hs) != world {
		t.Fatalf("hangs %+v", hs)
	}
	for i, h := range hs {
		if h.Kind != HangGPU || h.Oldest == nil {
			t.Fatalf("rank %d: %+v", i, h)
		}
		if c := h.Collective; c == nil || c.Op != "AllReduce" || c.Seq != 5 {
			t.Fatalf("rank %d: collective %+v", i, c)
		}
		o := h.Oldest
		if i == hung {
			if o.Kind != OpKernel || o.Kernel != "gemm_bf16_kernel" || o.Stream != streamC || h.AgeNs != at(20) {
				t.Fatalf("hung rank: oldest %+v age %d", o, h.AgeNs)
			}
			continue
		}
		if o.Kind != OpCollective || o.Seq != 5 || o.Stream != streamN {
			t.Fatalf("rank %d: oldest %+v, want the AllReduce its compute was retired up to", i, o)
		}
	}
}

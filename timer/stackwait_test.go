package timer

import (
	"testing"
	"time"
)

// The waits of the H100 dumps (collector/capture/gpuwait/testdata).
var (
	deviceSync = ThreadWait{TID: 886, Call: "cuCtxSynchronize_v2", From: "c10::cuda::device_synchronize",
		Python: "synchronize@torch/cuda/__init__.py:1162;<module>@gpujob.py:47", State: 'R'}
	glooSync = ThreadWait{TID: 1173, Call: "cuStreamSynchronize", From: "c10d::AsyncAllreduceCUDAHostWork::run", State: 'R'}
)

// sampled is a rank driven by samples (and, for peers, looks) at chosen
// times, with a 10 s timeout.
type sampled struct {
	t *testing.T
	e *Engine
}

func newSampled(t *testing.T) *sampled {
	return &sampled{t: t, e: NewEngine(Config{HangTimeout: 10 * time.Second})}
}

// sample passes one sample of pid at time s (seconds) with waits in it.
func (s *sampled) sample(at0 float64, pid int, waits ...ThreadWait) {
	s.e.ObserveSample(Sample{PID: pid, Time: at(at0), Waits: waits})
}

// look passes a look at pid's main thread at time s.
func (s *sampled) look(at0 float64, l Look) {
	l.Time = at(at0)
	s.e.Observe(l)
}

// check returns the decisions of a Check at time s.
func (s *sampled) check(at0 float64) map[int]HangKind { return kinds(s.e.Check(at(at0))) }

// A lone rank spinning in the driver's synchronize is decided gpu at the
// first sample more than the timeout after the first that saw the wait,
// the wait and the kernel named.
func TestStackWaitLoneRank(t *testing.T) {
	s := newSampled(t)
	// (launched by another thread: a thread whose latest call the probes
	// saw was a launch would be decided by the rule for calls whose
	// return is not probed, at the first sample past the timeout)
	feed(s.e, launch(100, 886, 887, 0, "spin_kernel"))
	s.sample(101, 886, deviceSync)
	s.sample(106, 886, deviceSync)
	if d := s.check(110.9); len(d) != 0 {
		t.Fatalf("decided %v before the timeout", d)
	}
	s.sample(111, 886, deviceSync) // exactly the timeout after the first: not past it
	if d := s.check(111.5); len(d) != 0 {
		t.Fatalf("decided %v at the timeout", d)
	}
	s.sample(111.1, 886, deviceSync)
	hs := s.e.Check(at(111.2))
	if len(hs) != 1 || hs[0].Kind != "gpu" || hs[0].PID != 886 {
		t.Fatalf("decisions %+v", hs)
	}
	h := hs[0]
	sw := h.StackWait
	if sw == nil || sw.TID != 886 || sw.Call != "cuCtxSynchronize_v2" || sw.From != "c10::cuda::device_synchronize" ||
		sw.State != "R" || sw.Since != at(101) || sw.Seen != at(111.1) || sw.Python != deviceSync.Python {
		t.Errorf("stack wait %+v", sw)
	}
	if len(h.Waiters) != 1 || h.Waiters[0].Call != "cuCtxSynchronize_v2 from c10::cuda::device_synchronize (seen on its stack)" {
		t.Errorf("waiters %+v", h.Waiters)
	}
	if h.Oldest == nil || h.Oldest.Kernel != "spin_kernel" {
		t.Errorf("oldest %+v: want the kernel the probes saw", h.Oldest)
	}
	if h.AgeNs != at(111.2)-at(101) {
		t.Errorf("age %v", time.Duration(h.AgeNs))
	}
	// The wait ends: recovered.
	s.sample(116, 886)
	if r := s.e.Recovered(at(116.1)); len(r) != 1 || r[0] != 886 {
		t.Errorf("recovered %v", r)
	}
}

// No false alarm: a long synchronize shorter than the timeout, a wait that
// moves (another caller, other Python frames), and a loop of long
// synchronizes at one place whose returns the probes see.
func TestStackWaitNoFalseAlarm(t *testing.T) {
	t.Run("shorter than the timeout", func(t *testing.T) {
		s := newSampled(t)
		s.sample(101, 886, deviceSync)
		s.sample(106, 886, deviceSync)
		s.sample(111.5, 886) // ended
		s.sample(116, 886, deviceSync)
		s.sample(121.5, 886, deviceSync) // a new wait, 5.5 s old
		if d := s.check(122); len(d) != 0 {
			t.Errorf("decided %v", d)
		}
	})
	t.Run("the wait moves", func(t *testing.T) {
		s := newSampled(t)
		other := deviceSync
		other.Python = "synchronize@torch/cuda/__init__.py:1162;<module>@gpujob.py:52"
		s.sample(101, 886, deviceSync)
		s.sample(106, 886, other)
		s.sample(111.5, 886, other)
		if d := s.check(112); len(d) != 0 {
			t.Errorf("decided %v", d)
		}
		s.sample(116.5, 886, other) // 10.5 s in the second wait
		if d := s.check(117); d[886] != "gpu" {
			t.Errorf("decisions %v, want the second wait decided", d)
		}
	})
	t.Run("each step's synchronize returns", func(t *testing.T) {
		s := newSampled(t)
		for i := 0; i < 6; i++ {
			t0 := 100 + float64(i)*4.5
			feed(s.e, launch(t0, 886, 886, 0, "step"),
				enter(t0+0.1, 886, 886, KindDeviceSynchronize, 0, 0), exit(t0+4.4, 886, 886, KindDeviceSynchronize, 0, 0, 0))
		}
		// Every sample falls inside one of the synchronizes.
		for _, at0 := range []float64{101, 106, 111.5, 117, 122.5} {
			s.sample(at0, 886, deviceSync)
			if d := s.check(at0 + 0.1); len(d) != 0 {
				t.Fatalf("decided %v at %v", d, at0)
			}
		}
	})
}

// Four ranks, rank 2's kernel never ends: its gloo thread spins in
// cuStreamSynchronize while its main thread and the peers sleep. Rank 2 is
// decided gpu, the peers stalled, never rank 2 stalled.
func TestStackWaitFourRanks(t *testing.T) {
	s := newSampled(t)
	const r2 = 2
	peers := []int{1, 3, 4}
	decided := map[int]HangKind{}
	firstGPU := 0.0
	for now := 101.0; now <= 125; now++ {
		for _, pid := range append(peers, r2) {
			s.look(now, asleep(pid, 40, "futex", at(99)))
		}
		if int(now-101)%5 == 0 || now == 111.0+1 {
			s.sample(now, r2, glooSync)
			for _, pid := range peers {
				s.sample(now, pid)
			}
		}
		for pid, k := range s.check(now + 0.01) {
			decided[pid] = k
			if pid == r2 {
				firstGPU = now
			}
		}
	}
	if decided[r2] != "gpu" || decided[1] != "stalled" || decided[3] != "stalled" || decided[4] != "stalled" {
		t.Fatalf("decisions %v", decided)
	}
	if firstGPU != 112 {
		t.Errorf("rank 2 decided at %v, want 112 (the first sample past 101 + 10 s)", firstGPU)
	}
	h, _ := s.e.Hung(r2)
	if h.StackWait == nil || h.StackWait.TID != 1173 || h.Waiters[0].Call != "cuStreamSynchronize from c10d::AsyncAllreduceCUDAHostWork::run (seen on its stack)" {
		t.Errorf("decision %+v", h)
	}
}

// A rank that waits on the GPU while a peer computes is not hung: it may
// wait for that peer. Once the peer stops progressing for the timeout, it
// is.
func TestStackWaitWhilePeerComputes(t *testing.T) {
	s := newSampled(t)
	var cpu int64
	for now := 101.0; now <= 140; now++ {
		s.look(now, asleep(1, 5, "futex", at(100)))
		if now < 120 {
			cpu += sec
			s.look(now, running(2, uint64(now), cpu, "forward@model.py;step"+string(rune('a'+int(now)%3))+"@train.py"))
		} else {
			s.look(now, asleep(2, 500, "futex", at(119.5)))
		}
		if int(now)%5 == 1 {
			s.sample(now, 1, glooSync)
			s.sample(now, 2)
		}
		d := s.check(now + 0.01)
		switch {
		case now < 130 && len(d) > 0:
			t.Fatalf("decided %v at %v while the peer computed, or within the timeout after", d, now)
		case len(d) > 0:
			if d[1] != "gpu" {
				t.Fatalf("decisions %v", d)
			}
			return
		}
	}
	t.Fatal("never decided")
}

// A spinning data loader (a rank's main thread in Python, no GPU wait on
// any stack) and a lone rank asleep are not decided on stacks.
func TestStackWaitNoWaitNoDecision(t *testing.T) {
	s := newSampled(t)
	var cpu int64
	for now := 101.0; now <= 130; now++ {
		cpu += sec
		s.look(now, running(1, uint64(now), cpu, "__next__@dataloader.py;<module>@train.py"))
		s.sample(now, 1)
		if d := s.check(now + 0.01); len(d) != 0 {
			t.Fatalf("decided %v", d)
		}
	}
}

// A sample that could not read the waiting thread's stack (not stopped in
// time) neither clears nor confirms its wait: the next one that reads it
// does.
func TestStackWaitUnseen(t *testing.T) {
	s := newSampled(t)
	s.sample(101, 886, deviceSync)
	s.e.ObserveSample(Sample{PID: 886, Time: at(106), Unseen: []int{886}})
	s.e.ObserveSample(Sample{PID: 886, Time: at(111.5), Unseen: []int{886}})
	if d := s.check(111.6); len(d) != 0 {
		t.Fatalf("decided %v on unseen samples", d)
	}
	if since := s.e.StackWaitSince(886); since != at(101) {
		t.Fatalf("wait since %v, want the first sample's", time.Duration(since))
	}
	s.sample(116.5, 886, deviceSync)
	if d := s.check(116.6); d[886] != "gpu" {
		t.Errorf("decisions %v", d)
	}
}

// A native sample stops and resumes every thread: a peer asleep in place
// goes to sleep twice more by it, which is no progress.
func TestSampleIsNoProgress(t *testing.T) {
	s := newSampled(t)
	sleeps := uint64(40)
	for now := 101.0; now <= 115; now++ {
		l := asleep(1, sleeps, "34 0x0", at(100))
		l.LastRan = at(now - 0.5)
		if now > 101 && int(now)%5 == 1 {
			l.LastRan = at(now - 1) // the sample at the previous look's tick woke it
		}
		s.look(now, l)
		s.look(now, asleep(2, 7, "futex", at(100)))
		if int(now)%5 == 0 {
			s.sample(now, 1)
			s.sample(now, 2)
			sleeps += 2 // stopped and resumed
		}
		if d := s.check(now + 0.01); len(d) > 0 {
			if now <= 110 || d[1] != "stalled" || d[2] != "stalled" {
				t.Fatalf("decisions %v at %v", d, now)
			}
			return
		}
	}
	t.Fatal("the sampled rank was never stalled: the samples read as progress")
}

// A sample puts a sleeping thread to sleep twice, no more: ranks that
// slept more often between two looks progressed, though a sample came
// meanwhile and they wait at the same place again (a CPU job's ranks,
// never probed, are sampled each period, and on a loaded node each
// sample that misses a thread is retried at the next checks: four in a
// row). Each rank's main thread takes a batch from its DataLoader every
// 50 ms, back each time in the same poll, and no rank is stalled; once
// they stop waking, they are, a sample or none.
func TestSampledRanksProgress(t *testing.T) {
	const stuckAt = 120.0
	for _, order := range [][]int{{1, 2}, {2, 1}} {
		if at := sampledProgress(t, order, stuckAt); at < stuckAt+3 {
			t.Errorf("order %v: ranks asleep since %v decided at %v, want stalled past the 3 s timeout", order, stuckAt, at)
		}
	}
}

// sampledProgress runs TestSampledRanksProgress's ranks, looked at in
// order, until stuckAt, and returns when both were decided stalled.
func sampledProgress(t *testing.T, order []int, stuckAt float64) float64 {
	s := &sampled{t: t, e: NewEngine(Config{HangTimeout: 3 * time.Second})}
	sleeps := map[int]uint64{1: 400, 2: 700}
	for now := 101.0; now <= 130; now++ {
		for _, pid := range order {
			if now <= stuckAt {
				sleeps[pid] += 20 // 20 batches since the previous look, a sleep each
			}
			l := asleep(pid, sleeps[pid], "7 0x7f00 0x1 0x1388 0x0 0x0 0x0 0x7ffd10 0x7f10", at(min(now, stuckAt)-0.02))
			s.look(now, l)
		}
		if int(now)%5 < 4 { // sampled at four checks in a row of five
			for _, pid := range order {
				s.sample(now, pid)
				sleeps[pid] += 2 // stopped and resumed
			}
		}
		d := s.check(now + 0.01)
		switch {
		case now <= stuckAt && len(d) > 0:
			t.Fatalf("order %v: ranks progressing, decided %v at %v", order, d, now)
		case len(d) > 0:
			if d[1] != "stalled" || d[2] != "stalled" {
				t.Fatalf("order %v: decisions %v at %v, want both stalled", order, d, now)
			}
			return now
		}
	}
	t.Fatalf("order %v: ranks asleep since %v never stalled", order, stuckAt)
	return 0
}

// The probes came in the middle of a synchronize: its return is not seen
// (its entry came before them), but the next one's entry is: the wait the
// samples saw before it ended.
func TestStackWaitProbesMidCall(t *testing.T) {
	s := newSampled(t)
	s.sample(101, 886, deviceSync) // inside a call entered before the probes
	feed(s.e, enter(105, 886, 886, KindDeviceSynchronize, 0, 0))
	s.sample(111.5, 886, deviceSync) // inside the next one, 6.5 s old
	if d := s.check(111.6); len(d) != 0 {
		t.Fatalf("decided %v: two synchronizes taken for one wait", d)
	}
	if since := s.e.StackWaitSince(886); since != at(111.5) {
		t.Errorf("wait since %v, want the sample after the entry", time.Duration(since))
	}
}

// A wait a sample saw ends when the probes see its thread return from a
// blocking call, for the host and stalled rules too: the rank sampled as
// soon as it was known (its main thread in ncclCommInitRank), then busy
// for steps (never sampled meanwhile: it issues work), then silent while
// its peer waits on a collective it has not issued, is decided host at the
// check that decides the peer, not when a next sample, due a sample
// period after its last work, clears the old wait. A wait seen after the
// last return still holds the host rule off.
func TestStackWaitEndedByReturn(t *testing.T) {
	const h0, h1 = 0xa0, 0xb0
	initWait := ThreadWait{TID: 2, Call: "ncclCommInitRank", From: "ffi_call", Python: "__init__@run.py:420", State: 'R'}
	run := func(sampleAt float64) ([]Hang, *Engine) {
		e := twoRankEngine()
		e.ObserveSample(Sample{PID: 2, Time: at(sampleAt), Waits: []ThreadWait{initWait}})
		feed(e, commInit(1, 1, h0, 0x42, 0, 2), commInit(1, 2, h1, 0x42, 1, 2))
		for step := range 3 {
			t0 := 2 + float64(step)
			for pid, h := range map[int]uint64{1: h0, 2: h1} {
				feed(e, allReduce(t0, pid, h, 0, 1024), enter(t0+0.1, pid, pid, KindMemcpy, 0, 0),
					exit(t0+0.2, pid, pid, KindMemcpy, 0, 0, 0))
			}
		}
		// Rank 1 stops before step 3's all-reduce; rank 0 issues it and waits.
		feed(e, allReduce(5.5, 1, h0, 0, 1024), enter(5.6, 1, 1, KindMemcpy, 0, 0))
		return e.Check(at(16)), e
	}
	hs, e := run(0.5)
	if len(hs) != 2 || hs[0].PID != 1 || hs[0].Kind != "gpu" || hs[1].PID != 2 || hs[1].Kind != "host" ||
		hs[1].Lagging == nil || hs[1].Lagging.Issued != 3 || hs[1].Lagging.Awaited != 4 {
		t.Fatalf("hangs %+v, want the peer gpu and the silent rank host, lagging 3 of 4", hs)
	}
	if since := e.StackWaitSince(2); since != 0 {
		t.Errorf("wait since %v, want none: it ended", time.Duration(since))
	}
	if hs, _ := run(4.5); len(hs) != 1 || hs[0].PID != 1 {
		t.Fatalf("hangs %+v, want the peer's only: the silent rank's wait was seen after its last return", hs)
	}
}

// A thread's call of any kind after a sample saw it waiting ends that wait
// too (the return of ncclCommInitRank, a launch: it is out of the wait),
// but a query answered "not ready" does not (a poll inside the wait). A
// rank sampled at start-up in ncclCommInitRank that then launches its
// step's work and goes silent before its first all-reduce, with no
// synchronize or copy in between (a straggler at step 0), is decided host
// at the check that decides its peer.
func TestStackWaitEndedByAnyCall(t *testing.T) {
	const h0, h1 = 0xa0, 0xb0
	initWait := ThreadWait{TID: 2, Call: "ncclCommInitRank", From: "ffi_call", Python: "__init__@run.py:420", State: 'R'}
	e := twoRankEngine()
	e.ObserveSample(Sample{PID: 2, Time: at(0.5), Waits: []ThreadWait{initWait}})
	// The thread polls inside its wait: not ready.
	feed(e, Event{Time: at(0.7), PID: 2, TID: 2, Kind: KindEventQuery, Phase: PhaseExit, Ret: RetNotReady, Handle: 7})
	if since := e.StackWaitSince(2); since != at(0.5) {
		t.Fatalf("wait since %v after a not-ready query, want the sample's %v", time.Duration(since), time.Duration(at(0.5)))
	}
	// The communicators' creation returns (rank 1's seen as its call),
	// then rank 1's step-0 launch, then silence; rank 0 issues the
	// all-reduce and waits.
	feed(e, commInit(1, 1, h0, 0x42, 0, 2), commInit(1, 2, h1, 0x42, 1, 2))
	if since := e.StackWaitSince(2); since != 0 {
		t.Errorf("wait since %v after its call returned, want none: it ended", time.Duration(since))
	}
	silentAfterLaunch(t, e, h0)
}

// silentAfterLaunch feeds rank 1's (pid 2) step-0 launch and its silence
// after it, while rank 0 (pid 1) issues the all-reduce on handle h0 and
// waits in a copy, and checks both are decided at 13 s: rank 0 gpu, rank
// 1 host.
func silentAfterLaunch(t *testing.T, e *Engine, h0 uint64) {
	t.Helper()
	feed(e, launch(2, 2, 2, 0, "fwd"), allReduce(2.5, 1, h0, 0, 1024), enter(2.6, 1, 1, KindMemcpy, 0, 0))
	hs := e.Check(at(13))
	if len(hs) != 2 || hs[0].PID != 1 || hs[0].Kind != "gpu" || hs[1].PID != 2 || hs[1].Kind != "host" {
		t.Fatalf("hangs %+v, want the peer gpu and the silent rank host", hs)
	}
}

// A wait a sample saw before the rank's last GPU work does not hold off
// the host rule, even on a thread the probes never saw again (a helper
// thread caught in a poll at start-up): it says nothing of the silence
// after that work.
func TestStackWaitBeforeLastWork(t *testing.T) {
	const h0, h1 = 0xa0, 0xb0
	helper := ThreadWait{TID: 9, Call: "cuEventQuery", From: "watchdog", Python: "run@run.py:500", State: 'S'}
	e := twoRankEngine()
	feed(e, commInit(1, 1, h0, 0x42, 0, 2), commInit(1, 2, h1, 0x42, 1, 2))
	e.ObserveSample(Sample{PID: 2, Time: at(1.5), Waits: []ThreadWait{helper}})
	silentAfterLaunch(t, e, h0)
}

// A launch blocked with no probe to see it (attached after the hang,
// under CUDA_LAUNCH_BLOCKING=1) names its kernel from the launch's stub
// frame: in the stack wait and the waiter's call.
func TestStackWaitNamesLaunchedKernel(t *testing.T) {
	s := newSampled(t)
	blocked := ThreadWait{TID: 843, Call: "cuLaunchKernel", From: "at::cuda::sleep",
		Kernel: "at::cuda::(anonymous namespace)::spin_kernel", State: 'S'}
	s.sample(101, 843, blocked)
	s.sample(111.1, 843, blocked)
	hs := s.e.Check(at(111.2))
	if len(hs) != 1 || hs[0].StackWait == nil {
		t.Fatalf("decisions %+v", hs)
	}
	h := hs[0]
	if h.StackWait.Kernel != blocked.Kernel {
		t.Errorf("stack wait's kernel %q, want %q", h.StackWait.Kernel, blocked.Kernel)
	}
	if want := "cuLaunchKernel of at::cuda::(anonymous namespace)::spin_kernel from at::cuda::sleep (seen on its stack)"; len(h.Waiters) != 1 || h.Waiters[0].Call != want {
		t.Errorf("waiters %+v, want one in %q", h.Waiters, want)
	}
}

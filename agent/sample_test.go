package agent

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/timer"
)

// fakeSampler sees thread pid+1 of every rank spinning in the driver's
// synchronize from waitAt on, except that samples for which unseen says
// so cannot stop it (timer.Sample.Unseen), and counts samples per rank.
type fakeSampler struct {
	mu      sync.Mutex
	waitAt  int64
	waiting map[int]bool // the processes that wait from waitAt on; nil: every one
	unseen  func(now int64) bool
	times   map[int][]int64
	forgot  []int
}

func (f *fakeSampler) Sample(pid int, now int64) (timer.Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.times == nil {
		f.times = map[int][]int64{}
	}
	f.times[pid] = append(f.times[pid], now)
	s := timer.Sample{PID: pid, Time: now}
	switch {
	case f.unseen != nil && f.unseen(now):
		s.Unseen = []int{pid + 1}
	case now >= f.waitAt && (f.waiting == nil || f.waiting[pid]):
		s.Waits = []timer.ThreadWait{{TID: pid + 1, Call: "cuCtxSynchronize_v2", From: "wait_device", State: 'R'}}
	}
	return s, nil
}

func (f *fakeSampler) Forget(pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = append(f.forgot, pid)
}

// A lone rank (world size 1) whose thread spins in a GPU wait is decided
// gpu on its stack, at the first sample past the timeout, sampled no more
// often than SamplePeriod; the sampler forgets a rank that exits.
func TestLoneRankDecidedByStack(t *testing.T) {
	sp := &fakeSampler{waitAt: 3 * sec}
	b, decidedAt := loneRank(t, sp, 30*sec)
	// Samples at 2 s (no wait), 7 s (the wait, first seen), 12 s, then
	// 17 s + 1 ns, the first tick past 7 + 10 s: at 18 s.
	if decidedAt != 18*sec {
		t.Fatalf("decided at %v, want 18s; samples at %v", time.Duration(decidedAt), sp.times[100])
	}
	ts := sp.times[100]
	for i := 1; i < len(ts); i++ {
		if ts[i]-ts[i-1] < int64(SamplePeriod(10*time.Second))-int64(DefaultInterval/2) {
			t.Errorf("samples %v apart, under the period", time.Duration(ts[i]-ts[i-1]))
		}
	}
	h := b.events("hang")[0]
	if h.Kind != "gpu" || h.StackWait == nil || h.StackWait.TID != 101 || len(h.Waiters) != 1 ||
		h.Waiters[0].Call != "cuCtxSynchronize_v2 from wait_device (seen on its stack)" {
		t.Errorf("report %+v", h)
	}
	b.HandleEvent(timer.Event{Time: 19 * sec, PID: 100, TID: 100, Kind: timer.KindProcessExit})
	if len(sp.forgot) == 0 || sp.forgot[len(sp.forgot)-1] != 100 {
		t.Errorf("sampler forgot %v", sp.forgot)
	}
}

// loneRank ticks a lone rank (world size 1, started at 1 s) sampled by
// sp with a 10 s timeout every second from 2 s until a hang is decided or
// until, and says when it was decided (0: never).
func loneRank(t *testing.T, sp *fakeSampler, until int64) (*bed, int64) {
	t.Helper()
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 1)},
		func(o *Options) { o.Sampler = sp; o.HangTimeout = 10 * time.Second })
	b.HandleEvent(timer.Event{Time: sec, PID: 100, TID: 100, Kind: timer.KindProcessExec})
	for ts := 2 * sec; ts <= until; ts += sec {
		b.at(ts)
		b.Tick(context.Background())
		if len(b.events("hang")) > 0 {
			return b, ts
		}
	}
	return b, 0
}

// A sample that could not stop the waiting thread (a loaded node) is taken
// again at the next check, not a period later: neither the first sight of
// a wait nor its confirmation slips by a period. A thread never stopped
// costs at most maxSampleRetries more samples a period.
func TestUnseenSampleRetried(t *testing.T) {
	for _, c := range []struct {
		name    string
		waitAt  int64
		unseen  func(int64) bool
		decided int64
		samples []int64
	}{
		// As TestLoneRankDecidedByStack, the confirming sample at 18 s
		// missing the thread: again at 19 s (a period later before).
		{"confirming", 3 * sec, func(ts int64) bool { return ts == 18*sec }, 19 * sec,
			[]int64{2 * sec, 7 * sec, 12 * sec, 18 * sec, 19 * sec}},
		// Hung before the attach, the first sample missing the thread:
		// first seen at 3 s, confirmed past 13 s (at 7 s and 17 s before).
		{"first", 0, func(ts int64) bool { return ts == 2*sec }, 14 * sec,
			[]int64{2 * sec, 3 * sec, 8 * sec, 14 * sec}},
		// Never stopped: a sample and three more, a period, again.
		{"never", 0, func(int64) bool { return true }, 0,
			[]int64{2 * sec, 3 * sec, 4 * sec, 5 * sec, 10 * sec, 11 * sec, 12 * sec, 13 * sec, 18 * sec, 19 * sec, 20 * sec}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := &fakeSampler{waitAt: c.waitAt, unseen: c.unseen}
			_, decidedAt := loneRank(t, sp, 20*sec)
			if decidedAt != c.decided || !slices.Equal(sp.times[100], c.samples) {
				t.Errorf("decided at %v, samples at %v; want %v and %v", time.Duration(decidedAt), asDurations(sp.times[100]),
					time.Duration(c.decided), asDurations(c.samples))
			}
		})
	}
}

func asDurations(ns []int64) []time.Duration {
	d := make([]time.Duration, len(ns))
	for i, n := range ns {
		d[i] = time.Duration(n)
	}
	return d
}

func TestNextSample(t *testing.T) {
	const p, to, slack = 5 * sec, 10 * sec, sec / 2
	for _, c := range []struct{ last, since, want int64 }{
		{0, 0, 0},                              // never sampled: now
		{7 * sec, 0, 11*sec + sec/2},           // no wait: a period on, less the slack
		{7 * sec, 7 * sec, 11*sec + sec/2},     // the confirming sample (17 s) is two periods on: one between
		{12 * sec, 7 * sec, 17*sec + 1},        // it falls within the second period: taken then, not at 22 s
		{12*sec + sec/10, 7 * sec, 17*sec + 1}, // the same, the check a little late
		{12 * sec, 2 * sec, 16*sec + sec/2},    // it is due already: a period on
	} {
		if got := nextSample(c.last, p, slack, c.since, to); got != c.want {
			t.Errorf("nextSample(last %v, since %v) = %v, want %v", time.Duration(c.last), time.Duration(c.since), time.Duration(got), time.Duration(c.want))
		}
	}
}

// A rank the probes see launching is not sampled: a healthy probed job
// costs no stop. Once it stops launching for a period, it is.
func TestBusyRankNotSampled(t *testing.T) {
	sp := &fakeSampler{waitAt: 1 << 62}
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 2)},
		func(o *Options) { o.Sampler = sp; o.HangTimeout = 10 * time.Second })
	for ts := 2 * sec; ts <= 20*sec; ts += sec {
		work(b.Agent, 100, ts-sec/2, true)
		b.at(ts)
		b.Tick(context.Background())
	}
	if n := len(sp.times[100]); n != 0 {
		t.Fatalf("a launching rank sampled %d times", n)
	}
	for ts := 21 * sec; ts <= 26*sec; ts += sec {
		b.at(ts)
		b.Tick(context.Background())
	}
	if ts := sp.times[100]; len(ts) != 1 || ts[0] != 25*sec {
		t.Errorf("samples at %v, want one, a period after its last launch (19.5 s)", ts)
	}
}

// Follow's processes that already run and are no ranks are sampled once,
// at the next check: one found waiting on the GPU (a single process with
// no RANK, hung before the attach) is a rank from then on, and its wait
// is decided as a rank's (first sight at the attach, confirmed past the
// timeout); the others, not waiting, are never sampled again; a process
// that maps no probed library is never stopped. A first sample that
// could not stop every thread (a loaded node) is taken again at the next
// check.
func TestFollowSamplesRunningOnce(t *testing.T) {
	envs := map[int]map[string]string{10: {"PATH": "/bin"}, 11: {"PATH": "/bin"}, 12: {"PATH": "/bin"}}
	for _, c := range []struct {
		name          string
		probed        bool
		unseen        func(int64) bool
		decided       int64
		waiter, other []int64 // samples of 11 (waiting) and of 10 and 12 (not)
	}{
		// As a rank's: a period on, then the check past 1 s + the
		// timeout (the loop would wake just then).
		{"probed", true, nil, 12 * sec, []int64{sec, 6 * sec, 12 * sec}, []int64{sec}},
		{"first-unseen", true, func(ts int64) bool { return ts == sec }, 13 * sec, []int64{sec, 2 * sec, 7 * sec, 13 * sec}, []int64{sec, 2 * sec}},
		{"unprobed", false, nil, 0, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := &fakeSampler{waiting: map[int]bool{11: true}, unseen: c.unseen}
			b := newBed(t, "node-a", t.TempDir(), envs, func(o *Options) {
				o.Sampler, o.HangTimeout = sp, 10*time.Second
				o.Descendants = func(int) []int { return []int{11, 12} }
				o.Parent = func(pid int) (int, bool) { return map[int]int{11: 10, 12: 10}[pid], pid != 10 }
			})
			b.tracer.unprobed = !c.probed
			if err := b.Follow(10); err != nil {
				t.Fatal(err)
			}
			var decided int64
			for ts := sec; ts <= 14*sec && decided == 0; ts += sec {
				b.at(ts)
				b.Tick(context.Background())
				if hs := b.events("hang"); len(hs) > 0 {
					if hs[0].PID != 11 || hs[0].Kind != timer.HangGPU {
						t.Fatalf("hang %+v, want pid 11 on the GPU", hs[0])
					}
					decided = ts
				}
			}
			var ranks []int
			for _, r := range b.events("rank") {
				ranks = append(ranks, r.PID)
			}
			if want := map[bool][]int{true: {11}}[c.probed]; !slices.Equal(ranks, want) {
				t.Errorf("ranks announced %v, want %v", ranks, want)
			}
			if decided != c.decided || !slices.Equal(sp.times[11], c.waiter) {
				t.Errorf("decided at %v, 11 sampled at %v; want %v and %v", time.Duration(decided), asDurations(sp.times[11]),
					time.Duration(c.decided), asDurations(c.waiter))
			}
			for _, pid := range []int{10, 12} {
				if got := sp.times[pid]; !slices.Equal(got, c.other) {
					t.Errorf("%d sampled at %v, want %v", pid, asDurations(got), asDurations(c.other))
				}
			}
		})
	}
}

// A rank whose thread entered a launch and made no call since (a launch
// behind a full queue, or under CUDA_LAUNCH_BLOCKING, behind a kernel
// that never ends) is sampled once just past the timeout after the entry,
// whatever its period and its last work (the launch itself), and decided
// at that check when the thread is inside the GPU call; a launch that
// returned costs that one sample, the next a period on. With a 3 s timeout the 5 s period alone
// would take the first sample too late.
func TestBlockedLaunchSampledPastTheTimeout(t *testing.T) {
	for _, c := range []struct {
		name    string
		waitAt  int64 // when the thread is inside the GPU call (1<<62: never)
		unseen  func(int64) bool
		decided int64
		samples []int64
	}{
		// (the loop wakes a millisecond at least after a check)
		{"blocked", 2 * sec, nil, 5*sec + sec/1000, []int64{5*sec + sec/1000}},
		{"returned", 1 << 62, nil, 0, []int64{5*sec + sec/1000, 10 * sec}},
		// The spinning thread not stopped in time by four samples (a
		// loaded node): sampled at each check until one reads it.
		{"unseen", 2 * sec, func(ts int64) bool { return ts < 9*sec }, 9 * sec, []int64{5*sec + sec/1000, 6 * sec, 7 * sec, 8 * sec, 9 * sec}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := &fakeSampler{waitAt: c.waitAt, unseen: c.unseen}
			b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 1)},
				func(o *Options) { o.Sampler = sp; o.HangTimeout = 3 * time.Second })
			b.HandleEvent(timer.Event{Time: sec, PID: 100, TID: 100, Kind: timer.KindProcessExec})
			b.HandleEvent(timer.Event{Time: 2 * sec, PID: 100, TID: 101, Kind: timer.KindLaunch, Kernel: "spin_kernel"})
			var decidedAt int64
			for ts := 2 * sec; ts <= 10*sec && decidedAt == 0; ts += sec {
				b.at(ts)
				b.Tick(context.Background())
				if d := b.wakeIn(); d > 0 && d < DefaultInterval {
					ts += int64(d) // the loop wakes for the confirming sample
					b.at(ts)
					b.Tick(context.Background())
					ts -= int64(d)
				}
				if hs := b.events("hang"); len(hs) > 0 {
					decidedAt = hs[0].Time.UnixNano()
					if hs[0].Kind != timer.HangGPU || len(hs[0].Waiters) != 1 || hs[0].Waiters[0].Call != "cuCtxSynchronize_v2" ||
						hs[0].Waiters[0].Since != 2*sec || hs[0].Kernel != "spin_kernel" {
						t.Errorf("report %+v", hs[0])
					}
				}
			}
			if got := sp.times[100]; !slices.Equal(got, c.samples) || (decidedAt != 0) != (c.decided != 0) {
				t.Errorf("samples at %v, decided %v; want %v, decided %v", asDurations(got), decidedAt != 0, asDurations(c.samples), c.decided != 0)
			}
		})
	}
}

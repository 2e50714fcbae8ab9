package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/timer"
)

// sleeperCapture samples a rank asleep in a Python loop of time.sleep,
// and counts its samples.
type sleeperCapture struct {
	mu    sync.Mutex
	calls map[int]int
}

func (c *sleeperCapture) Capture(pid int) (*dump.Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[int]int{}
	}
	c.calls[pid]++
	return &dump.Process{PID: pid, Threads: []stack.Thread{{TID: pid,
		Native: []stack.Frame{{Func: "clock_nanosleep", Module: "/lib/x86_64-linux-gnu/libc.so.6"}, {Func: "_PyEval_EvalFrameDefault", Module: "/usr/bin/python3.11"}},
		Python: []stack.Frame{{Func: "straggle_forever", File: "/t/run.py", Line: 729, Module: "python"}, {Func: "train_step", File: "/t/run.py", Line: 800, Module: "python"}}}}}, nil
}

func (c *sleeperCapture) count(pid int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[pid]
}

// allReduces makes pid issue n all-reduces on communicator handle at t,
// then block in a synchronize of their stream; done says whether it
// returns.
func allReduces(a *Agent, pid int, handle uint64, t int64, n int, done bool) {
	for range n {
		a.HandleEvent(timer.Event{Time: t, PID: pid, TID: pid, Kind: timer.KindCollective, Op: timer.OpAllReduce, Count: 1024, Dtype: 9,
			Comm: handle, Stream: 5, Peer: -1})
	}
	a.HandleEvent(timer.Event{Time: t + 1, PID: pid, TID: pid, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseEnter, Stream: 5})
	if done {
		a.HandleEvent(timer.Event{Time: t + 2, PID: pid, TID: pid, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseExit, Stream: 5})
	}
}

func commInitEvent(pid int, t int64, rank, n int32) timer.Event {
	ev := timer.Event{Time: t, PID: pid, TID: pid, Kind: timer.KindCommInit, Phase: timer.PhaseExit, Comm: 0xc0 + uint64(pid), Rank: rank, NRanks: n}
	ev.CommID[0], ev.CommID[1] = 0x9c, 0x1e
	return ev
}

// Ranks 0 and 1 wait in the first all-reduce of step 2; rank 2 sleeps in
// Python instead of issuing it. The early warning samples rank 2 once,
// when it has issued nothing for about the warning's wait, names it when
// its peers have waited that long, and says when it catches up; the
// waiting ranks are known to wait in the collective by the probes and
// are never stopped. No hang is decided, nothing is dumped.
func TestLagWarning(t *testing.T) {
	for _, warn := range []time.Duration{5 * time.Second, 0} {
		t.Run(warn.String(), func(t *testing.T) {
			sampler := &sleeperCapture{}
			envs := map[int]map[string]string{100: env(0, 3), 101: env(1, 3), 102: env(2, 3)}
			b := newBed(t, "node-a", t.TempDir(), envs, func(o *Options) {
				o.HangTimeout, o.LagWarn, o.LagSampler = time.Minute, warn, sampler
			})
			ctx := context.Background()
			for i, pid := range []int{100, 101, 102} {
				b.HandleEvent(commInitEvent(pid, sec/2, int32(i), 3))
				allReduces(b.Agent, pid, 0xc0+uint64(pid), 1*sec, 3, true)
			}
			allReduces(b.Agent, 100, 0xc0+100, 2*sec, 3, false)
			allReduces(b.Agent, 101, 0xc0+101, 2*sec, 3, false)
			id := "9c1e" + "0000000000000000000000000000"
			tick := func(at float64) {
				b.at(int64(at * float64(sec)))
				b.Tick(ctx)
			}

			tick(4.5)
			if sampler.count(102) != 0 || len(b.events(EventLagging)) != 0 {
				t.Fatalf("sampled or warned before anyone was idle: %d, %+v", sampler.count(102), b.events(EventLagging))
			}
			tick(5.5) // rank 2 idle 4.5 s, one interval short of the wait: sampled
			tick(6.5) // ranks 0 and 1 idle too: in the collective, by the probes
			if warn == 0 {
				tick(8)
				if sampler.count(102) != 0 || len(b.events(EventLagging)) != 0 {
					t.Fatalf("the warning is off, yet sampled %d, warned %+v", sampler.count(102), b.events(EventLagging))
				}
				for _, r := range b.Snapshot().Ranks {
					if r.Activity != nil || len(r.Lags) != 0 || len(r.Comms) != 1 || r.Comms[0].ID != id {
						t.Errorf("rank %d: %+v %+v %+v", r.Rank, r.Activity, r.Lags, r.Comms)
					}
				}
				return
			}
			if n := sampler.count(102); n != 1 {
				t.Fatalf("rank 2 sampled %d times, want once", n)
			}
			// The loop is asked to check again just as the peers' wait
			// (entered 2 s + 1 ns) reaches the warning's, not at the next
			// interval.
			if due := b.lag.Due(); due != 7*sec+1 {
				t.Errorf("next check at %d ns, want %d", due, 7*sec+1)
			}
			if len(b.events(EventLagging)) != 0 {
				t.Fatalf("warned before the peers waited %v: %+v", warn, b.events(EventLagging))
			}
			tick(7.1) // the peers have waited 5.1 s
			lags := b.events(EventLagging)
			if len(lags) != 1 || lags[0].PID != 102 || *lags[0].Rank != 2 || lags[0].Comm != id || lags[0].Seq != 4 ||
				lags[0].Activity != "python" || lags[0].Detail != "straggle_forever@run.py:729" || lags[0].Laggard.Peers != 2 {
				t.Fatalf("lagging reports %+v", lags)
			}
			tick(8)
			if n := sampler.count(102); n != 1 || len(b.events(EventLagging)) != 1 {
				t.Fatalf("sampled %d times, warned %d times: want once each per episode", n, len(b.events(EventLagging)))
			}
			for _, pid := range []int{100, 101} {
				if sampler.count(pid) != 0 || b.capture.count(pid) != 0 {
					t.Errorf("waiting rank %d was stopped", pid)
				}
			}
			want := map[int]metrics.Rank{
				0: {Comms: []metrics.Comm{{ID: id, Issued: 6, Completed: 3, WaitSeconds: 8 - 2 - 1e-9}}, Activity: &metrics.Activity{Kind: "collective", Detail: "AllReduce #4 on comm 9c1e00000000"}},
				2: {Comms: []metrics.Comm{{ID: id, Issued: 3, Completed: 3}}, Lags: []metrics.Lag{{Comm: id, Activity: "python", Lagging: true}},
					Activity: &metrics.Activity{Kind: "python", Detail: "straggle_forever@run.py:729"}},
			}
			for _, r := range b.Snapshot().Ranks {
				w, ok := want[r.Rank]
				if !ok {
					continue
				}
				if !sameLag(r, w) {
					t.Errorf("rank %d: comms %+v lags %+v activity %+v, want %+v %+v %+v", r.Rank, r.Comms, r.Lags, r.Activity, w.Comms, w.Lags, w.Activity)
				}
				if r.Hung {
					t.Errorf("rank %d hung", r.Rank)
				}
			}

			// Rank 2 issues the step's collectives: the peers' waits end.
			allReduces(b.Agent, 102, 0xc0+102, 9*sec, 3, true)
			b.HandleEvent(timer.Event{Time: 9*sec + 5, PID: 100, TID: 100, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseExit, Stream: 5})
			b.HandleEvent(timer.Event{Time: 9*sec + 5, PID: 101, TID: 101, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseExit, Stream: 5})
			tick(9.5)
			if up := b.events(EventCaughtUp); len(up) != 1 || up[0].PID != 102 || up[0].Seq != 4 {
				t.Fatalf("caught up reports %+v", up)
			}
			for _, r := range b.Snapshot().Ranks {
				if r.Rank == 2 && (r.Activity != nil || len(r.Lags) != 1 || r.Lags[0].Lagging) {
					t.Errorf("rank 2 caught up and issues again, yet activity %+v, lags %+v", r.Activity, r.Lags)
				}
			}
			// Ranks 0 and 1 no longer wait in the collective, and issued
			// nothing since: what they do now is taken from a sample.
			for _, pid := range []int{100, 101} {
				if n := sampler.count(pid); n != 1 {
					t.Errorf("rank %d out of its collective, issuing nothing: sampled %d times, want once", pid-100, n)
				}
			}
			if len(b.events(EventHang)) != 0 || len(b.events(EventDump)) != 0 {
				t.Errorf("the warning decided or dumped: %+v %+v", b.events(EventHang), b.events(EventDump))
			}
		})
	}
}

func sameLag(r, w metrics.Rank) bool {
	if len(r.Comms) != len(w.Comms) || len(r.Lags) != len(w.Lags) || (r.Activity == nil) != (w.Activity == nil) {
		return false
	}
	for i := range r.Comms {
		g, x := r.Comms[i], w.Comms[i]
		if g.ID != x.ID || g.Issued != x.Issued || g.Completed != x.Completed || g.WaitSeconds < x.WaitSeconds-0.01 || g.WaitSeconds > x.WaitSeconds+0.01 {
			return false
		}
	}
	for i := range r.Lags {
		if r.Lags[i] != w.Lags[i] {
			return false
		}
	}
	return r.Activity == nil || *r.Activity == *w.Activity
}

// Without a way to take stacks (watch with the stall watch off, ptrace
// refused), the warning still names the rank, its activity unknown.
func TestLagWarningWithoutSamples(t *testing.T) {
	envs := map[int]map[string]string{100: env(0, 2), 101: env(1, 2)}
	b := newBed(t, "node-a", t.TempDir(), envs, func(o *Options) {
		o.HangTimeout, o.LagWarn, o.Capturer = time.Minute, 5*time.Second, nil
	})
	for i, pid := range []int{100, 101} {
		b.HandleEvent(commInitEvent(pid, sec/2, int32(i), 2))
		allReduces(b.Agent, pid, 0xc0+uint64(pid), 1*sec, 3, true)
	}
	allReduces(b.Agent, 100, 0xc0+100, 2*sec, 3, false)
	for _, s := range []float64{5.5, 6.5, 7.1, 8} {
		b.at(int64(s * float64(sec)))
		b.Tick(context.Background())
	}
	lags := b.events(EventLagging)
	if len(lags) != 1 || lags[0].PID != 101 || lags[0].Activity != "unknown" {
		t.Fatalf("lagging reports %+v", lags)
	}
	for _, r := range b.Snapshot().Ranks {
		if r.Rank == 1 && (r.Activity == nil || r.Activity.Kind != "unknown") {
			t.Errorf("rank 1 activity %+v, want unknown", r.Activity)
		}
	}
}

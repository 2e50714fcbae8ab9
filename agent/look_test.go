package agent

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/timer"
)

// fakeLooker sees every rank's main thread asleep in place since asleepAt,
// or running with changing frames before it.
type fakeLooker struct {
	mu       sync.Mutex
	asleepAt int64
	forgot   []int
}

func (f *fakeLooker) Look(pid int, now int64) (timer.Look, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now < f.asleepAt {
		return timer.Look{PID: pid, Time: now, State: 'R', Sleeps: 1, CPU: now, Python: "step@train.py"}, true
	}
	return timer.Look{PID: pid, Time: now, State: 'S', Sleeps: 1, Site: "202 0x7f 0x80", LastRan: f.asleepAt}, true
}

func (f *fakeLooker) Forget(pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = append(f.forgot, pid)
}

// Ranks that made no GPU call at all (a CPU job on gloo) and whose main
// threads stopped are decided "stalled" past the timeout, never before,
// dumped, and the looker forgets a rank that exits.
func TestSilentRanksStalled(t *testing.T) {
	lk := &fakeLooker{asleepAt: 3 * sec}
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 2), 101: env(1, 2)},
		func(o *Options) { o.Looker = lk })
	b.HandleEvent(timer.Event{Time: sec, PID: 100, TID: 100, Kind: timer.KindProcessExec})
	b.HandleEvent(timer.Event{Time: sec, PID: 101, TID: 101, Kind: timer.KindProcessExec})
	for ts := 2 * sec; ts <= 5*sec; ts += sec {
		b.at(ts)
		b.Tick(context.Background())
	}
	if hs := b.events("hang"); len(hs) != 0 {
		t.Fatalf("decided within the timeout: %+v", hs)
	}
	b.at(5*sec + sec/2)
	b.Tick(context.Background())
	hs := b.events("hang")
	if len(hs) != 2 {
		t.Fatalf("hang reports %+v, want both ranks", hs)
	}
	for _, h := range hs {
		if h.Kind != "stalled" || h.Stall == nil || h.Stall.Site != "202 0x7f 0x80" {
			t.Errorf("report %+v stall %+v", h, h.Stall)
		}
	}
	for _, r := range b.Snapshot().Ranks {
		if !slices.Equal(r.Detectors, []string{metrics.DetectorGPU, metrics.DetectorStacks}) || r.HangKind != timer.HangStalled {
			t.Errorf("rank %d detectors %v kind %q", r.Rank, r.Detectors, r.HangKind)
		}
	}
	if ds := b.events("dump"); len(ds) != 2 || ds[0].Site == "" {
		t.Errorf("dumps %+v, want both ranks with the main thread's site", ds)
	}
	b.HandleEvent(timer.Event{Time: 6 * sec, PID: 101, TID: 101, Kind: timer.KindProcessExit})
	if lk.forgot[len(lk.forgot)-1] != 101 {
		t.Errorf("looker forgot %v", lk.forgot)
	}
}

// A rank that maps no probed library is watched by looks only, and the
// metrics say so.
func TestBlindRankDetectors(t *testing.T) {
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 1)},
		func(o *Options) { o.Looker = &fakeLooker{asleepAt: 100 * sec} })
	b.tracer.unprobed = true
	b.HandleEvent(timer.Event{Time: sec, PID: 100, TID: 100, Kind: timer.KindProcessExec})
	b.Tick(context.Background())
	rs := b.Snapshot().Ranks
	if len(rs) != 1 || !slices.Equal(rs[0].Detectors, []string{metrics.DetectorStacks}) {
		t.Fatalf("ranks %+v", rs)
	}
}

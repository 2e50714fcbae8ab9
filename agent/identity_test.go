package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/timer"
)

// A rank's forked DataLoader workers share its RANK: they are its helpers,
// never ranks; a shell that runs the rank's python is a wrapper. Ranks,
// looks and metrics see one process per rank.
func TestHelpersAndWrappers(t *testing.T) {
	envs := map[int]map[string]string{
		10: env(0, 2), // sh -c python (wrapper)
		11: env(0, 2), // the rank: python
		12: env(0, 2), // its DataLoader worker
		13: env(0, 2), // another worker
		20: env(1, 2), // rank 1, no wrapper
		21: env(1, 2), // its worker
	}
	parents := map[int]struct {
		ppid   int
		python bool
	}{10: {1, false}, 11: {10, true}, 12: {11, true}, 13: {11, true}, 20: {1, true}, 21: {20, true}}
	b := newBed(t, "node-a", t.TempDir(), envs, func(o *Options) {
		o.Parent = func(pid int) (int, bool) { return parents[pid].ppid, parents[pid].python }
	})
	for _, pid := range []int{10, 11, 12, 13, 20, 21} {
		b.HandleEvent(timer.Event{Time: sec, PID: pid, TID: pid, Kind: timer.KindProcessExec})
	}
	b.Tick(context.Background())
	var got []int
	for _, r := range b.Snapshot().Ranks {
		got = append(got, r.PID)
	}
	if len(got) != 2 || got[0] != 11 || got[1] != 20 {
		t.Fatalf("ranks %v, want [11 20]", got)
	}
	if h := b.book.Helpers(11); len(h) != 2 || h[0] != 12 || h[1] != 13 {
		t.Errorf("helpers of rank 0: %v", h)
	}
	if len(b.events("rank")) != 2 {
		t.Errorf("rank reports %+v", b.events("rank"))
	}
	// The rank exits (its workers linger a moment): no rank 0 is left, and a
	// worker never becomes one.
	b.HandleEvent(timer.Event{Time: 2 * sec, PID: 11, TID: 11, Kind: timer.KindProcessExit})
	for _, r := range b.Snapshot().Ranks {
		if r.Rank == 0 && r.PID != 11 {
			t.Errorf("process %d became rank 0 after the rank exited", r.PID)
		}
	}
}

// A process whose environment names no rank (an MPI launcher's variables
// unknown to us) takes the rank and size of its first communicator, even
// created before its environment was read.
func TestIdentityFromCommunicator(t *testing.T) {
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: {"PATH": "/bin"}}, nil)
	b.HandleEvent(timer.Event{Time: sec, PID: 100, TID: 100, Kind: timer.KindCommInit, Rank: 3, NRanks: 4, CommID: [16]byte{1}})
	b.HandleEvent(timer.Event{Time: sec, PID: 100, TID: 100, Kind: timer.KindCommInit, Rank: 0, NRanks: 2, CommID: [16]byte{2}})
	b.looked()
	rs := b.Snapshot().Ranks
	if len(rs) != 1 || rs[0].Rank != 3 {
		t.Fatalf("ranks %+v, want rank 3 from the first communicator", rs)
	}
	if id, _ := b.identity(100); id.World != 4 || id.Source != "nccl" {
		t.Errorf("identity %+v", id)
	}
}

// A rank's dump holds its helpers' threads; helpers get no file of their
// own.
func TestHelpersDumpedWithRank(t *testing.T) {
	dir := t.TempDir()
	envs := map[int]map[string]string{11: env(0, 1), 12: env(0, 1)}
	b := newBed(t, "node-a", dir, envs, func(o *Options) {
		o.Parent = func(pid int) (int, bool) { return map[int]int{11: 1, 12: 11}[pid], true }
	})
	for _, pid := range []int{11, 12} {
		b.HandleEvent(timer.Event{Time: sec, PID: pid, TID: pid, Kind: timer.KindProcessExec})
	}
	work(b.Agent, 11, sec, false)
	b.at(4 * sec)
	b.Tick(context.Background())
	b.Tick(context.Background())
	f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(0, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if f.PID != 11 || len(f.Helpers) != 1 || f.Helpers[0].PID != 12 || len(f.Helpers[0].Threads) == 0 {
		t.Fatalf("dump of pid %d helpers %+v", f.PID, f.Helpers)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.stacktrace"))
	if len(names) != 1 {
		t.Errorf("dump files %v, want the rank's only", names)
	}
}

// A restarted job's new incarnation dumps rank 0 where the first one did:
// the earlier dump is moved aside, not overwritten nor mixed.
func TestEarlierIncarnationMovedAside(t *testing.T) {
	dir := t.TempDir()
	for inc, pid := range []int{100, 200} {
		e := env(0, 1)
		e["TORCHELASTIC_RUN_ID"], e["TORCHELASTIC_RESTART_COUNT"] = "job-7", fmt.Sprint(inc)
		b := newBed(t, "node-a", dir, map[int]map[string]string{pid: e}, nil)
		b.HandleEvent(timer.Event{Time: sec, PID: pid, TID: pid, Kind: timer.KindProcessExec})
		work(b.Agent, pid, sec, false)
		b.at(4 * sec)
		b.Tick(context.Background())
		b.Tick(context.Background())
	}
	cur, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(0, 1)))
	if err != nil || cur.PID != 200 || cur.Incarnation != 1 || cur.Job != "job-7" {
		t.Fatalf("current dump %+v %v", cur, err)
	}
	old, err := dumpfile.Read(filepath.Join(dir, timeline.IncarnationsDir, "job-7.0", dumpfile.Name(0, 1)))
	if err != nil || old.PID != 100 || old.Incarnation != 0 {
		t.Fatalf("earlier dump %+v %v", old, err)
	}
}

// A shell that becomes the rank (pyenv's shim: bash that execs python)
// forks a subshell that forks another and exits: the grandchild shares the
// rank's identity, its parent is gone and /proc names a reaper. The traced
// forks keep the ancestry: the grandchild is a helper, never announced.
func TestHelperThroughExitedParent(t *testing.T) {
	envs := map[int]map[string]string{50: env(2, 4), 51: env(2, 4), 52: env(2, 4)}
	b := newBed(t, "node-a", t.TempDir(), envs, func(o *Options) {
		// 51 is gone when looked at; 52 was reparented to init.
		o.Parent = func(pid int) (int, bool) { return map[int]int{50: 1, 52: 1}[pid], false }
	})
	b.HandleEvent(timer.Event{Time: sec, PID: 50, TID: 50, Kind: timer.KindProcessExec})
	b.HandleEvent(timer.Event{Time: sec, PID: 51, TID: 51, Kind: timer.KindProcessExec, Parent: 50})
	b.HandleEvent(timer.Event{Time: sec, PID: 52, TID: 52, Kind: timer.KindProcessExec, Parent: 51})
	b.HandleEvent(timer.Event{Time: sec, PID: 51, TID: 51, Kind: timer.KindProcessExit})
	b.Tick(context.Background())
	if rs := b.events("rank"); len(rs) != 1 || rs[0].PID != 50 {
		t.Fatalf("rank reports %+v, want pid 50 only", rs)
	}
	if h := b.book.Helpers(50); len(h) != 1 || h[0] != 52 {
		t.Errorf("helpers of rank 2: %v, want [52]", h)
	}
}

// pyenv's shim again, when a process of the rank's identity that runs
// Python starts beside the shim before the shim execs Python (a helper the
// shim's scripts run): that process is the rank for a while, then exits,
// and the shim, now the interpreter, is the rank again, and is announced
// again, so that the last announcement of rank 2 names it.
func TestRankAnnouncedAgainAfterDemotion(t *testing.T) {
	envs := map[int]map[string]string{50: env(2, 4), 51: env(2, 4)}
	var mu sync.Mutex
	python := map[int]bool{51: true}
	b := newBed(t, "node-a", t.TempDir(), envs, func(o *Options) {
		o.Parent = func(pid int) (int, bool) {
			mu.Lock()
			defer mu.Unlock()
			return map[int]int{50: 1, 51: 50}[pid], python[pid]
		}
	})
	b.HandleEvent(timer.Event{Time: sec, PID: 50, TID: 50, Kind: timer.KindProcessExec, Parent: 1})
	b.Tick(context.Background())
	b.HandleEvent(timer.Event{Time: sec, PID: 51, TID: 51, Kind: timer.KindProcessExec, Parent: 50})
	b.Tick(context.Background())
	b.HandleEvent(timer.Event{Time: sec, PID: 51, TID: 51, Kind: timer.KindProcessExit})
	mu.Lock()
	python[50] = true
	mu.Unlock()
	b.HandleEvent(timer.Event{Time: sec, PID: 50, TID: 50, Kind: timer.KindProcessExec}) // the shim execs Python
	b.Tick(context.Background())
	rs := b.events("rank")
	var pids []int
	for _, r := range rs {
		pids = append(pids, r.PID)
	}
	if len(pids) == 0 || pids[len(pids)-1] != 50 {
		t.Fatalf("rank reports for pids %v, want the last for pid 50", pids)
	}
	if rs := b.Snapshot().Ranks; len(rs) != 1 || rs[0].PID != 50 {
		t.Errorf("ranks %+v, want pid 50 alone", rs)
	}
}

// Two processes of one identity, alike (neither runs Python yet) and with
// no kinship the book knows of (the second's parent was never seen to
// fork): the one the book knew first is the rank, whatever the map order,
// and the other is announced only once it is the rank alone.
func TestRankTieFirstSeen(t *testing.T) {
	for round := range 20 { // map order varies from run to run
		envs := map[int]map[string]string{60: env(3, 4), 61: env(3, 4)}
		b := newBed(t, "node-a", t.TempDir(), envs, func(o *Options) {
			o.Parent = func(pid int) (int, bool) { return map[int]int{60: 1, 61: 999}[pid], false }
		})
		b.HandleEvent(timer.Event{Time: sec, PID: 60, TID: 60, Kind: timer.KindProcessExec, Parent: 1})
		b.HandleEvent(timer.Event{Time: sec, PID: 61, TID: 61, Kind: timer.KindProcessExec, Parent: 999})
		b.Tick(context.Background())
		if rs := b.events("rank"); len(rs) != 1 || rs[0].PID != 60 {
			t.Fatalf("round %d: rank reports %+v, want pid 60 alone", round, rs)
		}
		b.HandleEvent(timer.Event{Time: sec, PID: 60, TID: 60, Kind: timer.KindProcessExit})
		b.Tick(context.Background())
		if rs := b.events("rank"); len(rs) != 2 || rs[1].PID != 61 {
			t.Fatalf("round %d: after the first exited, rank reports %+v, want pid 61 next", round, rs)
		}
	}
}

// The tracer's notice of a fork comes after the events read with it: a
// process that forked and exited in between stays exited, never revived as
// a rank that no exit will ever end.
func TestNoticeAfterExitRevivesNothing(t *testing.T) {
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{60: env(3, 4)}, nil)
	b.HandleEvent(timer.Event{Time: sec, PID: 60, TID: 60, Kind: timer.KindProcessExec, Parent: 1})
	b.HandleEvent(timer.Event{Time: sec, PID: 60, TID: 60, Kind: timer.KindProcessExit})
	b.HandleNotice(ebpf.Notice{Kind: "exec", PID: 60})
	b.Tick(context.Background())
	if rs := b.Snapshot().Ranks; len(rs) != 0 {
		t.Fatalf("ranks %+v after the process exited", rs)
	}
	if rs := b.events("rank"); len(rs) != 0 {
		t.Fatalf("rank reports %+v", rs)
	}
}

// The agent's own incarnation count reaches the dumps: a job restarted
// under a launcher that sets no restart count dumps rank 0 where its first
// run did; the earlier dump is moved aside, as with torchrun.
func TestCountedIncarnationMovedAside(t *testing.T) {
	dir := t.TempDir()
	e := env(0, 1)
	e["OMPI_COMM_WORLD_RANK"], e["OMPI_COMM_WORLD_SIZE"] = "0", "1"
	b := newBed(t, "node-a", dir, map[int]map[string]string{100: e, 200: e}, nil)
	ctx := context.Background()
	b.HandleEvent(timer.Event{Time: sec, PID: 100, TID: 100, Kind: timer.KindProcessExec})
	work(b.Agent, 100, sec, false)
	b.at(4 * sec)
	b.Tick(ctx)
	b.Tick(ctx)
	if f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(0, 1))); err != nil || f.PID != 100 || f.Incarnation != 0 {
		t.Fatalf("first dump %+v %v", f, err)
	}
	b.HandleEvent(timer.Event{Time: 5 * sec, PID: 100, TID: 100, Kind: timer.KindProcessExit})
	b.HandleEvent(timer.Event{Time: 6 * sec, PID: 200, TID: 200, Kind: timer.KindProcessExec})
	work(b.Agent, 200, 6*sec, false)
	b.at(9 * sec)
	b.Tick(ctx)
	b.Tick(ctx)
	cur, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(0, 1)))
	if err != nil || cur.PID != 200 || cur.Incarnation != 1 || cur.Job != "10.0.0.1:29500" {
		t.Fatalf("current dump %+v %v", cur, err)
	}
	old, err := filepath.Glob(filepath.Join(dir, timeline.IncarnationsDir, "*.0", dumpfile.Name(0, 1)))
	if err != nil || len(old) != 1 {
		t.Fatalf("earlier dumps %v %v, want one in %s/<job>.0", old, err, timeline.IncarnationsDir)
	}
	if f, err := dumpfile.Read(old[0]); err != nil || f.PID != 100 || f.Incarnation != 0 {
		t.Fatalf("earlier dump %+v %v", f, err)
	}
}

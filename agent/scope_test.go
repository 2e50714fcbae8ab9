package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/ranks"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Through the agent: a process out of scope (another namespace, or none
// named) is never a rank: no rank report, no hang, no dump, no metrics,
// even when it hangs and shares the job of ranks in scope; an exec into
// a command in scope makes it one.
func TestOutOfScopeIsNoRank(t *testing.T) {
	dir := t.TempDir()
	envs := map[int]map[string]string{100: env(0, 4), 101: env(1, 4), 102: env(2, 4), 103: env(3, 4)}
	for pid, ns := range map[int]string{100: "train", 101: "train", 102: "other"} {
		envs[pid]["POD_NAMESPACE"] = ns
	}
	inspected := map[int]int{}
	b := newBed(t, "node-a", dir, envs, func(o *Options) {
		o.Scope = &ranks.Scope{Namespaces: []string{"train"}}
		o.Inspect = func(pid int) ranks.Process {
			inspected[pid]++
			return ranks.Process{Cmdline: []string{"python3", "train.py"}}
		}
	})
	ctx := context.Background()
	work(b.Agent, 100, 1*sec, true)
	work(b.Agent, 101, 1*sec, true)
	work(b.Agent, 102, 1*sec, false) // hangs, out of scope
	work(b.Agent, 103, 1*sec, false) // hangs, no namespace named
	work(b.Agent, 100, 3*sec, true)
	work(b.Agent, 101, 3*sec, true)
	b.at(3*sec + 10)
	b.Tick(ctx)
	b.at(4 * sec)
	b.Tick(ctx)
	var ranks []int
	for _, r := range b.events("rank") {
		ranks = append(ranks, r.PID)
	}
	if len(ranks) != 2 || ranks[0]+ranks[1] != 201 {
		t.Fatalf("rank reports for %v, want 100 and 101", ranks)
	}
	if hangs := b.events("hang"); len(hangs) != 0 {
		t.Fatalf("hangs %+v of processes out of scope", hangs)
	}
	for _, pid := range []int{102, 103} {
		if b.capture.count(pid) != 0 || len(b.capture.warmed()) > 2 {
			t.Errorf("pid %d captured or warmed", pid)
		}
		if inspected[pid] != 1 {
			t.Errorf("pid %d inspected %d times, want once", pid, inspected[pid])
		}
	}
	for _, rank := range []int{2, 3} {
		if _, err := os.Stat(filepath.Join(dir, dumpfile.Name(rank, 4))); err == nil {
			t.Errorf("rank %d dumped", rank)
		}
	}
	snap := b.Snapshot()
	if len(snap.Ranks) != 2 {
		t.Fatalf("metrics of %d ranks, want 2: %+v", len(snap.Ranks), snap.Ranks)
	}
	for _, r := range snap.Ranks {
		if r.PID != 100 && r.PID != 101 {
			t.Errorf("metrics of pid %d", r.PID)
		}
	}
	// 103 learns its namespace and execs: now in scope.
	envs[103]["POD_NAMESPACE"] = "train"
	b.HandleEvent(timer.Event{Time: 4 * sec, PID: 103, TID: 103, Kind: timer.KindProcessExec})
	b.at(5 * sec)
	b.Tick(ctx)
	if rs := b.events("rank"); len(rs) != 3 || rs[2].PID != 103 {
		t.Fatalf("after exec: rank reports %+v", rs)
	}
}

// HandleEvents, the tracer's batches, does what HandleEvent one by one
// does: processes interleaved, one out of scope, one without a rank in its
// environment that takes it from its communicator, an exec, an exit, the
// legacy default stream (which the engine renames, not the recorder).
func TestHandleEventsAsOneByOne(t *testing.T) {
	envs := func() map[int]map[string]string {
		e := map[int]map[string]string{100: env(0, 4), 101: env(1, 4), 102: env(2, 4), 103: {"POD_NAMESPACE": "train"}}
		for pid, ns := range map[int]string{100: "train", 101: "train", 102: "other"} {
			e[pid]["POD_NAMESPACE"] = ns
		}
		return e
	}
	mod := func(o *Options) {
		o.Scope = &ranks.Scope{Namespaces: []string{"train"}}
		o.Inspect = func(int) ranks.Process { return ranks.Process{Cmdline: []string{"python3", "train.py"}} }
	}
	one, all := newBed(t, "node-a", t.TempDir(), envs(), mod), newBed(t, "node-a", t.TempDir(), envs(), mod)
	var evs []timer.Event
	at := int64(sec)
	add := func(ev timer.Event) {
		at += 1000
		ev.Time, ev.TID = at, ev.PID
		evs = append(evs, ev)
	}
	for i := range 40 {
		for _, pid := range []int{100, 101, 102, 103} {
			if pid != 100 || i <= 35 {
				add(timer.Event{PID: pid, Kind: timer.KindLaunch, Stream: uint64(1 + i%2), Kernel: "gemm"})
			}
		}
		switch i {
		case 5:
			add(timer.Event{PID: 103, Kind: timer.KindCommInit, Comm: 9, NRanks: 4, Rank: 3})
		case 10, 30:
			for _, pid := range []int{100, 101, 102, 103} {
				add(timer.Event{PID: pid, Kind: timer.KindCollective, Op: timer.OpAllReduce, Comm: 9, Stream: 2, Count: 8, Dtype: 7})
			}
		case 20:
			add(timer.Event{PID: 101, Kind: timer.KindProcessExec})
		case 35:
			add(timer.Event{PID: 100, Kind: timer.KindProcessExit})
		}
	}
	add(timer.Event{PID: 101, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseEnter, Stream: 1})
	for _, ev := range evs {
		one.HandleEvent(ev)
	}
	for i := 0; i < len(evs); i += 7 {
		all.HandleEvents(slices.Clone(evs[i:min(i+7, len(evs))]))
	}
	for _, b := range []*bed{one, all} {
		b.at(at + 3*sec)
		b.Tick(context.Background())
	}
	procs := one.engine.Processes()
	if !slices.Equal(procs, []int{101, 103}) || !slices.Equal(all.engine.Processes(), procs) {
		t.Fatalf("engine processes %v one by one, %v in batches; want [101 103]", procs, all.engine.Processes())
	}
	for _, pid := range []int{100, 101, 102, 103} {
		s1, ok1 := one.engine.State(pid, at)
		s2, ok2 := all.engine.State(pid, at)
		r1, n1 := one.rec.Events(pid)
		r2, n2 := all.rec.Events(pid)
		id1, _ := one.identity(pid)
		id2, _ := all.identity(pid)
		if !reflect.DeepEqual(s1, s2) || ok1 != ok2 || !reflect.DeepEqual(r1, r2) || n1 != n2 || id1 != id2 {
			t.Errorf("pid %d: one by one state %+v %v, %d records, identity %+v; in batches %+v %v, %d records, identity %+v",
				pid, s1, ok1, len(r1), id1, s2, ok2, len(r2), id2)
		}
	}
	kinds := func(b *bed) (out []string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, r := range b.reports {
			rank := -1
			if r.Rank != nil {
				rank = *r.Rank
			}
			out = append(out, fmt.Sprint(r.Event, r.PID, "/", rank))
		}
		return out
	}
	if k1, k2 := kinds(one), kinds(all); !slices.Equal(k1, k2) || len(one.events("hang")) != 1 {
		t.Errorf("reports one by one %v, in batches %v; want one hang", k1, k2)
	}
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// On a 4-rank testbed job, followed from its launcher, every rank's
// communicator gets the same CommID, and every rank's gradient all-reduces
// run on that communicator. The libraries are named ahead (as the agent
// does with XPU_TIMER_LIBRARIES): a testbed rank calls ncclCommInitRank
// within milliseconds of loading libnccl, sooner than a scan of its maps
// can probe it.
func TestCommIDSameOnEveryRank(t *testing.T) {
	privileged.Root(t)
	bed := testbed.Build(t)
	libs := []string{bed.Lib("libcudart.so.12"), bed.Lib("libcuda.so.1"), bed.Lib("libnccl.so.2")}
	tr := newTracer(t, Options{Libraries: libs})
	rec := record(t, tr)
	if st := tr.Stats(); st.Probes == 0 {
		t.Fatalf("nothing probed ahead: %+v", st)
	}
	job := bed.StartJob(t, testbed.JobOptions{NProc: 4, Steps: 3, Args: []string{"--step-ms", "5"}})
	if err := tr.Follow(job.Cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	pids, err := job.RankPIDs(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := job.Wait(60 * time.Second); err != nil || code != 0 {
		t.Fatalf("job: code %d, %v\n%s", code, err, job.Output())
	}
	rec.waitFor(t, "every rank's exit", func(evs []timer.Event, _ []Notice) bool {
		for _, pid := range pids {
			if !hasEvent(evs, pid, timer.KindProcessExit) {
				return false
			}
		}
		return true
	})
	var id [16]byte
	for rank, pid := range pids {
		var init *timer.Event
		allReduces := 0
		for _, e := range rec.of(pid) {
			switch {
			case e.Kind == timer.KindCommInit && e.Ret == 0:
				if init != nil {
					t.Errorf("rank %d: a second communicator %+v", rank, e)
				}
				init = &e
			case e.Kind == timer.KindCollective && e.Op == timer.OpAllReduce:
				if init == nil || e.Comm != init.Comm {
					t.Errorf("rank %d: all-reduce on comm %#x, not the one created (%+v)", rank, e.Comm, init)
				}
				allReduces++
			}
		}
		if init == nil {
			t.Errorf("rank %d (pid %d): no communicator seen", rank, pid)
			continue
		}
		if init.Rank != int32(rank) || init.NRanks != 4 || init.CommID == ([16]byte{}) {
			t.Errorf("rank %d: communicator %+v", rank, *init)
		}
		if id == ([16]byte{}) {
			id = init.CommID
		} else if init.CommID != id {
			t.Errorf("rank %d: comm id %x, rank before it %x", rank, init.CommID, id)
		}
		if allReduces == 0 {
			t.Errorf("rank %d: no all-reduce", rank)
		}
	}
	t.Logf("comm id %x on all %d ranks", id, len(pids))
}

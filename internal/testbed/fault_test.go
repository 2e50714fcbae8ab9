package testbed

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// hold is how long a hung job must show no progress; at 5 ms steps a healthy
// job would finish dozens of steps meanwhile.
const hold = 1500 * time.Millisecond

// deviceWaits are the faults that leave the faulty rank's main thread
// waiting on the device, in a synchronize, a launch or a free that spins
// by default.
var deviceWaits = []string{FaultKernelHang, FaultTritonHang, FaultGraphHang, FaultQueueFull, FaultLaunchBlocking, FaultFreeSync}

// TestFaultsHang starts every fault kind for both vendors and checks that the
// job hangs after the fault step (a real hang, not a crash): no rank makes
// progress, while a thread waiting on the device spins in state R as on a
// real GPU. Then Stop must leave nothing behind.
func TestFaultsHang(t *testing.T) {
	b := Build(t)
	const rank, step, steps = 1, 3, 30
	for _, v := range vendors {
		for _, f := range append(slices.Clip(Faults), CallFaults...) {
			t.Run(v+"/"+f, func(t *testing.T) {
				t.Parallel()
				j := b.StartJob(t, JobOptions{NProc: 4, Steps: steps, Vendor: v, Fault: f, FaultRank: rank,
					FaultStep: step, Args: []string{"--step-ms", "5"}})
				pids, err := j.RankPIDs(60 * time.Second)
				if err != nil {
					t.Fatalf("%v\n%s", err, j.Output())
				}
				for r := 0; r < 4; r++ {
					if err := j.WaitStep(r, step-1, 60*time.Second); err != nil {
						t.Fatalf("%v\n%s", err, j.Output())
					}
				}
				time.Sleep(hold) // not a timing assertion: the window in which progress would show
				if j.Exited() {
					t.Fatalf("job exited instead of hanging\n%s", j.Output())
				}
				for r := 0; r < 4; r++ {
					// A rank may finish the fault step only when its own work
					// of that step never depended on the lost collective.
					if s := j.LastStep(r); s > step || (s == step && r != rank) {
						t.Errorf("rank %d reached step %d after a %s fault at step %d of rank %d", r, s, f, step, rank)
					}
				}
				for r, pid := range pids {
					ts, err := Threads(pid)
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
					var desc []string
					for _, th := range ts {
						if r == rank && th.TID == pid && slices.Contains(deviceWaits, f) && th.State != "R" {
							// Spinning is running or runnable, whenever sampled.
							t.Errorf("rank %d's main thread, waiting on the device, is in state %s, want R (a spinning synchronize)", r, th.State)
						}
						desc = append(desc, fmt.Sprintf("%s:%s:%s", th.Name, th.State, th.WChan))
						if th.State == "R" {
							// sampled once: a sleeping thread may be on its way back to sleep
							t.Logf("rank %d thread %s running", r, th.Name)
						}
					}
					t.Logf("rank %d pid %d last step %d: %s", r, pid, j.LastStep(r), strings.Join(desc, " "))
				}
				j.Stop()
				assertClean(t, j, pids)
			})
		}
	}
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"bytes"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// attachWays are the two ways of probing a library, with rings large
// enough that the reader keeps up with 250,000 records a second: a lost
// record would read as a call without its return, or a launch alone.
var attachWays = []struct {
	name string
	opts Options
}{
	{"uprobe_multi", Options{RingBufferBytes: 64 << 20}},
	{"single uprobes", Options{SingleProbes: true, RingBufferBytes: 64 << 20}},
}

// A process that synchronizes in a tight loop while its library is
// probed: every call seen entering is seen returning. A call that began
// between the attach of the entry probe and that of the return probe
// would otherwise stay outstanding, a thread waiting forever in a
// synchronize that returned: a false hang (attachProbe).
func TestAttachWhileCalling(t *testing.T) {
	privileged.Root(t)
	bed := testbed.Build(t)
	for _, c := range attachWays {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracer(t, c.opts)
			rec := record(t, tr)
			// Synchronizes an idle stream for good (a call takes well under
			// a microsecond unprobed); killed a second after the probes.
			cmd := exec.Command(bed.Bin("launchloop"), "1000000000000", "--call", "sync")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // its runtime loaded, the loop running
			if err := tr.Follow(cmd.Process.Pid); err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			cmd.Process.Kill()
			cmd.Wait()
			pid := cmd.Process.Pid
			rec.waitFor(t, "its exit", func(evs []timer.Event, _ []Notice) bool {
				return hasEvent(evs, pid, timer.KindProcessExit)
			})
			enters, exits := 0, 0
			for _, e := range rec.of(pid) {
				if e.Kind != timer.KindStreamSynchronize {
					continue
				}
				if e.Phase == timer.PhaseEnter {
					enters++
				} else {
					exits++
				}
			}
			lost := int(tr.Stats().Lost)
			t.Logf("%d synchronizes seen entering, %d returning, %d records lost", enters, exits, lost)
			if enters == 0 {
				t.Fatal("no synchronize seen: the loop ended before the probes")
			}
			// The kill may end one call midway; a record overwritten
			// before it was read is counted lost.
			if enters-exits > 1+lost || exits > enters+lost {
				t.Errorf("%d synchronizes seen entering and %d returning, %d records lost: every one but the last returned", enters, exits, lost)
			}
		})
	}
}

// Attached to processes that launch and then synchronize the stream in a
// loop, the probes never show a launch whose synchronize went unseen:
// from the first launch seen on, launches and synchronizes alternate. The
// synchronize's entry goes live before the launch's (issuersLast); the
// other way round, the launches made in between were seen alone, and the
// engine awaited them until a later synchronize (a hang in that step
// named a kernel long done). Four processes, the library attached in
// each, beside busy loops, so that the tracer's thread may wait for a CPU
// between two programs' attaches, as on a loaded node. With the issuers
// attached first, attaches with single uprobes showed launches alone
// most times, those with uprobe_multi links at times
// (docs/measurements.md).
func TestAttachIssuersLast(t *testing.T) {
	privileged.Root(t)
	bed := testbed.Build(t)
	for _, c := range attachWays {
		runs := 6
		if c.opts.SingleProbes {
			runs = 2 // a detach takes seconds
		}
		for i := range runs {
			t.Run(fmt.Sprintf("%s/%d", c.name, i), func(t *testing.T) {
				tr := newTracer(t, c.opts)
				// Run last, once the processes are gone: the detaches
				// (seconds of single uprobes) end within the run, not
				// behind the package's last test.
				defer func() { tr.Close(); tr.f.closing.Wait() }()
				rec := record(t, tr)
				for range runtime.NumCPU() + 1 {
					busy := exec.Command("sh", "-c", "while :; do :; done")
					if err := busy.Start(); err != nil {
						t.Fatal(err)
					}
					defer func() { busy.Process.Kill(); busy.Wait() }()
				}
				var pids []int
				for range 4 {
					cmd := exec.Command(bed.Bin("launchloop"), "1000000000000", "--call", "launch-sync")
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					defer func() { cmd.Process.Kill(); cmd.Wait() }()
					pids = append(pids, cmd.Process.Pid)
				}
				time.Sleep(100 * time.Millisecond) // their runtimes loaded, the loops running
				for _, pid := range pids {
					if err := tr.Follow(pid); err != nil {
						t.Fatal(err)
					}
				}
				rec.waitFor(t, "launches of each", func(evs []timer.Event, _ []Notice) bool {
					n := map[int]int{}
					for _, e := range evs {
						if e.Kind == timer.KindLaunch {
							n[e.PID]++
						}
					}
					return !slices.ContainsFunc(pids, func(p int) bool { return n[p] < 100 })
				})
				if lost := tr.Stats().Lost; lost > 0 {
					t.Fatalf("%d records lost: the sequences have holes", lost)
				}
				for _, pid := range pids {
					var seq []byte // L a launch, S a synchronize's entry
					for _, e := range rec.of(pid) {
						switch {
						case e.Kind == timer.KindLaunch:
							seq = append(seq, 'L')
						case e.Kind == timer.KindStreamSynchronize && e.Phase == timer.PhaseEnter:
							seq = append(seq, 'S')
						}
					}
					if first := bytes.IndexByte(seq, 'L'); first < 0 || bytes.Contains(seq[first:], []byte("LL")) {
						t.Errorf("pid %d: a launch seen without the synchronize after it: %.60s", pid, seq[max(first, 0):])
					}
				}
			})
		}
	}
}

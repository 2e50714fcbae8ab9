//go:build linux && (386 || amd64)

package ebpf

import (
	"os/exec"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// A process that synchronizes in a tight loop while its library is
// probed: every call seen entering is seen returning. A call that began
// between the attach of the entry probe and that of the return probe
// would otherwise stay outstanding, a thread waiting forever in a
// synchronize that returned: a false hang (attachProbe).
func TestAttachWhileCalling(t *testing.T) {
	privileged.Root(t)
	bed := testbed.Build(t)
	for _, c := range []struct {
		name string
		opts Options
	}{
		// Rings large enough that the reader keeps up with 250,000
		// records a second: a lost return would read as an orphan.
		{"uprobe_multi", Options{RingBufferBytes: 64 << 20}},
		{"single uprobes", Options{SingleProbes: true, RingBufferBytes: 64 << 20}},
	} {
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

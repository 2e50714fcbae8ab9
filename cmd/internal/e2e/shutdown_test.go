package e2e

import (
	"os/exec"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// TestLauncherExitsWithJob runs a short healthy job under the launcher five
// times while two busy loops load both CPUs: each time the launcher exits
// with the job's status within 5 s of the job's last line, although the
// job's libraries were probed (their links detach in the background).
func TestLauncherExitsWithJob(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	for range 2 {
		hog := exec.Command("sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	}
	for i := range 5 {
		p := launch(t, b, job{steps: 8, extra: []string{"--step-ms", "10"}}, t.TempDir(), timeout)
		code := p.waitExit(2 * time.Minute)
		exited := time.Now() // Done closes once it exited and its output is read
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i, code, tail(p.output(), 30))
		}
		lines := p.Lines(0)
		var last time.Time
		for _, l := range lines {
			if _, _, ok := testbed.StepDone(l.Text); ok {
				last = l.At
			}
		}
		if last.IsZero() {
			t.Fatalf("run %d: no step done\n%s", i, tail(p.output(), 30))
		}
		took := exited.Sub(last)
		t.Logf("run %d: the launcher exited %v after the job's last step", i, took.Round(time.Millisecond))
		if took > 5*time.Second {
			t.Errorf("run %d: the launcher exited %v after its job's last step, want within 5s", i, took)
		}
	}
}

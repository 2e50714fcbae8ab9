package procfs

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// KillGroup ends a process group and everything in it.
func TestKillGroup(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 60 & sleep 60; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := KillGroup(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("wait: %v", err)
	}
	// The group is gone: signalling it fails, once init has reaped the
	// background sleep (a zombie can still be signalled).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := syscall.Kill(-cmd.Process.Pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group still there 10 s after SIGKILL: %v", err)
		}
	}
}
